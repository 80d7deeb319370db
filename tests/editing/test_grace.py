"""GRACE: the codebook rule on hand-worked cases, the query positions of a forward, and
edits of the real SmolLM2 that change the edited answer and nothing the codebook does
not match."""

from __future__ import annotations

import contextlib
import math
from dataclasses import replace

import pytest
import torch

from kebench.editing.codebook import Codebook
from kebench.editing.delta import (
    apply_delta,
    delta_applied,
    load_delta,
    revert_delta,
    save_delta,
)
from kebench.editing.interface import EditContext, HparamsError
from kebench.editing.methods.grace import GRACEHyperParams, place_query
from kebench.editing.module_hooks import query_rows
from kebench.editing.registry import get_method
from kebench.editing.runner import make_job
from kebench.models.logprobs import score_answers
from tests.editing.cases import demo_requests, project_hparams, stream_deltas

# the faithful file's settings, fewer steps: these tests check what a codebook does
CHEAP = {"n_iter": 20}


def codebook(keys: list[list[float]], radii: list[float], labels: list[int]):
    n = len(keys)
    return Codebook(
        ids=torch.arange(n),
        keys=torch.tensor(keys, dtype=torch.float32),
        values=torch.zeros(n, 3),
        radii=torch.tensor(radii, dtype=torch.float32),
        labels=torch.tensor(labels),
    )


def hparams(**changes) -> GRACEHyperParams:
    values = {"layers": [0], "rewrite_module_tmp": "m.{}", "eps": 1.0, **changes}
    return GRACEHyperParams.from_dict(values)


NEW_VALUE = torch.full((3,), 0.5)


def test_an_empty_codebook_takes_the_query_as_its_first_key():
    book, row = place_query(
        Codebook.empty(2, 3), torch.tensor([3.0, 4.0]), NEW_VALUE, (7, 1), hparams()
    )
    assert book.keys.tolist() == [[3.0, 4.0]] and book.radii.tolist() == [1.0]
    assert book.ids.tolist() == [7] and book.labels.tolist() == [1] and row == 0
    assert book.values.tolist() == [[0.5, 0.5, 0.5]]


def test_a_query_out_of_reach_adds_an_entry():
    # |(3, 4) - (0, 0)| = 5 > eps + radius = 2
    book, row = place_query(
        codebook([[0, 0]], [1.0], [1]),
        torch.tensor([3.0, 4.0]),
        NEW_VALUE,
        (7, 1),
        hparams(),
    )
    assert book.keys.tolist() == [[0, 0], [3, 4]] and book.radii.tolist() == [1, 1]
    assert row == 1


def test_a_query_in_reach_for_another_answer_splits_the_distance():
    # |(1.2, 1.6)| = 2 = eps + radius: within reach; labels 1 and 2 differ
    book, row = place_query(
        codebook([[0, 0]], [1.0], [1]),
        torch.tensor([1.2, 1.6]),
        NEW_VALUE,
        (7, 2),
        hparams(),
    )
    assert book.radii.tolist() == pytest.approx([1 - 1e-5, 1.0])
    assert book.labels.tolist() == [1, 2] and row == 1


@pytest.mark.parametrize(
    ("expand", "key"), [("coverage", [0.0, 0.0]), ("moving_average", [0.6, 0.8])]
)
def test_a_query_in_reach_for_the_same_answer_grows_the_radius(expand, key):
    book, row = place_query(
        codebook([[0, 0]], [1.0], [1]),
        torch.tensor([1.2, 1.6]),
        NEW_VALUE,
        (7, 1),
        hparams(eps_expand=expand),
    )
    assert len(book) == 1 and row == 0
    assert book.radii.tolist() == pytest.approx([2.0])
    assert book.keys[0].tolist() == pytest.approx(key)


def test_codebooks_merge_by_entry_id_a_later_one_winning():
    first = codebook([[0, 0], [1, 1]], [1.0, 1.0], [1, 1])
    later = Codebook(
        ids=torch.tensor([1, 5]),
        keys=torch.tensor([[1.0, 1.0], [9.0, 9.0]]),
        values=torch.ones(2, 3),
        radii=torch.tensor([0.25, 1.0]),
        labels=torch.tensor([1, 2]),
    )
    merged = Codebook.merged([first, later])
    assert merged.ids.tolist() == [0, 1, 5]
    assert merged.radii.tolist() == [1.0, 0.25, 1.0]
    assert later.changed_since(first).ids.tolist() == [1, 5]


def test_easyedits_inner_params_name_the_module():
    values = {"inner_params": ["model.layers[27].mlp.down_proj.weight"]}
    assert GRACEHyperParams.from_dict(values).module_path == (
        "model.layers.27.mlp.down_proj"
    )
    with pytest.raises(HparamsError, match="replacement"):
        hparams(replacement="replace_all")
    with pytest.raises(HparamsError, match="one layer"):
        hparams(layers=[1, 2])


class Cache:
    """A cache as a forward receives it: only its length is read."""

    def __init__(self, length: int) -> None:
        self.length = length

    def get_seq_length(self) -> int:
        return self.length


def test_the_query_is_each_rows_last_kept_token_of_a_fresh_forward():
    ids = torch.zeros(3, 4, dtype=torch.long)
    left = torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1], [0, 1, 1, 1]])
    right = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0]])
    assert query_rows({"input_ids": ids, "attention_mask": left}, ()).tolist() == [
        3,
        3,
        3,
    ]
    assert query_rows({"input_ids": ids, "attention_mask": right}, ()).tolist() == [
        1,
        3,
        2,
    ]
    assert query_rows({"input_ids": ids}, ()).tolist() == [3, 3, 3]
    assert query_rows({"input_ids": ids, "cache": Cache(0)}, ()).tolist() == [3, 3, 3]
    assert query_rows({"input_ids": ids, "cache": Cache(5)}, ()) is None


@pytest.fixture(scope="module")
def grace_setup(lm, stats_dir):
    entry = get_method("GRACE")
    values = {**project_hparams("faithful")["GRACE"], **CHEAP}
    return entry, entry.hparams.from_dict(values), EditContext(stats_dir)


def scores(lm, prompts, answers):
    return [s.logprob for s in score_answers(lm.model, lm.tokenizer, prompts, answers)]


@pytest.mark.model
def test_an_edit_takes_and_nothing_else_moves(lm, grace_setup, tmp_path):
    """The edit prompt answers the new target; prompts the codebook does not match
    (another subject, the same prompt under a prefix) score bit for bit as before; the
    weights never change; the delta comes off exactly and reads back from its file."""
    entry, hparams, context = grace_setup
    request = demo_requests()[0]
    base = {name: t.clone() for name, t in lm.model.state_dict().items()}
    delta = entry.compute(lm, [request], hparams, context)
    (book,) = delta.codebooks.values()
    assert not delta.params and len(book) == 1
    others = ["Angela Merkel is a citizen of", "Note: " + request.text]
    answers = [request.target_new, request.target_new]
    before_edit = scores(lm, [request.text], [request.target_new])
    before_others = scores(lm, others, answers)
    applied = apply_delta(lm.model, delta)
    try:
        (after,) = score_answers(
            lm.model, lm.tokenizer, [request.text], [request.target_new]
        )
        assert scores(lm, others, answers) == before_others
        for name, tensor in lm.model.state_dict().items():
            assert torch.equal(tensor, base[name]), name
    finally:
        revert_delta(lm.model, applied)
    assert after.argmax_ids == after.answer_ids  # the new answer, token for token
    assert after.logprob > math.log(0.5) > before_edit[0]
    assert scores(lm, [request.text], [request.target_new]) == before_edit
    save_delta(delta, tmp_path / "grace.safetensors")
    with delta_applied(lm.model, load_delta(tmp_path / "grace.safetensors")):
        assert scores(lm, [request.text], [request.target_new]) == [after.logprob]


@pytest.mark.model
def test_a_stream_keeps_each_edit_and_resumes_from_files(lm, grace_setup, tmp_path):
    """Three edits in sequence: the codebook grows by one entry per edit (keys far
    apart), every edit still answers its target with all applied, and a stream killed
    after two edits and run again reads them back and makes the same third delta."""
    _, hparams, context = grace_setup
    requests = demo_requests()[:3]
    values = {**project_hparams("faithful")["GRACE"], **CHEAP}
    job = make_job("GRACE", values, "sequential", "GRACE")

    deltas = stream_deltas(lm, requests, job, tmp_path / "whole", context)
    assert [len(next(iter(d.codebooks.values()))) for d in deltas] == [1, 1, 1]
    assert [d.meta["entries"] for d in deltas] == ["1", "2", "3"]
    with all_applied(lm, deltas):
        found = score_answers(
            lm.model,
            lm.tokenizer,
            [r.text for r in requests],
            [r.target_new for r in requests],
        )
    assert all(s.argmax_ids == s.answer_ids for s in found)
    stream_deltas(lm, requests[:2], job, tmp_path / "resumed", context)
    # the rerun replays the two stored edits and makes only the third
    (third,) = stream_deltas(lm, requests, job, tmp_path / "resumed", context)
    (path,) = deltas[2].codebooks
    assert torch.equal(third.codebooks[path].values, deltas[2].codebooks[path].values)


def all_applied(lm, deltas) -> contextlib.ExitStack:
    stack = contextlib.ExitStack()
    for delta in deltas:
        stack.enter_context(delta_applied(lm.model, delta))
    return stack


@pytest.mark.model
def test_a_warm_value_before_training_is_the_modules_own_output(lm, grace_setup):
    """``val_init: warm`` starts the value at the module's output at the query
    position: with no training step, the codebook replaces that output by itself,
    and the edit prompt scores as before, to float rounding: the value comes from
    the edit's own forward pass, whose shapes (and so, on some CPUs, whose kernels'
    last bits) differ from the scoring pass's (5e-7 apart on an AMD EPYC)."""
    entry, hparams, context = grace_setup
    request = demo_requests()[0]
    warm = replace(hparams, val_init="warm", n_iter=0)
    delta = entry.compute(lm, [request], warm, context)
    before = scores(lm, [request.text], [request.target_new])
    with delta_applied(lm.model, delta):
        after = scores(lm, [request.text], [request.target_new])
    assert after == pytest.approx(before, rel=0, abs=1e-5)
