"""Methods side by side: on the edits they share, with paired differences.

Two methods' numbers are comparable only over the same edits: an edit can be easy or
hard for every method alike, so a method measured on 2 edits beside one measured on
18 says little. A run that evaluates methods on different edits (each method's stored
edits, ``n_edits`` apart) is compared here on the edits every method has, and each
method's per-edit difference from a reference method is bootstrapped over those edits
(paired: an edit's difficulty cancels).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from kebench.schemas import UNEDITED
from kebench.scoring.metrics import bootstrap_ci, metrics_table, per_edit_consistency
from kebench.scoring.report import headline_markdown, headline_table

# per-edit measures compared: the probe_scores column an outcome is read from, and
# its protocol
COMPARED_FORMS = (("edit_succ", "prob"), ("wild_em", "wild"))
MEASURES = ("edit_succ", "consistency", "gap")
# how many shared edits a sentence names
NAMED_EDITS = 10


def edits_by_method(outcomes: pd.DataFrame) -> dict[str, list[str]]:
    """Each method's evaluated edits (its direct probes' cases), the floor left out:
    it is scored on every evaluated edit."""
    direct = outcomes[
        (outcomes["probe_type"] == "direct") & (outcomes["method"] != UNEDITED)
    ]
    return {
        method: sorted(set(rows["case_id"]))
        for method, rows in direct.groupby("method", sort=True)
    }


def shared_edits(outcomes: pd.DataFrame) -> list[str]:
    """The edits every method was evaluated on."""
    edits = list(edits_by_method(outcomes).values())
    return sorted(set.intersection(*map(set, edits))) if edits else []


def edit_sets_differ(outcomes: pd.DataFrame) -> bool:
    """Whether the methods were evaluated on different edits."""
    return len({tuple(e) for e in edits_by_method(outcomes).values()}) > 1


def coverage_text(outcomes: pd.DataFrame) -> str:
    """One paragraph: how many edits each method was evaluated on, and, where the
    sets differ, which edits they share (what a comparison may use)."""
    edits = edits_by_method(outcomes)
    if len(edits) < 2:  # noqa: PLR2004 - a comparison needs two methods
        return ""
    counts = ", ".join(f"{m} {len(e)}" for m, e in edits.items())
    if not edit_sets_differ(outcomes):
        return f"Every method was evaluated on the same {len(next(iter(edits.values())))} edits."
    shared = shared_edits(outcomes)
    named = ", ".join(shared[:NAMED_EDITS]) + (
        " ..." if len(shared) > NAMED_EDITS else ""
    )
    return (
        f"The methods were evaluated on different edits ({counts}): their rows in "
        "the headline are not comparable with each other. They share "
        f"{len(shared)} edits ({named or 'none'}); the comparison below and the "
        "plots use those only."
    )


def per_edit_measures(outcomes: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per (method, risk, edit): EditSucc, deductive Consistency and their gap, from
    ``column`` (``edit_succ`` for ``prob``, ``wild_em`` for ``wild``)."""
    table = per_edit_consistency(outcomes, "deductive", column)
    return table.assign(gap=table["edit_succ"] - table["consistency"])


def paired_differences(
    outcomes: pd.DataFrame,
    reference: str | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Per (model, risk, protocol, measure, method): the mean over the shared edits
    of the method's per-edit value minus the reference method's, with a bootstrap 95 %
    CI over those edits and their number. The reference is ``reference`` where it was
    evaluated, else the first method by name. Empty with fewer than two methods."""
    methods = list(edits_by_method(outcomes))
    if len(methods) < 2:  # noqa: PLR2004 - a difference needs two methods
        return pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    base = reference if reference in methods else methods[0]
    shared = outcomes[outcomes["case_id"].isin(shared_edits(outcomes))]
    rows = []
    for column, protocol in COMPARED_FORMS:
        if column not in shared:
            continue
        measures = per_edit_measures(shared, column)
        for (model, risk), part in measures.groupby(["model", "risk"]):
            wide = part.pivot_table(
                index="case_id", columns="method", values=list(MEASURES)
            )
            for measure in MEASURES:
                for method in methods:
                    if method == base or (measure, method) not in wide:
                        continue
                    pairs = wide[[(measure, method), (measure, base)]].dropna()
                    diffs = (pairs.iloc[:, 0] - pairs.iloc[:, 1]).to_numpy(float)
                    if diffs.size == 0:
                        continue
                    low, high = bootstrap_ci(diffs, seed=seed)
                    rows.append(
                        {
                            "model": model,
                            "risk": risk,
                            "protocol": protocol,
                            "measure": measure,
                            "method": method,
                            "reference": base,
                            "difference": float(np.mean(diffs)),
                            "ci_low": low,
                            "ci_high": high,
                            "n_edits": int(diffs.size),
                        }
                    )
    return pd.DataFrame(rows, columns=DIFFERENCE_COLUMNS)


DIFFERENCE_COLUMNS = [
    "model",
    "risk",
    "protocol",
    "measure",
    "method",
    "reference",
    "difference",
    "ci_low",
    "ci_high",
    "n_edits",
]
MEASURE_LABELS = {
    "edit_succ": "EditSucc",
    "consistency": "Deductive Consistency",
    "gap": "Deductive gap",
}


def difference_lines(differences: pd.DataFrame) -> list[str]:
    """The paired differences as a markdown table, with a sentence per difference
    whose CI excludes 0 (the others cannot be told apart from the reference)."""
    if differences.empty:
        return []
    reference = differences["reference"].iloc[0]
    lines = [
        f"Paired differences from {reference} over the shared edits (method − "
        f"{reference}, percentage points, 95 % bootstrap CI over edits):",
        "",
        "| model | risk | protocol | method | "
        + " | ".join(MEASURE_LABELS.values())
        + " |",
        "|" + "---|" * (4 + len(MEASURE_LABELS)),
    ]
    keys = ["model", "risk", "protocol", "method"]
    for key, part in differences.groupby(keys, sort=True):
        cells = part.set_index("measure")
        values = [
            _difference_cell(cells.loc[m]) if m in cells.index else "–"
            for m in MEASURE_LABELS
        ]
        lines.append("| " + " | ".join([*map(str, key), *values]) + " |")
    clear = differences[(differences["ci_low"] > 0) | (differences["ci_high"] < 0)]
    lines += ["", _separated_sentence(clear, reference)]
    return lines


def comparison_lines(
    probe_scores: pd.DataFrame,
    shared_headline: pd.DataFrame,
    differences: pd.DataFrame,
) -> list[str]:
    """The report's section comparing the methods: which edits each was evaluated
    on, the headline over the edits they share where those differ, and the paired
    differences from the reference method. Empty for a single method."""
    coverage = coverage_text(probe_scores)
    if not coverage:
        return []
    lines = ["", "## The methods compared, edit for edit", "", coverage]
    if edit_sets_differ(probe_scores) and len(shared_headline):
        lines += ["", headline_markdown(shared_headline)]
    lines += ["", *difference_lines(differences)] if len(differences) else []
    return lines


def _difference_cell(row: pd.Series) -> str:
    return (
        f"{100 * row['difference']:+.1f} [{100 * row['ci_low']:+.1f}, "
        f"{100 * row['ci_high']:+.1f}] (n={int(row['n_edits'])})"
    )


def _separated_sentence(clear: pd.DataFrame, reference: str) -> str:
    if clear.empty:
        return (
            f"No method differs from {reference} on any of these measures beyond its "
            "95 % CI: on these edits they cannot be told apart."
        )
    parts = [
        f"{row['method']}'s {MEASURE_LABELS[row['measure']]} under `{row['protocol']}` "
        f"({100 * row['difference']:+.1f})"
        for row in clear.to_dict("records")
    ]
    return (
        f"Differences from {reference} whose 95 % CI excludes 0: "
        + "; ".join(parts)
        + ". Every other difference is within its CI."
    )


def restricted(outcomes: pd.DataFrame, edits: Sequence[str]) -> pd.DataFrame:
    """``outcomes`` of ``edits`` only."""
    return outcomes[outcomes["case_id"].isin(list(edits))]


def method_comparison(  # noqa: PLR0913 - a population's two tables and its settings
    outcomes: pd.DataFrame,
    failed: pd.DataFrame,
    population: str,
    reference: str | None = None,
    seed: int = 0,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The methods of a run on the edits they all have, in ``population`` (``itt``:
    a failed edit counts, as a failure; ``ok_edits``: an edit that failed for one
    method is left out for all): the headline over those edits, and each method's
    paired differences from ``reference`` (``paired_differences``). Both empty with
    fewer than two methods."""
    treated = pd.concat([outcomes, failed]) if population == "itt" else outcomes
    if len(edits_by_method(treated)) < 2:  # noqa: PLR2004 - a comparison needs two
        return pd.DataFrame(), pd.DataFrame(columns=DIFFERENCE_COLUMNS)
    shared = shared_edits(treated)
    table = metrics_table(
        restricted(outcomes, shared), seed=seed, failed=restricted(failed, shared)
    )
    headline = headline_table(table, population)
    return headline, paired_differences(restricted(treated, shared), reference, seed)
