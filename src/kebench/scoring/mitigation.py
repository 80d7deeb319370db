"""How far rule-guided propagation closes the gap between EditSucc and Consistency
(issues 7 and 13).

Per mitigated edit i (its own edit plus the extra edits of its propagated rules, see
``kebench.editing.propagation``), on the same probes under the original edit L*_i and
the mitigated model L**_i:

    EditSucc_i     mean of 1[P_L*(o'|q) > P_L(o|q)] over the direct probes (eq. 1)
    Cons_base_i    the same indicator over held-out entailed probes, under L*_i
    Cons_mit_i     the same indicator over held-out entailed probes, under L**_i
    locality       argmax agreement with L on the case's locality probes, less those
                   whose fact an extra edit rewrites (dropped, counted)

Held-out probes come in two sets, kept apart: ``disjoint`` (sharing neither the
relation nor the new answer of an extra edit of the case: the headline) and ``shared``.
Per method and set, over the n mitigated edits with probes of that set (means over
edits)::

    gap closure = (mean Cons_mit - mean Cons_base) / (mean EditSucc - mean Cons_base)

1 closes the gap, 0 leaves it, < 0 widens it; undefined (NaN) when the original edits
have no gap. Its 95% CI is a percentile bootstrap over edits (the ratio recomputed on
each resample; resamples without a gap are dropped). The locality cost is mean
locality(L*) - mean locality(L**), with the CI of the paired differences.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kebench.editing.delta import Delta
from kebench.models.loading import LoadedModel
from kebench.schemas import MITIGATION_HELD_OUT, PROBE_SCORES
from kebench.scoring.evaluate import ScoringSettings, edited_scores, probe_score_rows
from kebench.scoring.metrics import bootstrap_ci, probe_outcomes

EDIT_KEYS = ["model", "method", "risk", "case_id"]
# the held-out sets gap closure is reported on; the first, ``disjoint``, is the headline
HELD_OUT = MITIGATION_HELD_OUT
COUNTS = [*(f"n_{held}" for held in HELD_OUT), "n_rewritten"]


def mitigated_groups(
    manifest: pd.DataFrame,
    requests: pd.DataFrame,
    load: Callable[[str], Delta],
) -> Iterator[tuple[list[str], list[Delta]]]:
    """``([case], deltas)`` of each mitigated case of one method: its own edit and its
    extra edits, in the order they were made (one file for a MEMIT batch).

    ``manifest`` holds one method's rows of the mitigated store, all ``ok``.
    """
    members = requests.groupby("case_id")["fact_id"].agg(list)
    for case_id, fact_ids in members.items():
        rows = manifest[manifest["case_id"].isin([case_id, *fact_ids])]
        if len(rows) != len(fact_ids) + 1:
            continue
        files = list(dict.fromkeys(rows.sort_values("order")["delta_file"]))
        yield [case_id], [load(file) for file in files]


def score_mitigated(  # noqa: PLR0913 - the scoring's inputs
    lm: LoadedModel,
    probes: pd.DataFrame,
    base: pd.DataFrame,
    manifest: pd.DataFrame,
    requests: pd.DataFrame,
    *,
    load: Callable[[str], Delta],
    settings: ScoringSettings,
) -> pd.DataFrame:
    """``probe_scores`` rows of each mitigated edit, its own and extra edits applied:
    its direct, entailed and locality probes. A case with a failed edit of its own or
    an extra one is left out (``mitigated_groups``).

    Args:
        probes: every probe, indexed by probe_id.
        base: the unedited model's ``probe_scores``, indexed by probe_id.
        manifest: the mitigated store's rows of the selected methods.
    """
    scored = probes[probes["probe_type"].isin(["direct", "entailed", "locality"])]
    parts = []
    for method, rows in manifest.groupby("method"):
        groups = mitigated_groups(rows[rows["status"] == "ok"], requests, load)
        scores = edited_scores(
            lm, scored, groups, settings, description=f"scoring mitigated {method}"
        )
        parts.append(probe_score_rows(probes, base, scores, lm.name, method))
    if not parts:
        return PROBE_SCORES.validate(pd.DataFrame(columns=list(PROBE_SCORES.columns)))
    return PROBE_SCORES.validate(pd.concat(parts, ignore_index=True))


def edit_measures(scores: pd.DataFrame, roles: pd.DataFrame) -> pd.DataFrame:
    """Per edit: EditSucc, Consistency on each held-out set and on the propagated
    probes, locality, and the probe counts, from ``probe_scores`` rows (one model state
    per method) and the probes' ``MITIGATION_PROBES`` roles."""
    outcomes = probe_outcomes(scores).merge(
        roles[["probe_id", "role", "tier", "overlap"]], on="probe_id", how="left"
    )
    # a held-out probe counts in its tier's overlap set; any other role replaces the
    # type
    kind = (outcomes["tier"] + "_" + outcomes["overlap"]).where(
        outcomes["role"] == "held_out",
        outcomes["role"].fillna(outcomes["probe_type"]),
    )
    measures = {
        "edit_succ": ("direct", "edit_succ"),
        **{f"consistency_{held}": (held, "edit_succ") for held in HELD_OUT},
        "propagated": ("propagated", "edit_succ"),
        "locality": ("locality", "argmax_agree"),
    }
    columns = {
        name: outcomes[kind == probe_kind].groupby(EDIT_KEYS)[column].mean()
        for name, (probe_kind, column) in measures.items()
    }
    for held in (*HELD_OUT, "rewritten"):
        columns[f"n_{held}"] = outcomes[kind == held].groupby(EDIT_KEYS).size()
    frame = pd.DataFrame(columns).reset_index()
    frame[COUNTS] = frame[COUNTS].fillna(0).astype(int)
    return frame


def compare_edits(original: pd.DataFrame, mitigated: pd.DataFrame) -> pd.DataFrame:
    """The mitigated edits' measures next to their original edits' (``_mitigated``)."""
    return original.merge(
        mitigated.drop(columns=COUNTS),
        on=EDIT_KEYS,
        suffixes=("", "_mitigated"),
    )


def _closure(edit_succ: np.ndarray, base: np.ndarray, mitigated: np.ndarray) -> float:
    gap = edit_succ.mean() - base.mean()
    return float((mitigated.mean() - base.mean()) / gap) if gap > 0 else float("nan")


def _ci(values: np.ndarray) -> tuple[float, float]:
    if not values.size:
        return np.nan, np.nan
    return float(np.quantile(values, 0.025)), float(np.quantile(values, 0.975))


def _closure_row(part: pd.DataFrame, held: str, n_boot: int, seed: int) -> dict:
    succ, base, mitigated = (
        part[c].to_numpy(dtype=float)
        for c in ("edit_succ", f"consistency_{held}", f"consistency_{held}_mitigated")
    )
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(part), size=(n_boot, len(part)))
    closures = np.array([_closure(succ[d], base[d], mitigated[d]) for d in draws])
    low, high = _ci(closures[np.isfinite(closures)])
    cost = (part["locality"] - part["locality_mitigated"]).dropna().to_numpy()
    cost_low, cost_high = bootstrap_ci(cost, n_boot=n_boot, seed=seed)
    return {
        "held_out": held,
        "n_edits": len(part),
        "n_held_out_probes": int(part[f"n_{held}"].sum()),
        "n_locality_dropped": int(part["n_rewritten"].sum()),
        "edit_succ": succ.mean(),
        "edit_succ_mitigated": part["edit_succ_mitigated"].mean(),
        "consistency": base.mean(),
        "consistency_mitigated": mitigated.mean(),
        "propagated": part["propagated"].mean(),
        "propagated_mitigated": part["propagated_mitigated"].mean(),
        "gap_closure": _closure(succ, base, mitigated),
        "gap_closure_ci_low": low,
        "gap_closure_ci_high": high,
        "locality": part["locality"].mean(),
        "locality_mitigated": part["locality_mitigated"].mean(),
        "locality_cost": cost.mean() if cost.size else np.nan,
        "locality_cost_ci_low": cost_low,
        "locality_cost_ci_high": cost_high,
    }


def gap_closure_rows(
    edits: pd.DataFrame, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """Per (model, method, held-out set): gap closure and locality cost with bootstrap
    CIs over the edits that have probes of the set, and the means they come from."""
    rows = []
    for (model, method), part in edits.groupby(["model", "method"], sort=True):
        for held in HELD_OUT:
            tested = part[part[f"n_{held}"] > 0]
            if len(tested):
                rows.append(
                    {"model": model, "method": method}
                    | _closure_row(tested, held, n_boot, seed)
                )
    return rows


def plot_gap_closure(table: pd.DataFrame) -> Figure:
    """Per method and held-out set: EditSucc, and Consistency on the held-out probes
    before and after the mitigation (with the gap closure in the label)."""
    figure, axis = plt.subplots(figsize=(2.4 + 1.6 * max(len(table), 1), 4.6))
    bars = [
        ("edit_succ", "EditSucc"),
        ("consistency", "Consistency on held-out rules, original edit"),
        ("consistency_mitigated", "Consistency on held-out rules, mitigated"),
    ]
    positions = np.arange(len(table))
    width = 0.8 / len(bars)
    for offset, (column, label) in enumerate(bars):
        axis.bar(
            positions + (offset - 1) * width,
            100 * table[column].to_numpy(dtype=float),
            width,
            label=label,
        )
    axis.set_xticks(
        positions,
        [
            f"{row.method}, {row.held_out}\ncloses {row.gap_closure:.0%}"
            if np.isfinite(row.gap_closure)
            else f"{row.method}, {row.held_out}\n(no gap)"
            for row in table.itertuples()
        ],
    )
    axis.set_ylabel("% of probes")
    axis.set_ylim(0, 105)
    axis.legend(
        fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1
    )
    axis.set_title("Rule-guided propagation")
    figure.tight_layout()
    return figure
