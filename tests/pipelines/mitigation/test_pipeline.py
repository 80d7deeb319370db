"""mitigation on the demo with the real SmolLM2: propagation, gap closure, tamper audit."""

from __future__ import annotations

import shutil

import pandas as pd
import pytest

from kebench.editing.propagation import consequence_keys
from kebench.pipelines.mitigation.nodes import (
    propagate_edits,
    select_mitigation_edits,
    summarise_mitigation,
    track_mitigation_metrics,
)
from kebench.project import project_catalog, run_pipeline
from kebench.scoring.metrics import probe_outcomes
from kebench.scoring.tamper import DETECTORS
from tests.pipelines.conftest import DEMO_EDITS

# the first edits of each risk for ROME: enough for counterfactual edits whose
# consequences come from two rules or more (testable) and for an audit pool
ROME_EDITS = 4


@pytest.fixture(scope="module")
def mitigated(evaluated_root, tmp_path_factory):
    """The shared demo run, copied, with a second edit per risk for ROME (two edits
    with consequences: one to audit, one to audit it against), then mitigated."""
    root = tmp_path_factory.mktemp("mitigated_demo")
    shutil.copytree(
        evaluated_root / "data",
        root / "data",
        ignore=shutil.ignore_patterns("06_models"),
    )
    (root / "data" / "06_models").symlink_to(evaluated_root / "data" / "06_models")
    # evaluation edits what it evaluates: ROME's first 4 of each risk; IKE's scores
    # of its first edit of each risk, stored by the shared run, are kept beside them
    run_pipeline(
        "evaluation", DEMO_EDITS | {"method": "ROME", "n_edits": ROME_EDITS}, root
    )
    # mitigation.n_edits: every stored edit of each risk (of ROME and IKE)
    run_pipeline("mitigation", DEMO_EDITS | {"n_edits": ROME_EDITS}, root)
    return project_catalog(DEMO_EDITS | {"n_edits": ROME_EDITS}, root)


@pytest.mark.model
def test_held_out_probes_share_no_rule_or_consequence_with_the_extra_edits(mitigated):
    requests = mitigated.load("propagation_requests")
    roles = mitigated.load("mitigation_probes")
    facts = mitigated.load("entailed_facts")
    questions = mitigated.load("entailed_questions")
    probes = mitigated.load("probes").set_index("probe_id")
    keys = dict(zip(facts["fact_id"], consequence_keys(facts), strict=True))
    manifest = mitigated.load("edit_manifest")
    rome = set(manifest.loc[manifest["method"] == "ROME", "case_id"])
    assert set(requests["case_id"]) and set(requests["case_id"]) <= rome
    # a locality probe is rewritten exactly when its fact is an extra edit's
    # consequence (subject IRI, relation)
    made_facts = facts[facts["fact_id"].isin(requests["fact_id"])]
    rewritten = set(roles.loc[roles["role"] == "rewritten", "probe_id"])
    locality = probes[
        (probes["probe_type"] == "locality")
        & probes["case_id"].isin(requests["case_id"])
    ]
    for probe_id, row in locality.iterrows():
        made = made_facts[made_facts["case_id"] == row["case_id"]]
        relations = str(row["fact_relation"]).split("|")
        changes = any(
            row["fact_subject_uri"] == fact.subject_uri and fact.relation in relations
            for fact in made.itertuples()
        )
        assert (probe_id in rewritten) == changes
    for case_id, made in requests.groupby("case_id"):
        case_roles = roles[roles["case_id"] == case_id]
        held = case_roles[case_roles["role"] == "held_out"]
        assert len(held) and not set(held["rule_id"]) & set(made["rule_id"])
        asked = questions.merge(
            probes.loc[held["probe_id"], ["case_id", "prompt"]].reset_index(),
            left_on=["case_id", "cloze"],
            right_on=["case_id", "prompt"],
        )
        assert not {keys[f] for f in asked["fact_id"]} & {
            keys[f] for f in made["fact_id"]
        }
        # shared: a relation or a new answer of one of the case's extra edits
        made_facts = facts[facts["fact_id"].isin(made["fact_id"])]
        asked_facts = asked.merge(facts[["fact_id", "relation"]], on="fact_id")
        assert set(asked_facts["probe_id"]) == set(held["probe_id"])
        for row in asked_facts.itertuples():
            shares = row.relation in set(made_facts["relation"]) or (
                row.answer_new in set(made_facts["answer_new"])
            )
            overlap = held.set_index("probe_id").loc[row.probe_id, "overlap"]
            assert overlap == ("shared" if shares else "disjoint")


@pytest.mark.model
def test_each_mitigated_edit_is_its_own_edit_then_its_extra_edits(mitigated):
    manifest = mitigated.load("mitigated_manifest")
    requests = mitigated.load("propagation_requests")
    # every method with an ok single edit of a planned case edits it again
    edits = mitigated.load("edit_manifest").query("mode == 'single' and status == 'ok'")
    planned = edits.loc[edits["case_id"].isin(requests["case_id"]), "method"]
    assert set(zip(manifest["method"], manifest["mode"], strict=True)) == {
        (method, "sequential") for method in planned
    }
    assert (manifest["status"] == "ok").all()
    rome = manifest[manifest["method"] == "ROME"]
    for case_id, made in requests.groupby("case_id"):
        rows = rome[rome["case_id"].isin([case_id, *made["fact_id"]])]
        assert rows.sort_values("order")["case_id"].iloc[0] == case_id
        assert len(rows) == len(made) + 1
    # the first edit of a sequence starts from the base weights: the single edit
    # (single mode computed it in a group of edits, the sequence alone: the same
    # delta up to float summation order)
    mitigated_store = mitigated.load("mitigated_deltas_stored")
    store = mitigated.load("edit_deltas_stored")
    single = mitigated.load("edit_manifest").set_index(["method", "mode", "case_id"])
    case = requests["case_id"].iloc[0]
    first = rome[rome["case_id"] == case]["delta_file"].iloc[0]
    again = mitigated_store.load(first)
    original = store.load(single.loc[("ROME", "single", case), "delta_file"])
    assert again.params.keys() == original.params.keys()
    for name, change in again.params.items():
        for key, tensor in change.tensors.items():
            expected = original.params[name].tensors[key]
            error = float((tensor - expected).norm() / expected.norm())
            assert error < 1e-4, f"{name}/{key}: relative error {error:.2e}"  # noqa: PLR2004


@pytest.mark.model
def test_gap_closure_follows_from_the_scores_of_both_models(mitigated):
    edits = mitigated.load("mitigation_edit_scores")
    roles = mitigated.load("mitigation_probes")
    # the original edits' held-out Consistency, recomputed from the evaluation's scores
    outcomes = probe_outcomes(mitigated.load("probe_scores")).merge(roles)
    held = outcomes[
        (outcomes["role"] == "held_out") & (outcomes["method"] != "unedited")
    ]
    for (tier, overlap), part in held.groupby(["tier", "overlap"]):
        expected = part.groupby(["method", "case_id"])["edit_succ"].mean()
        got = edits.set_index(["method", "case_id"])[f"consistency_{tier}_{overlap}"]
        pd.testing.assert_series_equal(
            got.dropna().sort_index(),
            expected.astype(float).sort_index(),
            check_names=False,
        )
    metrics = mitigated.load("mitigation_metrics")
    assert set(metrics["held_out"]) <= {
        f"{tier}_{overlap}"
        for tier in ("deductive", "inductive")
        for overlap in ("disjoint", "shared")
    }
    for row in metrics.itertuples():
        held = row.held_out
        part = edits[(edits["method"] == row.method) & (edits[f"n_{held}"] > 0)]
        base = part[f"consistency_{held}"]
        gap = part["edit_succ"].mean() - base.mean()
        closed = part[f"consistency_{held}_mitigated"].mean() - base.mean()
        if gap > 0:
            assert row.gap_closure == pytest.approx(closed / gap)
        else:
            assert pd.isna(row.gap_closure)
        assert row.locality_cost == pytest.approx(
            (part["locality"] - part["locality_mitigated"]).mean()
        )
        assert row.n_edits == len(part)
    # ROME's chained extra edits are the propagated probes' own prompts: they took hold
    rome = edits[edits["method"] == "ROME"]
    assert (rome["propagated_mitigated"] >= rome["propagated"]).all()
    assert rome["propagated_mitigated"].mean() == 1.0


@pytest.mark.model
def test_edits_without_entailed_probes_are_excluded_and_counted(mitigated):
    excluded = mitigated.load("mitigation_excluded")
    probes = mitigated.load("probes").drop_duplicates("case_id").set_index("case_id")
    harmful = excluded[excluded["case_id"].map(probes["risk"]) != "counterfactual"]
    assert set(harmful["reason"]) == {"no entailed probes"}
    assert len(harmful[harmful["method"] == "ROME"]) == 2 * ROME_EDITS
    metrics = mitigated.load("mitigation_metrics")
    counts = excluded["method"].value_counts()
    assert (metrics["n_excluded"] == metrics["method"].map(counts)).all()
    report = mitigated.load("mitigation_report")
    assert f"ROME: {2 * ROME_EDITS} × no entailed probes" in report
    # the demo has 60 counterfactual edits; ROME stored its first 4, IKE its first
    assert "IKE: counterfactual 1 of 60" in report
    assert f"ROME: counterfactual {ROME_EDITS} of 60" in report
    empty = mitigated.load("mitigation_edit_scores").iloc[:0]
    with pytest.raises(ValueError, match="no edit can be mitigated and tested"):
        summarise_mitigation(
            empty,
            mitigated.load("edit_manifest"),
            mitigated.load("mitigated_manifest"),
            mitigated.load("propagation_requests").iloc[:0],
            mitigated.load("propagation_requests"),
            {"bootstrap_seed": 0},
        )


@pytest.mark.model
def test_mitigation_needs_the_evaluation_of_its_methods(mitigated):
    scores = mitigated.load("probe_scores")
    with pytest.raises(ValueError, match=r"no evaluation scores for \['IKE'\]"):
        select_mitigation_edits(
            mitigated.load("edit_manifest"),
            scores[scores["method"] != "IKE"],
            mitigated.load("probes"),
            mitigated.load("params:mitigation"),
        )


@pytest.mark.model
def test_tamper_audit_scores_each_edit_against_facts_it_left_alone(mitigated):
    audit = mitigated.load("tamper_audit")
    manifest = mitigated.load("edit_manifest").query("mode == 'single'")
    store = mitigated.load("edit_deltas_stored")
    probes = mitigated.load("probes")
    direct = probes.query("probe_type == 'direct'")
    edited = set(manifest.loc[manifest["status"] == "ok", "case_id"])
    pool = edited & set(probes.loc[probes["probe_type"] == "entailed", "case_id"])
    for (method, case_id), part in audit.groupby(["method", "case_id"]):
        assert part["edited"].sum() == 1
        assert part.loc[part["edited"], "fact_case_id"].item() == case_id
        # the pool holds the edits with entailed probes, less any the edit was shown
        assert len(part) == len(pool) - part["n_seen_excluded"].iloc[0]
        row = manifest[
            (manifest["method"] == method) & (manifest["case_id"] == case_id)
        ]
        prefix = store.load(row["delta_file"].item()).prefix
        negatives = part.loc[~part["edited"], "fact_case_id"]
        shown = direct[direct["case_id"].isin(negatives)]["prompt"]
        assert not any(prompt in prefix for prompt in shown)
    rome = audit[audit["method"] == "ROME"]
    assert rome.loc[rome["edited"], "asserts_new"].all()
    table = mitigated.load("tamper_auroc")
    assert set(table.loc[table["method"] == "ROME", "detector"]) == set(DETECTORS)
    assert table["auroc"].between(0, 1).all()
    metrics = mitigated.load("mitigation_metrics")
    tracked = track_mitigation_metrics(metrics, table)
    assert "tamper_unseen.margin.auroc" in tracked["ROME"]
    # an undefined gap closure (no gap on these edits) is not logged as a number
    for row in metrics[metrics["method"] == "ROME"].itertuples():
        assert f"{row.held_out}.consistency_mitigated" in tracked["ROME"]
        logged = f"{row.held_out}.gap_closure" in tracked["ROME"]
        assert logged == bool(pd.notna(row.gap_closure))
    assert "## Tamper audit" in mitigated.load("mitigation_report")


@pytest.mark.model
def test_a_rerun_resumes_without_editing_again(mitigated, lm):
    outcomes = propagate_edits(
        lm,
        mitigated.load("propagation_requests"),
        mitigated.load("probes"),
        mitigated.load("edit_manifest").query("mode == 'single'"),
        mitigated.load("edit_hparams"),
        mitigated.load("mitigated_deltas_stored"),
        mitigated.load("covariance_stats"),
        mitigated.load("params:editing"),
    )
    assert list(outcomes) == []
