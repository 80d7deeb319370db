"""Every registered editing method on the demo, compared on the same edits.

Usage: python benchmarks/results.py [--n-edits N] [--methods A+B] [--root DIR]
                                    [--timing-only] [--write-docs]

Builds the demo's KG, rules, consequences and probes (kg_build to risk_unification),
then edits the first N counterfactual edits of the demo (taken in turn across its nine
relations, as every run takes them) with each registered method, the fast hparams
profile (a method without a fast overlay runs its faithful hparams), on
SmolLM2-135M-Instruct on the CPU; evaluates each method, then all of them together,
so that the report compares them on the same edits. Outputs go under ``--root``
(default ``data/results``, away from `make run`'s), and a stopped run resumes there:
stored deltas and scored shards are read, not made again.

Prints one JSON object: the seconds of each method's editing and evaluation (its
first evaluation scores the base model too), the total, and, unless
``--timing-only`` (used to fix the edit count before any result is seen), the
headline's counterfactual rows (population ``itt``) under ``prob`` and ``wild``, the
paired differences from ROME, and the paths of the report and the plot.
``--write-docs`` also writes the table between the markers of docs/results.md and
copies the plot beside it.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import time
from pathlib import Path

import pandas as pd

with contextlib.redirect_stdout(sys.stderr):
    from model_cli import print_result

    from kebench.editing.registry import method_names
    from kebench.project import PROJECT_ROOT, project_catalog, run_pipeline

# the headline's columns the results table shows, per protocol
COLUMNS = [
    "EditSucc",
    "Paraphrase",
    "Deductive Consistency",
    "Deductive gap",
    "Inductive gap",
    "Relation specificity",
    "Locality",
]
PROTOCOLS = ("prob", "wild")
BEGIN, END = "<!-- results:begin -->", "<!-- results:end -->"
DOCS = PROJECT_ROOT / "docs" / "results.md"
PLOT = "gap_vs_edit_succ.png"


def params_for(method: str, n_edits: int) -> dict:
    """The run's parameters: ``method`` on the first ``n_edits`` counterfactual
    edits, nothing else edited, the fast profile."""
    return {
        "method": method,
        "n_edits": {
            "counterfactual": n_edits,
            "benign_update": 0,
            "misinformation": 0,
            "bias": 0,
        },
        "hparams_profile": "fast",
    }


def timed(name: str, params: dict, root: Path) -> float:
    started = time.perf_counter()
    run_pipeline(name, params, root)
    seconds = round(time.perf_counter() - started, 1)
    # on stderr, so that a stopped run still shows where its time went
    sys.stderr.write(f"{name} {params['method']}: {seconds:.1f} s\n")
    return seconds


def headline_rows(headline: pd.DataFrame) -> list[dict]:
    """The counterfactual rows of ``prob`` and ``wild``, in %, each column with its
    CI and n."""
    rows = headline[
        (headline["risk"] == "counterfactual") & headline["protocol"].isin(PROTOCOLS)
    ]
    out = []
    for row in rows.to_dict("records"):
        cells = {}
        for label in COLUMNS:
            value = row.get(label)
            if value is None or pd.isna(value):
                cells[label] = None
                continue
            cells[label] = {
                "value": round(100 * value, 1),
                "ci": [
                    round(100 * row[f"{label} ci_low"], 1),
                    round(100 * row[f"{label} ci_high"], 1),
                ],
                "n": int(row[f"{label} n"]),
                "n_edits": int(row[f"{label} n_edits"]),
            }
        out.append({"method": row["method"], "protocol": row["protocol"], **cells})
    return out


def _cell(cell: dict | None) -> str:
    """A value, its CI and what it is over: edits, and probes where a metric counts
    probes rather than edits (a gap, the controls)."""
    if cell is None:
        return "–"
    over = f"{cell['n_edits']} edits"
    if cell["n"] != cell["n_edits"]:
        over = f"{cell['n']} probes, {over}"
    return f"{cell['value']:.1f} [{cell['ci'][0]:.1f}, {cell['ci'][1]:.1f}] ({over})"


def markdown_table(rows: list[dict]) -> str:
    """The results as one markdown table: a row per method and protocol."""
    lines = [
        "| method | protocol | " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * (2 + len(COLUMNS)),
    ]
    for row in rows:
        cells = [_cell(row[label]) for label in COLUMNS]
        lines.append(
            f"| {row['method']} | {row['protocol']} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines)


def write_docs(table: str, plot: Path, command: str) -> None:
    """The table between the markers of docs/results.md, the plot beside it."""
    text = DOCS.read_text(encoding="utf-8")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    block = f"{BEGIN}\n<!-- written by `{command}` -->\n\n{table}\n\n{END}"
    DOCS.write_text(head + block + tail, encoding="utf-8")
    shutil.copyfile(plot, DOCS.parent / f"results_{PLOT}")


# what editing and evaluation read: the KG, rules, consequences and probes
UPSTREAM = ("kg_build", "rule_mining", "qa_generation", "risk_unification")


def run(args: argparse.Namespace) -> dict:
    methods = args.methods.split("+") if args.methods else method_names()
    root = args.root
    upstream_s = sum(
        timed(name, params_for(methods[0], args.n_edits), root) for name in UPSTREAM
    )
    seconds: dict[str, dict[str, float]] = {m: {} for m in methods}
    for method in methods:
        seconds[method]["editing_s"] = timed(
            "editing", params_for(method, args.n_edits), root
        )
    for method in methods:
        params = params_for(method, args.n_edits)
        seconds[method]["evaluation_s"] = timed("evaluation", params, root)
    result: dict = {
        "n_edits": args.n_edits,
        "methods": methods,
        "upstream_s": round(upstream_s, 1),
        "seconds": seconds,
        "per_edit_s": {
            m: round(sum(s.values()) / args.n_edits, 2) for m, s in seconds.items()
        },
    }
    methods_s = sum(sum(s.values()) for s in seconds.values())
    if args.timing_only:
        result["total_s"] = round(upstream_s + methods_s, 1)
        return result
    together = params_for("+".join(methods), args.n_edits)
    seconds_together = timed("evaluation", together, root)
    catalog = project_catalog(together, root)
    headline = catalog.load("headline_table")
    rows = headline_rows(headline[headline["population"] == "itt"])
    differences = catalog.load("method_comparison")
    (plot,) = root.glob(f"**/08_reporting/demo/*/fast/{PLOT}")
    report = plot.parent / "report.md"
    table = markdown_table(rows)
    result |= {
        "evaluation_together_s": seconds_together,
        "total_s": round(upstream_s + methods_s + seconds_together, 1),
        "table": rows,
        "differences": differences.round(4).to_dict("records"),
        "report": str(report),
        "plot": str(plot),
    }
    if args.write_docs:
        write_docs(table, plot, " ".join(["python", *sys.argv]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-edits", type=int, default=18)
    parser.add_argument("--methods", help="A+B (default: every registered method)")
    parser.add_argument("--root", type=Path, default=PROJECT_ROOT / "data" / "results")
    parser.add_argument("--timing-only", action="store_true")
    parser.add_argument("--write-docs", action="store_true")
    print_result(run, parser.parse_args())


if __name__ == "__main__":
    main()
