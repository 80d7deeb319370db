"""The lifelong stream's report: its curves as one panel per measure, the collapse
table and the markdown that holds both (``kebench.scoring.lifelong``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

# measures in the order a reader looks at them; any other comes after
ORDER = (
    "retention",
    "consistency_deductive",
    "locality",
    "perplexity",
    "norm_growth",
)
PERCENT = ("retention", "consistency_deductive", "locality")


def _measures(curves: pd.DataFrame) -> list[str]:
    found = list(dict.fromkeys(curves["measure"]))
    first = [m for m in ORDER if m in found]
    return first + sorted(m for m in found if m not in first)


def plot_curves(curves: pd.DataFrame) -> Figure:
    """One panel per measure: each method's value at every checkpoint, with its 95%
    CI over edits as a band where it has one. The x axis is symlog: checkpoints
    run from 0 (the unedited model) to thousands of edits."""
    measures = _measures(curves) or ["retention"]
    columns = min(3, len(measures))
    rows = int(np.ceil(len(measures) / columns))
    figure, axes = plt.subplots(
        rows, columns, figsize=(4.2 * columns, 3.2 * rows), squeeze=False
    )
    for ax, measure in zip(axes.flat, measures, strict=False):
        part = curves[curves["measure"] == measure]
        for method, unsorted in part.groupby("method"):
            line = unsorted.sort_values("checkpoint")
            ax.plot(line["checkpoint"], line["value"], marker="o", label=method)
            if line["ci_low"].notna().any():
                ax.fill_between(
                    line["checkpoint"], line["ci_low"], line["ci_high"], alpha=0.2
                )
        protocol = part["protocol"].iloc[0] if len(part) else ""
        ax.set_title(f"{measure} ({protocol})")
        ax.set_xscale("symlog", linthresh=1)
        ax.set_xlabel("edits so far")
        if measure in PERCENT:
            ax.set_ylim(-0.05, 1.05)
        elif measure == "perplexity":  # a collapsed model's runs to 10^5 and more
            ax.set_yscale("log")
    for ax in list(axes.flat)[len(measures) :]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize="small")
    figure.tight_layout()
    return figure


def _cell(row: pd.Series) -> str:
    if row["measure"] in PERCENT:
        text = f"{100 * row['value']:.1f}"
        if pd.notna(row["ci_low"]):
            text += f" [{100 * row['ci_low']:.1f}, {100 * row['ci_high']:.1f}]"
        return text
    return f"{row['value']:.4g}"


def _markdown(frame: pd.DataFrame) -> list[str]:
    """A markdown table of ``frame``'s columns, each cell as text ("" for NaN)."""
    lines = ["| " + " | ".join(map(str, frame.columns)) + " |"]
    lines.append("|" + "---|" * len(frame.columns))
    for row in frame.itertuples(index=False):
        cells = ["" if pd.isna(cell) else str(cell) for cell in row]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def lifelong_markdown(
    curves: pd.DataFrame,
    collapse: pd.DataFrame,
    checkpoints: pd.DataFrame,
    below: float = 0.5,
) -> str:
    """The report: per method, a table of every measure at every checkpoint (%, 95%
    CI over edits for the probe measures), seconds per checkpoint, then the collapse
    table (the first checkpoint whose retention is below ``below``)."""
    lines = [
        "# Lifelong editing",
        "",
        "Each method edits one stream in sequence; after k edits the model is "
        "measured on every edit so far (docs/lifelong.md). Retention and deductive "
        "consistency (the headline's deductive compositions) "
        "are EditSucc's indicator (protocol prob), locality keeps the unedited "
        "argmax (protocol argmax); probe measures are % with a 95% CI over edits.",
        "",
    ]
    for method, part in curves.groupby("method"):
        table = part.assign(cell=part.apply(_cell, axis=1)).pivot(
            index="checkpoint", columns="measure", values="cell"
        )
        table = table[[m for m in _measures(part) if m in table.columns]]
        times = checkpoints[checkpoints["method"] == method].set_index("checkpoint")
        table["edit s"] = times["edit_s"].map("{:.1f}".format)
        table["measure s"] = times["measure_s"].map("{:.1f}".format)
        lines += [f"## {method}", "", *_markdown(table.reset_index()), ""]
    percent = ["retention_at_collapse", "final_retention"]
    shown = collapse.assign(
        collapse_at=collapse["collapse_at"]
        .astype(object)
        .where(collapse["collapse_at"].notna(), "none"),
        **{
            c: collapse[c].map(lambda v: "" if pd.isna(v) else f"{100 * v:.1f}")
            for c in percent
        },
    )
    lines += [
        "## Collapse",
        "",
        f"The first checkpoint where retention falls below {100 * below:.0f}% "
        "(retention in %).",
        "",
        *_markdown(shown),
        "",
    ]
    return "\n".join(lines)
