"""Methods compared on the edits they share, against hand-worked tables."""

from __future__ import annotations

import pandas as pd
import pytest

from kebench.scoring.comparison import (
    coverage_text,
    difference_lines,
    method_comparison,
    paired_differences,
    shared_edits,
)
from kebench.scoring.metrics import probe_outcomes
from tests.scoring.test_metrics import score


def rows(method: str, case: str, direct: float, entailed: list[float]) -> list[dict]:
    """An edit's direct probe (succeeds when ``direct`` > -3) and entailed probes
    (each passes when its value > -2), under ``method``."""
    out = [score(case, "direct", -3.0, direct)]
    out += [score(case, "entailed", -2.0, value) for value in entailed]
    return [row | {"method": method} for row in out]


@pytest.fixture
def outcomes() -> pd.DataFrame:
    """ROME on e1..e3, MEMIT on e1 and e2 (its e3 was not evaluated):

    | edit | ROME EditSucc, Consistency, gap | MEMIT EditSucc, Consistency, gap |
    | e1 | 1, 1/2, 1/2 | 1, 1, 0 |
    | e2 | 1, 0, 1 | 0, 0, 0 |
    | e3 | 1, 1, 0 | – |
    """
    table = [
        *rows("ROME", "e1", -1.0, [-1.0, -4.0]),
        *rows("ROME", "e2", -1.0, [-4.0]),
        *rows("ROME", "e3", -1.0, [-1.0]),
        *rows("MEMIT", "e1", -1.0, [-1.0, -1.0]),
        *rows("MEMIT", "e2", -5.0, [-4.0]),
    ]
    return probe_outcomes(pd.DataFrame(table))


def test_methods_on_different_edits_share_only_their_common_edits(outcomes):
    assert shared_edits(outcomes) == ["e1", "e2"]
    text = coverage_text(outcomes)
    assert "MEMIT 2, ROME 3" in text and "share 2 edits (e1, e2)" in text
    alone = outcomes[outcomes["method"] == "ROME"]
    assert coverage_text(alone) == ""


def test_paired_differences_are_per_edit_differences_over_the_shared_edits(outcomes):
    """MEMIT − ROME on e1 and e2: EditSucc (0 + -1)/2, Consistency (1/2 + 0)/2, gap
    (-1/2 + -1)/2."""
    differences = paired_differences(outcomes, reference="ROME").set_index("measure")
    assert set(differences["method"]) == {"MEMIT"}
    assert differences.at["edit_succ", "difference"] == pytest.approx(-0.5)
    assert differences.at["consistency", "difference"] == pytest.approx(0.25)
    assert differences.at["gap", "difference"] == pytest.approx(-0.75)
    assert (differences["n_edits"] == 2).all()
    assert (differences["ci_low"] <= differences["difference"]).all()
    # with two edits the percentile bootstrap spans their two values
    assert differences.at["gap", "ci_low"] == pytest.approx(-1.0)
    assert differences.at["gap", "ci_high"] == pytest.approx(-0.5)
    lines = "\n".join(difference_lines(differences.reset_index()))
    assert "Paired differences from ROME" in lines
    assert "Deductive gap under `prob` (-75.0)" in lines  # its CI excludes 0


def test_the_comparison_headline_is_over_the_shared_edits(outcomes):
    failed = outcomes.iloc[0:0]
    headline, differences = method_comparison(outcomes, failed, "ok_edits", "ROME")
    rome = headline[(headline["method"] == "ROME") & (headline["protocol"] == "prob")]
    # ROME's e3 is left out: deductive Consistency (1/2 + 0)/2 over e1 and e2
    assert rome["Deductive Consistency"].iloc[0] == pytest.approx(0.25)
    assert rome["EditSucc n_edits"].iloc[0] == 2
    assert len(differences) == 3
    single, none = method_comparison(
        outcomes[outcomes["method"] == "ROME"], failed, "ok_edits"
    )
    assert single.empty and none.empty
