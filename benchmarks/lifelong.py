"""Run a lifelong stream of sequential edits and print its curves.

Usage: python benchmarks/lifelong.py --method ROME --edits 500 [--keep DIR]
           [--checkpoints 1,10,50,100,250,500] [--hparams-profile fast]
           [--dataset demo] [--model smollm2-135m] [--top-up mlake]

Runs kg_build to risk_unification on the dataset once (skipped when ``--keep DIR``
already holds them), then the lifelong pipeline: the dataset's edits in table order,
topped up from ``--top-up`` (MLaKE's edits by default, through KEBENCH_DATA_DIR) up to
``--edits``, in sequence, measured at each checkpoint. With ``--keep`` a killed run
resumes from its stored deltas and checkpoints. Prints one JSON object:

    {"<method>": {"checkpoints": [...], "retention": [...], "consistency": [...],
                  "locality": [...], "perplexity": [...], "norm_growth": [...],
                  "collapse_at": k or null, "edit_s": [...], "measure_s": [...],
                  "s_per_edit": ..., "profile": ..., "edits": n}}

Lists run over the checkpoints, 0 (the unedited model) first; a probe measure is
null where no probe of the edits so far asks it. ``edit_s`` is the editing time since
the previous checkpoint, ``measure_s`` the time to measure the checkpoint.
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
from pathlib import Path

import pandas as pd

with contextlib.redirect_stdout(sys.stderr):
    from model_cli import model_parser, print_result

    from kebench.project import project_catalog, run_in_catalog, run_pipeline

UPSTREAM = ("kg_build", "rule_mining", "qa_generation", "risk_unification")
CURVES = ("retention", "consistency", "locality", "perplexity", "norm_growth")


def _curves(catalog, method: str) -> dict:
    curves = catalog.load("lifelong_curves")
    checkpoints = catalog.load("lifelong_checkpoints")
    collapse = catalog.load("lifelong_collapse").set_index("method")
    times = checkpoints[checkpoints["method"] == method].sort_values("checkpoint")
    order = list(times["checkpoint"])
    mine = curves[curves["method"] == method]
    result = {"checkpoints": order}
    for measure in CURVES:
        values = mine[mine["measure"] == measure].set_index("checkpoint")["value"]
        result[measure] = [
            round(float(values[k]), 4) if k in values.index else None for k in order
        ]
    collapse_at = collapse.loc[method, "collapse_at"]
    edit_s = [round(float(s), 1) for s in times["edit_s"]]
    return result | {
        "collapse_at": None if pd.isna(collapse_at) else int(collapse_at),
        "edit_s": edit_s,
        "measure_s": [round(float(s), 1) for s in times["measure_s"]],
        "s_per_edit": round(sum(edit_s) / max(order), 2),
        "edits": max(order),
        "failed": int(times["failed"].iloc[-1]),
    }


def run(args) -> dict:
    """Upstream once, then the stream; the curves of each method of ``--method``
    (several joined by ``+``)."""
    params = {
        "dataset": args.dataset,
        "model": args.model,
        "method": args.method,
        "hparams_profile": args.hparams_profile,
        "lifelong_edits": args.edits,
        "lifelong_top_up": args.top_up,
    }
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        done = root / "upstream.done"
        if not done.exists():
            for name in UPSTREAM:
                run_pipeline(name, params, root)
            done.write_text("\n".join(UPSTREAM), encoding="utf-8")
        catalog = project_catalog(params, root)
        lifelong = catalog.load("params:lifelong")
        if args.checkpoints:
            checkpoints = [int(c) for c in args.checkpoints.split(",")]
            catalog["params:lifelong"] = lifelong | {"checkpoints": checkpoints}
        run_in_catalog("lifelong", catalog)
        return {
            method: _curves(catalog, method) | {"profile": args.hparams_profile}
            for method in args.method.split("+")
        }


def main() -> None:
    parser = model_parser(__doc__)
    parser.add_argument("--method", default="ROME")
    parser.add_argument("--edits", type=int, default=500)
    parser.add_argument(
        "--checkpoints", help="comma-separated edit counts (default: lifelong.yml's)"
    )
    parser.add_argument("--hparams-profile", default="fast")
    parser.add_argument("--top-up", default="mlake")
    parser.add_argument("--keep", type=Path, help="keep the outputs here (resumes)")
    print_result(run, parser.parse_args())


if __name__ == "__main__":
    main()
