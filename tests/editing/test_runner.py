"""The edit runner on the real model: modes, diverging edits, resume, the delta store."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
import torch

from kebench.editing.delta import apply_delta, revert_delta
from kebench.editing.interface import EditContext
from kebench.editing.quality import measure_edits
from kebench.editing.registry import get_method
from kebench.editing.runner import make_job, run_job, select_methods
from kebench.editing.store import DeltaStore, file_stem
from kebench.models.logprobs import score_answers
from kebench.schemas import EDIT_DELTAS
from tests.editing.cases import demo_requests, project_hparams


@pytest.fixture(scope="module")
def demo():
    return demo_requests()


@pytest.fixture(scope="module")
def hparams():
    return project_hparams()


def run(lm, requests, jobs, *, store, context):
    outcomes = []
    for job in jobs:
        for outcome in run_job(
            lm, requests, job, store=store, context=context, max_relative_norm=1.0
        ):
            store.write(outcome)
            outcomes.append(outcome)
    return outcomes


def test_method_selection():
    available = ["FT-M", "IKE", "ROME"]
    assert select_methods("ROME", available) == ["ROME"]
    assert select_methods("ROME+IKE", available) == ["ROME", "IKE"]
    assert select_methods(["IKE"], available) == ["IKE"]
    assert select_methods("all", available) == available
    with pytest.raises(ValueError, match=r"no hparams for \['MEMIT'\]"):
        select_methods("ROME+MEMIT", available)
    # a name no method has is unknown, and the error lists the methods there are
    with pytest.raises(
        ValueError, match=r"unknown editing method \['NOPE'\].*'MEMIT'.*'ROME'"
    ):
        select_methods("ROME+NOPE", available)


def test_jobs_check_their_mode(hparams):
    with pytest.raises(ValueError, match="batch mode needs e.g. MEMIT"):
        make_job("ROME", hparams["ROME"], "batch", "ROME")
    with pytest.raises(ValueError, match="unknown editing mode"):
        make_job("ROME", hparams["ROME"], "parallel", "ROME")
    assert (
        make_job(
            "MEMIT", {**hparams["MEMIT"], "batch_size": 4}, "batch", "MEMIT"
        ).batch_size
        == 4
    )


def test_file_stems_are_safe_and_distinct():
    assert file_stem("demo-3") == "demo-3"
    assert file_stem("a/b") != file_stem("a_b")
    assert "/" not in file_stem("a/b")


@pytest.mark.model
def test_a_diverging_edit_is_recorded_as_failed_and_the_run_goes_on(
    lm, demo, hparams, stats_dir, tmp_path
):
    store = DeltaStore(tmp_path)
    exploding = {**hparams["FT-M"], "lr": 1.0e3, "num_steps": 3}
    jobs = [
        make_job("FT-M", exploding, "single", "FT-M"),
        make_job("IKE", hparams["IKE"], "single", "IKE"),
    ]
    base = {n: t.clone() for n, t in lm.model.state_dict().items()}
    outcomes = run(
        lm,
        demo[:2],
        jobs,
        store=store,
        context=EditContext(stats_dir, pool=demo),
    )
    assert [o.row["status"] for o in outcomes] == ["failed", "failed", "ok", "ok"]
    for outcome in outcomes[:2]:
        assert outcome.row["reason"].startswith("diverged: ")
        assert outcome.delta is None and outcome.row["delta_file"] is None
    manifest = EDIT_DELTAS.validate(store.manifest())
    assert list(manifest["method"]) == ["FT-M", "FT-M", "IKE", "IKE"]
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name


@pytest.mark.model
def test_sequential_edits_accumulate_and_are_undone_after_the_run(
    lm, demo, hparams, stats_dir, tmp_path
):
    store = DeltaStore(tmp_path)
    requests = [demo[0], demo[13], demo[28]]  # three subjects, three relations
    job = make_job("ROME", hparams["ROME"], "sequential", "ROME")
    base = {n: t.clone() for n, t in lm.model.state_dict().items()}
    outcomes = run(
        lm,
        requests,
        [job],
        store=store,
        context=EditContext(stats_dir, pool=demo),
    )
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name
    deltas = [store.load(o.row["delta_file"]) for o in outcomes]
    prompts = [r.text for r in requests]
    base_true = score_answers(
        lm.model, lm.tokenizer, prompts, [r.target_true for r in requests]
    )
    applied = [apply_delta(lm.model, d) for d in deltas]
    try:
        new = score_answers(
            lm.model, lm.tokenizer, prompts, [r.target_new for r in requests]
        )
    finally:
        for done in reversed(applied):
            revert_delta(lm.model, done)
    # Every edit holds once all are in: the later ones did not undo the earlier ones.
    assert all(n.logprob > b.logprob for n, b in zip(new, base_true, strict=True))
    # The second delta was computed on top of the first, so it differs from a fresh edit.
    single = make_job("ROME", hparams["ROME"], "single", "ROME")
    alone = run(
        lm,
        requests[1:2],
        [single],
        store=store,
        context=EditContext(stats_dir, pool=demo),
    )
    fresh = store.load(alone[0].row["delta_file"])
    ((name, change),) = fresh.params.items()
    assert not torch.equal(
        change.tensors["left"], deltas[1].params[name].tensors["left"]
    )


@pytest.mark.model
def test_batch_mode_stores_one_delta_for_a_batch(
    lm, demo, hparams, stats_dir, tmp_path
):
    store = DeltaStore(tmp_path)
    job = make_job("MEMIT", {**hparams["MEMIT"], "batch_size": 3}, "batch", "MEMIT")
    context = EditContext(stats_dir, pool=demo)
    outcomes = run(lm, demo[:3], [job], store=store, context=context)
    files = {o.row["delta_file"] for o in outcomes}
    assert len(files) == 1 and next(iter(files)).startswith("MEMIT/batch/batch-")
    assert [o.delta is not None for o in outcomes] == [True, False, False]
    delta = store.load(next(iter(files)))
    for change in delta.params.values():
        assert change.kind == "low_rank" and change.tensors["left"].shape[1] == 3
    quality = measure_edits(lm, demo[:3], [delta] * 3, [])
    assert sum(q.edit_succ for q in quality) >= 2


@pytest.mark.model
def test_a_rerun_skips_stored_edits_and_redoes_changed_ones(
    lm, demo, hparams, stats_dir, tmp_path
):
    store = DeltaStore(tmp_path)
    context = EditContext(stats_dir, pool=demo)
    job = make_job("ROME", hparams["ROME"], "single", "ROME")
    first = run(lm, demo[:2], [job], store=store, context=context)
    assert len(first) == 2
    assert run(lm, demo[:2], [job], store=store, context=context) == []
    changed = make_job("ROME", {**hparams["ROME"], "v_lr": 0.5}, "single", "ROME")
    redone = run(lm, demo[:2], [changed], store=store, context=context)
    assert [o.row["case_id"] for o in redone] == [r.case_id for r in demo[:2]]
    assert {o.row["fingerprint"] for o in redone}.isdisjoint(
        {o.row["fingerprint"] for o in first}
    )
    (quality,) = measure_edits(
        lm, demo[:1], [store.load(redone[0].row["delta_file"])], []
    )
    assert quality.edit_succ


def delta_cosine(lm, first, second) -> float:
    ours = {n: c.full(lm.model.get_parameter(n)) for n, c in first.params.items()}
    theirs = {n: c.full(lm.model.get_parameter(n)) for n, c in second.params.items()}
    dot = sum(float((ours[n] * theirs[n]).sum()) for n in theirs)
    norms = [
        sum(float(t.pow(2).sum()) for t in d.values()) ** 0.5 for d in (ours, theirs)
    ]
    return dot / (norms[0] * norms[1])


@pytest.mark.model
def test_single_mode_computes_a_group_of_edits_each_as_alone(
    lm, demo, stats_dir, tmp_path, caplog
):
    """ROME's single-mode edits are computed value_batch at a time; each delta is the
    one computed alone, and an edit that raises inside a group fails alone, named,
    while the group's other edits are computed."""
    caplog.set_level(logging.INFO, logger="kebench.editing.runner")
    rome = get_method("ROME")

    def refuse(requests):
        if any(r.case_id == "refused" for r in requests):
            raise ValueError("refused by the test's wrapper")

    def compute(lm_, requests, hparams_, context):
        refuse(requests)
        return rome.compute(lm_, requests, hparams_, context)

    def compute_each(lm_, requests, hparams_, context):
        refuse(requests)
        return rome.compute_each(lm_, requests, hparams_, context)

    wrapped = replace(rome, compute=compute, compute_each=compute_each)
    rome_hparams = project_hparams()["ROME"]
    job = replace(make_job("ROME", rome_hparams, "single", "ROME"), method=wrapped)
    # groups of two: the first computed together, the second falls back to one by one
    requests = [demo[0], demo[2], replace(demo[1], case_id="refused"), demo[3]]
    alone = run(
        lm,
        requests,
        [job],
        store=DeltaStore(tmp_path / "alone"),
        context=EditContext(stats_dir, pool=demo, value_batch=1),
    )
    assert "together failed" not in caplog.text
    together = run(
        lm,
        requests,
        [job],
        store=DeltaStore(tmp_path / "together"),
        context=EditContext(stats_dir, pool=demo, value_batch=2),
    )
    assert caplog.text.count("2 edits together failed") == 1
    for outcomes in (alone, together):
        assert [
            (o.row["case_id"], o.row["order"], o.row["status"]) for o in outcomes
        ] == [
            (demo[0].case_id, 0, "ok"),
            (demo[2].case_id, 1, "ok"),
            ("refused", 2, "failed"),
            (demo[3].case_id, 3, "ok"),
        ]
        assert outcomes[2].row["reason"] == "ValueError: refused by the test's wrapper"
    for one, grouped in zip(alone, together, strict=True):
        if one.delta is not None:
            assert delta_cosine(lm, one.delta, grouped.delta) > 0.99999  # noqa: PLR2004


@pytest.mark.model
def test_a_group_half_stored_is_computed_whole_again(lm, demo, stats_dir, tmp_path):
    """A run killed between two saves of one group: the rerun computes the group whole,
    so the missing edit's delta is bit for bit the uninterrupted run's."""
    job = make_job("ROME", project_hparams()["ROME"], "single", "ROME")
    context = EditContext(stats_dir, pool=demo, value_batch=2)
    uninterrupted = run(
        lm, demo[:2], [job], store=DeltaStore(tmp_path / "whole"), context=context
    )
    killed = DeltaStore(tmp_path / "killed")
    killed.write(uninterrupted[0])  # the first of the group was saved, then the kill
    (resumed,) = run(lm, demo[:2], [job], store=killed, context=context)
    assert resumed.row["case_id"] == demo[1].case_id
    expected = uninterrupted[1].delta.params
    for name, change in resumed.delta.params.items():
        for key, tensor in change.tensors.items():
            assert torch.equal(tensor, expected[name].tensors[key]), f"{name}/{key}"
