"""Known premises on the shared demo run: the *_known metrics against a plain
recomputation from probe_scores and premise_knowledge."""

from __future__ import annotations

import pandas as pd
import pytest

from kebench.project import project_catalog
from kebench.schemas import PREMISE_KNOWLEDGE
from tests.pipelines.conftest import DEMO_EDITS


@pytest.fixture(scope="module")
def evaluated(evaluated_root):
    return project_catalog(DEMO_EDITS, evaluated_root)


def _value(
    metrics: pd.DataFrame, method: str, metric: str, probe_type: str
) -> pd.Series:
    rows = metrics[
        (metrics["method"] == method)
        & (metrics["metric"] == metric)
        & (metrics["probe_type"] == probe_type)
        & (metrics["population"] == "ok_edits")
    ]
    return rows.set_index("risk")["value"]


@pytest.mark.model
def test_known_metrics_are_the_plain_metrics_over_known_probes(evaluated):
    knowledge = PREMISE_KNOWLEDGE.validate(evaluated.load("premise_knowledge"))
    scores = evaluated.load("probe_scores")
    metrics = evaluated.load("metrics")
    # a probe is known when every premise row of it is
    known = knowledge.groupby("probe_id")["known"].all()
    rome = scores[scores["method"] == "ROME"].copy()
    rome["success"] = rome["lp_edit_new"] > rome["lp_base_old"]
    direct = rome[(rome["probe_type"] == "direct") & rome["lp_base_old"].notna()]
    known_direct = direct[direct["probe_id"].map(known).fillna(False).astype(bool)]
    expected = known_direct.groupby("risk")["success"].mean()
    got = _value(metrics, "ROME", "edit_succ_known_gen", "direct")
    assert set(got.index) == set(expected.index)
    for risk, value in expected.items():
        assert got[risk] == pytest.approx(value)
    # deductive consistency over known headline probes (compositions that are no
    # echo), averaged per edit (eq. 2), then over the edits with a direct probe; an
    # entailed probe without premises is known
    probes = evaluated.load("probes").set_index("probe_id")
    rome = rome.join(probes[["tier", "kind", "echo"]], on="probe_id")
    entailed = rome[
        (rome["probe_type"] == "entailed")
        & (rome["tier"] == "deductive")
        & (rome["kind"] == "composition")
        & ~rome["echo"].astype(bool)
    ]
    is_known = entailed["probe_id"].map(known).fillna(True).astype(bool)
    per_edit = entailed[is_known].groupby(["risk", "case_id"])["success"].mean()
    per_edit = per_edit[
        per_edit.index.get_level_values("case_id").isin(direct["case_id"])
    ]
    got = _value(metrics, "ROME", "consistency_deductive_known_gen", "entailed")
    for risk, value in per_edit.groupby("risk").mean().items():
        assert got[risk] == pytest.approx(value)
    # the share of known questions, per kind and direction, over distinct ones
    asked = knowledge.drop_duplicates(["kind", "prompt", "answer"])
    groups = asked.groupby(["kind", "direction"])["known"].mean()
    assert ("edit_fact", "forward") in groups.index
    for (kind, direction), expected in groups.items():
        share = _value(metrics, "unedited", f"premises_known_{direction}", kind)
        assert share["all"] == pytest.approx(expected)
