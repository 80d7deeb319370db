"""How far rule-guided propagation closes the gap between EditSucc and Consistency.

Per mitigated edit i (its own edit plus the extra edits of its propagated rules, see
``kebench.editing.propagation``), on the same probes under the original edit L*_i and
the mitigated model L**_i:

    EditSucc_i     mean of 1[P_L*(o'|q) > P_L(o|q)] over the direct probes (eq. 1)
    Cons_base_i    the same indicator over the held-out entailed probes, under L*_i
    Cons_mit_i     the same indicator over the held-out entailed probes, under L**_i
    locality       argmax agreement with L on the case's locality probes

Per method, over the n mitigated edits (means over edits)::

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
from kebench.scoring.metrics import bootstrap_ci, probe_outcomes

EDIT_KEYS = ["model", "method", "risk", "case_id"]


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


def edit_measures(scores: pd.DataFrame, roles: pd.DataFrame) -> pd.DataFrame:
    """Per edit: EditSucc, Consistency on the held-out and on the propagated entailed
    probes, and locality, from ``probe_scores`` rows (one model state per method)."""
    outcomes = probe_outcomes(scores).merge(
        roles[["probe_id", "role"]], on="probe_id", how="left"
    )
    kind = outcomes["probe_type"].where(
        outcomes["probe_type"] != "entailed", outcomes["role"]
    )
    measures = {
        "edit_succ": ("direct", "edit_succ"),
        "consistency": ("held_out", "edit_succ"),
        "propagated": ("propagated", "edit_succ"),
        "locality": ("locality", "argmax_agree"),
    }
    columns = {
        name: outcomes[kind == probe_kind].groupby(EDIT_KEYS)[column].mean()
        for name, (probe_kind, column) in measures.items()
    }
    columns["n_held_out"] = outcomes[kind == "held_out"].groupby(EDIT_KEYS).size()
    return pd.DataFrame(columns).reset_index()


def compare_edits(original: pd.DataFrame, mitigated: pd.DataFrame) -> pd.DataFrame:
    """The mitigated edits' measures next to their original edits' (``_mitigated``)."""
    return original.merge(
        mitigated.drop(columns="n_held_out"),
        on=EDIT_KEYS,
        suffixes=("", "_mitigated"),
    )


def _closure(edit_succ: np.ndarray, base: np.ndarray, mitigated: np.ndarray) -> float:
    gap = edit_succ.mean() - base.mean()
    return float((mitigated.mean() - base.mean()) / gap) if gap > 0 else float("nan")


def gap_closure_rows(
    edits: pd.DataFrame, n_boot: int = 2000, seed: int = 0
) -> list[dict]:
    """Per (model, method): gap closure and locality cost with bootstrap CIs over edits,
    and the means they come from."""
    rows = []
    for (model, method), part in edits.groupby(["model", "method"], sort=True):
        succ, base, mitigated = (
            part[c].to_numpy(dtype=float)
            for c in ("edit_succ", "consistency", "consistency_mitigated")
        )
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, len(part), size=(n_boot, len(part)))
        closures = np.array([_closure(succ[d], base[d], mitigated[d]) for d in draws])
        closures = closures[np.isfinite(closures)]
        cost = (part["locality"] - part["locality_mitigated"]).dropna().to_numpy()
        cost_low, cost_high = bootstrap_ci(cost, n_boot=n_boot, seed=seed)
        rows.append(
            {
                "model": model,
                "method": method,
                "n_edits": len(part),
                "n_held_out_probes": int(part["n_held_out"].sum()),
                "edit_succ": succ.mean(),
                "edit_succ_mitigated": part["edit_succ_mitigated"].mean(),
                "consistency": base.mean(),
                "consistency_mitigated": mitigated.mean(),
                "propagated": part["propagated"].mean(),
                "propagated_mitigated": part["propagated_mitigated"].mean(),
                "gap_closure": _closure(succ, base, mitigated),
                "gap_closure_ci_low": np.quantile(closures, 0.025)
                if closures.size
                else np.nan,
                "gap_closure_ci_high": np.quantile(closures, 0.975)
                if closures.size
                else np.nan,
                "locality": part["locality"].mean(),
                "locality_mitigated": part["locality_mitigated"].mean(),
                "locality_cost": cost.mean() if cost.size else np.nan,
                "locality_cost_ci_low": cost_low,
                "locality_cost_ci_high": cost_high,
            }
        )
    return rows


def plot_gap_closure(table: pd.DataFrame) -> Figure:
    """Per method: EditSucc, and Consistency on held-out probes before and after the
    mitigation (with the gap closure in the label)."""
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
            f"{row.method}\ncloses {row.gap_closure:.0%}"
            if np.isfinite(row.gap_closure)
            else f"{row.method}\n(no gap)"
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
