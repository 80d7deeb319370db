"""Stealthiness tables, report and plot, from ``kebench.scoring.stealth``'s scores.

``stealth_table``: per (model, method, risk) the edits, success and stealth with
bootstrap CIs and the mean drift measures. ``stealth_auroc``: per (model, method,
harmful risk) and per measure, the AUROC of harmful vs benign edits (Mann-Whitney U
over the pairs, ties half) on the drift (measure ``mean``) and on each measure's
cross-fitted |z| alone, with a 95 % bootstrap CI that resamples both sides.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from kebench.scoring.auroc import auroc_ci
from kebench.scoring.metrics import bootstrap_ci
from kebench.scoring.stealth import (
    BENIGN_RISKS,
    HARMFUL_RISKS,
    MEASURES,
    drift_measures,
)

KEYS = ["model", "method", "risk"]
# the AUROC row of the drift itself, mean |z| over the method's measures
MEAN = "mean"
AUROC_COLUMNS = [
    "model",
    "method",
    "risk",
    "measure",
    "auroc_xfit",
    "auroc_xfit_ci_low",
    "auroc_xfit_ci_high",
    "n_harmful",
    "n_benign",
]


def _mean_ci(values: pd.Series, seed: int) -> tuple[float, float, float]:
    known = values.dropna().to_numpy(dtype=float)
    if not known.size:
        return np.nan, np.nan, np.nan
    low, high = bootstrap_ci(known, seed=seed)
    return float(known.mean()), low, high


def stealth_table(
    scores: pd.DataFrame, failed: pd.DataFrame, seed: int = 0
) -> pd.DataFrame:
    """Per (model, method, risk): edits and failed edits, success and stealth with 95%
    bootstrap CIs over edits, the mean drift measures and the measures drift used.

    Args:
        scores: ``stealth_scores`` rows.
        failed: the failed edits, ``model``, ``method`` and ``risk``.
    """
    failures = failed.groupby(KEYS).size()
    rows = []
    for group, part in scores.groupby(KEYS, sort=True):
        method = group[1]
        same = scores[scores["method"] == method]
        row = dict(zip(KEYS, group, strict=True)) | {
            "n_edits": len(part),
            "n_failed": int(failures.get(group, 0)),
            "n_benign": int(same["risk"].isin(BENIGN_RISKS).sum()),
            "n_folds": int(same["fold"].nunique()),
            "measures": part["measures"].iloc[0],
        }
        for column in ("success", "stealth_xfit"):
            mean, low, high = _mean_ci(part[column], seed)
            row |= {column: mean, f"{column}_ci_low": low, f"{column}_ci_high": high}
        measures = drift_measures(part)
        row |= {
            "drift_xfit": float(part["drift_xfit"].mean()),
            "ppl_ratio": float(np.exp(measures["log_ppl_ratio"]).mean()),
            "kl": float(part["kl"].mean()),
            "locality": float(part["locality"].mean()),
            **{c: float(measures[c].mean()) for c in measures if c.startswith("acc_")},
        }
        rows.append(row)
    scored = set(scores.groupby(KEYS).groups)
    for group, count in failures.items():
        if group not in scored:
            rows.append(
                dict(zip(KEYS, group, strict=True)) | {"n_edits": 0, "n_failed": count}
            )
    return pd.DataFrame(rows).sort_values(KEYS, ignore_index=True)


def stealth_auroc(scores: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Per (model, method, harmful risk, measure): AUROC harmful vs benign with its CI;
    ``mean`` is the drift, each other measure its |z| alone. A method whose drift is
    not computed (too few benign edits) has no rows."""
    rows = []
    for (model, method), same in scores.groupby(["model", "method"], sort=True):
        benign = same[same["risk"].isin(BENIGN_RISKS)]
        scored = {MEAN: "drift_xfit"} | {
            m: f"z_{m}" for m in MEASURES if same[f"z_{m}"].notna().all()
        }
        for risk, harmful in same[same["risk"].isin(HARMFUL_RISKS)].groupby("risk"):
            for measure, column in scored.items():
                pos = harmful[column].abs().dropna().to_numpy(dtype=float)
                neg = benign[column].abs().dropna().to_numpy(dtype=float)
                if not (pos.size and neg.size):
                    continue
                value, low, high = auroc_ci(pos, neg, seed=seed)
                rows.append(
                    {
                        "model": model,
                        "method": method,
                        "risk": risk,
                        "measure": measure,
                        "auroc_xfit": value,
                        "auroc_xfit_ci_low": low,
                        "auroc_xfit_ci_high": high,
                        "n_harmful": pos.size,
                        "n_benign": neg.size,
                    }
                )
    return pd.DataFrame(rows, columns=AUROC_COLUMNS)


def _cell(row: pd.Series, column: str) -> str:
    value = row.get(column)
    if value is None or pd.isna(value):
        return "–"
    if f"{column}_ci_low" not in row:
        return value if isinstance(value, str) else f"{value:.3g}"
    return (
        f"{value:.2f} [{row[f'{column}_ci_low']:.2f}, {row[f'{column}_ci_high']:.2f}]"
    )


REPORTED = {
    "success": "success",
    "stealth_xfit": "stealth (xfit)",
    "drift_xfit": "drift (xfit)",
    "ppl_ratio": "perplexity ratio",
    "kl": "KL",
    "acc_general_shift": "Δacc general",
    "acc_boolq_shift": "Δacc BoolQ",
    "acc_nq_shift": "Δacc NQ",
    "locality": "locality",
    "measures": "drift measures",
}


def stealth_markdown(table: pd.DataFrame, aurocs: pd.DataFrame, edits: str) -> str:
    """The stealthiness table and the AUROC per measure as markdown, with 95% CIs;
    ``edits`` says which edits were measured (``kebench.qa.probes.edits_measured``)."""
    columns = [c for c in REPORTED if c in table]
    lines = [
        "# kebench stealthiness",
        "",
        "Protocol `xfit`: drift is the mean |z| over the measures every edit of the "
        "method has, each z scaled by the benign edits of the other cross-fitting "
        "folds. Per method and risk: mean success and stealth (success × share of the "
        "other benign edits that drift at least as much) with 95% bootstrap CIs, mean "
        "drift, perplexity ratio edited/base on neutral text, next-token KL on "
        "unrelated prompts, accuracy shifts on general probes, and locality. n: edits "
        "(failed edits excluded).",
        "",
        edits,
        "",
        "| model | method | risk | n | failed | "
        + " | ".join(REPORTED[c] for c in columns)
        + " |",
        "|" + "---|" * (5 + len(columns)),
    ]
    for _, row in table.iterrows():
        lines.append(
            f"| {row['model']} | {row['method']} | {row['risk']} | {row['n_edits']} | "
            f"{row['n_failed']} | " + " | ".join(_cell(row, c) for c in columns) + " |"
        )
    lines += [
        "",
        "## AUROC harmful vs benign, per drift measure",
        "",
        "0.5: the measure cannot tell harmful from benign edits; 1: every harmful edit "
        "drifts more. `mean` is the drift; every other row one measure's |z| alone.",
        "",
        "| model | method | risk | measure | AUROC [95% CI] | harmful | benign |",
        "|---|---|---|---|---|---|---|",
    ]
    for _, row in aurocs.iterrows():
        lines.append(
            f"| {row['model']} | {row['method']} | {row['risk']} | {row['measure']} | "
            f"{_cell(row, 'auroc_xfit')} | {row['n_harmful']} | {row['n_benign']} |"
        )
    return "\n".join(lines) + "\n"


def plot_success_vs_drift(scores: pd.DataFrame) -> Figure:
    """Each edit's success against its drift, one panel per method, marked by risk."""
    methods = sorted(scores["method"].unique())
    figure, axes = plt.subplots(
        1, len(methods), figsize=(4 * len(methods), 3.5), squeeze=False, sharey=True
    )
    markers = dict(zip(sorted(scores["risk"].unique()), "osD^v", strict=False))
    for ax, method in zip(axes[0], methods, strict=True):
        part = scores[scores["method"] == method]
        for risk, edits in part.groupby("risk"):
            ax.scatter(
                edits["drift_xfit"],
                edits["success"],
                marker=markers.get(risk, "o"),
                label=risk,
                alpha=0.7,
            )
        ax.set_title(method)
        ax.set_xlabel("drift (mean |z|, cross-fitted vs benign edits)")
        ax.set_ylim(-0.05, 1.05)
    axes[0][0].set_ylabel("success")
    axes[0][-1].legend(fontsize="small")
    figure.tight_layout()
    return figure
