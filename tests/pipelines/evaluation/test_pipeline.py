"""evaluation on the demo with the real SmolLM2: scores, metrics, report, MLflow."""

from __future__ import annotations

import json
import logging
import re
import shutil

import pandas as pd
import pytest

from kebench.pipelines.evaluation.metric_nodes import compute_metrics, track_metrics
from kebench.pipelines.evaluation.nodes import (
    find_joint_drops,
    list_failed_edits,
    plan_score_shards,
    select_edits,
)
from kebench.pipelines.mitigation.nodes import select_mitigation_edits
from kebench.pipelines.stealthiness.nodes import select_stealth_edits
from kebench.project import load_config, project_catalog, run_pipeline
from kebench.schemas import METRICS, PROBE_SCORES
from tests.helpers import plain_logprob
from tests.pipelines.conftest import DEMO_EDITS


@pytest.fixture(scope="module")
def evaluated(evaluated_root):
    """The catalog of the shared demo run (tests/pipelines/conftest.py)."""
    return project_catalog(DEMO_EDITS, evaluated_root)


@pytest.mark.model
def test_pipeline_logprobs_match_a_plain_computation(evaluated, lm):
    scores = evaluated.load("probe_scores")
    probes = evaluated.load("probes").set_index("probe_id")
    floor = scores[
        (scores["method"] == "unedited") & scores["lp_base_old"].notna()
    ].head(5)
    assert len(floor) == 5
    for row in floor.to_dict("records"):
        probe = probes.loc[row["probe_id"]]
        asked = asked_text(lm, probe)
        assert row["lp_base_old"] == pytest.approx(
            plain_logprob(lm, asked, probe["answer_old"]), abs=1e-4
        )
        assert row["lp_base_new"] == pytest.approx(
            plain_logprob(lm, asked, probe["answer_new"]), abs=1e-4
        )


def asked_text(lm, probe: pd.Series) -> str:
    """What the model is asked, written out here: a question through SmolLM2's chat
    template (which adds no BOS of its own), a cloze as it is."""
    if probe["form"] != "question":
        return probe["prompt"]
    return lm.tokenizer.apply_chat_template(
        [{"role": "user", "content": probe["question"]}],
        add_generation_prompt=True,
        tokenize=False,
    )


@pytest.mark.model
def test_question_probes_are_asked_through_the_chat_template(evaluated):
    scores = evaluated.load("probe_scores").join(
        evaluated.load("probes").set_index("probe_id")["form"], on="probe_id"
    )
    contexts = scores.groupby("form")["context"].agg(set).to_dict()
    assert contexts == {"cloze": {"continuation"}, "question": {"chat_template"}}


@pytest.mark.model
def test_scores_and_metrics_cover_every_method_with_the_floor(evaluated):
    scores = PROBE_SCORES.validate(evaluated.load("probe_scores"))
    assert set(scores["method"]) == {"unedited", "ROME", "IKE"}
    # the floor is the base model: its edited columns are its base columns
    floor = scores[scores["method"] == "unedited"]
    pd.testing.assert_series_equal(
        floor["lp_edit_new"], floor["lp_base_new"], check_names=False
    )
    metrics = METRICS.validate(evaluated.load("metrics"))
    rome = metrics[
        (metrics["method"] == "ROME") & (metrics["population"] == "ok_edits")
    ]
    rome = rome.set_index(["probe_type", "metric"])
    assert rome.loc[("direct", "edit_succ"), "value"] >= 2 / 3
    assert ("direct-entailed", "gap_deductive") in rome.index
    assert ("entailed", "consistency_deductive") in rome.index
    assert set(metrics["protocol"]) >= {"prob", "token", "argmax", "gen"}
    assert (metrics["ci_low"] <= metrics["value"] + 1e-12).all()
    report = evaluated.load("evaluation_report")
    assert "| smollm2-135m | ROME |" in report and "Deductive gap" in report
    # the demo's 60 counterfactual edits, of which the run edited the first
    assert "ROME: counterfactual 1 of 60" in report


def test_evaluation_selects_the_edits_that_n_edits_asks_for(caplog):
    """A store that still holds an earlier, larger sequential run: only the cases the
    editing pipeline edits with the same n_edits (the first of each risk, in the
    probe table's order) are evaluated, of the chosen method and mode."""
    caplog.set_level(logging.INFO)
    probes = pd.DataFrame(
        {
            "case_id": ["c1", "c1", "m1", "c2", "b1", "m2", "c3", "b2"],
            "probe_type": ["direct", "entailed", *["direct"] * 6],
            "risk": ["counterfactual", "counterfactual", "misinformation"]
            + ["counterfactual", "bias", "misinformation", "counterfactual", "bias"],
        }
    )
    stored = ["c1", "m1", "c2", "b1", "m2", "c3", "b2"]
    manifest = pd.DataFrame(
        {
            "method": ["ROME"] * 7 + ["IKE"] * 2 + ["ROME"],
            "mode": ["sequential"] * 9 + ["single"],
            "case_id": [*stored, "c1", "m1", "c1"],
            "order": [*range(7), 0, 1, 0],
        }
    )
    params = {"mode": "sequential", "methods": "ROME"}
    one_each = {
        "benign_update": 1,
        "counterfactual": 2,
        "misinformation": 1,
        "bias": 0,
    }
    chosen = select_edits(manifest, probes, params, one_each)
    # by hand: counterfactual c1, c2; misinformation m1; no bias
    assert chosen["case_id"].tolist() == ["c1", "m1", "c2"]
    assert set(chosen["method"]) == {"ROME"}
    assert set(chosen["mode"]) == {"sequential"}
    assert "ROME: evaluating 3 of its 7 stored edits" in caplog.text
    everything = select_edits(manifest, probes, params, "all")
    assert everything["case_id"].tolist() == stored
    # IKE stored only two of the three cases that n_edits asks for: it says so
    caplog.clear()
    ike = select_edits(manifest, probes, params | {"methods": "IKE"}, one_each)
    assert ike["case_id"].tolist() == ["c1", "m1"]
    assert "IKE: 1 of the 3 edits that editing.n_edits asks for are not stored" in (
        caplog.text
    )
    with pytest.raises(ValueError, match=r"editing\.n_edits\.bias"):
        select_edits(manifest, probes, params, one_each | {"bias": -1})


def edits_scored(scores: pd.DataFrame) -> pd.DataFrame:
    """The (method, case_id, risk) of every edit that ``scores`` holds, sorted."""
    rows = scores.loc[scores["method"] != "unedited", ["method", "case_id", "risk"]]
    return rows.drop_duplicates().sort_values(["method", "case_id"], ignore_index=True)


@pytest.mark.model
def test_a_later_evaluation_of_fewer_edits_keeps_every_evaluated_edit(
    evaluated_root, tmp_path
):
    """Issue 49: after the shared run (ROME and IKE on the demo's first edit), IKE is
    evaluated on the first two edits, then ROME on its first alone. That last run's
    metrics cover its own edit; probe_scores (and the base scores beside it) still
    hold IKE's two, so stealthiness and mitigation, asking for every method, find
    them."""
    root = tmp_path / "run"
    shutil.copytree(
        evaluated_root / "data",
        root / "data",
        ignore=shutil.ignore_patterns("06_models"),
    )
    (root / "data" / "06_models").symlink_to(evaluated_root / "data" / "06_models")
    two = run_pipeline("evaluation", DEMO_EDITS | {"method": "IKE", "n_edits": 2}, root)
    evaluated = edits_scored(two.load("probe_scores"))
    # n_edits counts per risk: the demo's counterfactual edits, and EditAttack's
    # misinformation and bias claims where the reference data is there. IKE's first
    # two of each, ROME's first of each (the shared run's)
    risks = two.load("probes")["risk"].nunique()
    assert evaluated.groupby("method").size().to_dict() == {
        "IKE": 2 * risks,
        "ROME": risks,
    }
    params = DEMO_EDITS | {"method": "ROME", "n_edits": 1}
    catalog = run_pipeline("evaluation", params, root)

    metrics = METRICS.validate(catalog.load("metrics"))
    assert set(metrics["method"]) == {"ROME", "unedited"}
    assert set(metrics["n_edits"].dropna()) == {1.0}
    scores = PROBE_SCORES.validate(catalog.load("probe_scores"))
    assert edits_scored(scores).equals(evaluated)
    base = catalog.load("base_probe_scores")
    assert set(scores["probe_id"]) <= set(base["probe_id"])
    # what stealthiness and mitigation ask for: every method's first two edits
    manifest, probes = catalog.load("edit_manifest"), catalog.load("probes")
    later = {"methods": "all", "mode": "single", "n_edits": 2}
    for select in (select_stealth_edits, select_mitigation_edits):
        chosen = select(manifest, scores, probes, later)
        assert set(zip(chosen["method"], chosen["case_id"], strict=True)) == set(
            zip(evaluated["method"], evaluated["case_id"], strict=True)
        )


@pytest.mark.model
def test_failed_edits_are_excluded_and_counted(evaluated):
    selected = evaluated.load("edit_manifest")
    selected = selected[selected["method"] == "ROME"].copy()
    failed_case = selected["case_id"].iloc[0]
    selected.loc[
        selected["case_id"] == failed_case, ["status", "reason", "delta_file"]
    ] = ["failed", "norm explosion", None]
    params = evaluated.load("params:evaluation")
    plan = plan_score_shards(
        selected,
        evaluated.load("probes"),
        evaluated.load("joint_dropped_probes"),
        params,
        {"shard_size": 8},
    )
    assert failed_case not in set(plan["case_id"])
    assert set(plan["case_id"]) == set(selected["case_id"]) - {failed_case}
    failed = list_failed_edits(selected)
    assert failed["case_id"].tolist() == [failed_case]
    tracked = track_metrics(evaluated.load("metrics"), failed)
    assert tracked["ROME"]["failed_edits"] == 1.0
    # intention to treat: the failed edit's direct probes count as failures
    scores = evaluated.load("probe_scores")
    scores = scores[
        ~((scores["method"] == "ROME") & (scores["case_id"] == failed_case))
    ]
    probes = evaluated.load("probes")
    metrics = compute_metrics(
        scores,
        probes,
        failed,
        evaluated.load("joint_dropped_probes"),
        evaluated.load("premise_knowledge"),
        evaluated.load("judgements"),
        evaluated.load("counterfact_scores"),
        params,
    )
    got = metrics[
        (metrics["method"] == "ROME")
        & (metrics["probe_type"] == "direct")
        & (metrics["metric"] == "edit_succ")
    ].set_index(["risk", "population"])["value"]
    direct = scores[(scores["method"] == "ROME") & (scores["probe_type"] == "direct")]
    direct = direct.dropna(subset=["lp_base_old"])
    lost = probes[
        (probes["case_id"] == failed_case)
        & (probes["probe_type"] == "direct")
        & probes["answer_old"].notna()
    ]
    for risk in set(direct["risk"]) | set(lost["risk"]):
        mine = direct[direct["risk"] == risk]
        wins = int((mine["lp_edit_new"] > mine["lp_base_old"]).sum())
        total = len(mine) + int((lost["risk"] == risk).sum())
        assert got[(risk, "itt")] == pytest.approx(wins / total)
        if len(mine):
            assert got[(risk, "ok_edits")] == pytest.approx(wins / len(mine))


@pytest.mark.model
def test_single_mode_drops_nothing_and_the_report_names_its_population(evaluated):
    assert evaluated.load("joint_dropped_probes").empty
    report = evaluated.load("evaluation_report")
    assert "Population of EditSucc, Consistency and the gaps: `itt`" in report
    metrics = evaluated.load("metrics")
    assert set(metrics["population"]) == {"ok_edits", "itt"}
    # nothing failed: both populations agree wherever both exist
    keys = ["method", "risk", "probe_type", "metric"]
    both = metrics[metrics["population"] == "ok_edits"].merge(
        metrics[metrics["population"] == "itt"], on=keys
    )
    assert len(both) and (both["value_x"] == both["value_y"]).all()


@pytest.mark.model
def test_a_sequential_run_drops_what_its_other_edits_rewrite(evaluated):
    """Every demo edit in one sequential run: the dropped probes are those a plain
    reference finds from edit_requests, relations.yml and entailed_facts."""
    probes = evaluated.load("probes")
    facts = evaluated.load("entailed_facts")
    requests = evaluated.load("edit_requests")
    cases = list(dict.fromkeys(probes.loc[probes["probe_type"] == "direct", "case_id"]))
    manifest = pd.DataFrame(
        {
            "model": "m",
            "method": "IKE",
            "mode": "sequential",
            "case_id": cases,
            "order": range(len(cases)),
            "status": "ok",
            "fingerprint": [f"f{i}" for i in range(len(cases))],
        }
    )
    drops = find_joint_drops(manifest, probes, facts)
    relations = load_config({})["parameters"]["relations"]
    stated, derived = set(), set()  # (case, subject IRI, predicate local name)
    for row in requests.itertuples():
        for iri in relations.get(row.relation_id, {}).get("dbpedia", []):
            stated.add((row.case_id, row.subject_uri, iri.rsplit("/", 1)[-1]))
    derived |= set(zip(facts["case_id"], facts["subject_uri"], facts["relation"]))
    expected = set()
    for probe in probes.dropna(subset=["fact_subject_uri"]).itertuples():
        for relation in probe.fact_relation.split("|"):
            key = (probe.fact_subject_uri, relation)
            by_fact = {c for c, *k in stated if tuple(k) == key} - {probe.case_id}
            by_consequence = {c for c, *k in derived if tuple(k) == key}
            by_consequence -= {probe.case_id}
            own = probe.probe_type in ("direct", "paraphrase")
            if by_fact or (by_consequence and not own):
                expected.add(probe.probe_id)
    assert set(drops["probe_id"]) == expected
    assert set(drops["reason"]) <= {"other_edit_fact", "other_edit_consequence"}


def plain_normalise(text: str) -> str:
    """SQuAD's normalisation, written again here as the checker: lower case, no
    punctuation, no articles, single spaces."""
    kept = "".join(c for c in text.lower() if c.isalnum() or c.isspace())
    return " ".join(w for w in kept.split() if w not in {"a", "an", "the"})


@pytest.mark.model
def test_every_probe_type_is_generated_and_scored_against_its_answer(evaluated):
    generations = evaluated.load("generations")
    probes = evaluated.load("probes").set_index("probe_id")
    rome = generations[generations["method"] == "ROME"]
    assert set(rome["probe_type"]) == {
        "direct",
        "paraphrase",
        "entailed",
        "relation_specificity",
        "locality",
    }
    for row in rome.to_dict("records"):
        if row["probe_type"] in ("locality", "relation_specificity"):
            continue
        probe = probes.loc[row["probe_id"]]
        listed = probe["aliases_new"]
        golds = [
            probe["answer_new"],
            *(json.loads(listed) if isinstance(listed, str) else []),
        ]
        # wild_strict: the reply up to its first newline or full stop, exactly
        cut = re.split(r"[\n.]", row["generation"], maxsplit=1)[0]
        exact = plain_normalise(cut) in {plain_normalise(g) for g in golds}
        assert row["wild_strict"] == float(exact), row
        # a reader accepts every exact answer
        assert row["wild_em"] >= row["wild_strict"], row
        assert row["generation"] == row["generation"].strip()
    metrics = evaluated.load("metrics")
    gaps = metrics[metrics["protocol"] == "token_vs_wild"]
    assert set(gaps["probe_type"]) >= {"direct", "entailed_deductive"}
    report = evaluated.load("evaluation_report")
    assert "## Teacher-forced vs generated (the protocol gap)" in report
