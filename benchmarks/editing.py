"""Benchmark kebench's editing methods on the real SmolLM2-135M on CPU.

Usage: python benchmarks/editing.py [--dataset demo|mquake_t] [--n-edits 10]
                                    [--methods ROME+MEMIT+FT-L+FT-M+KN+IKE]
                                    [--hparams-profile faithful|fast]
       python benchmarks/editing.py --compare-profiles [--dataset mquake_t]
                                    [--methods ROME+MEMIT] [--n-edits 20] [--keep DIR]
                                    [--profiles faithful+fast]

The first form prints one JSON object keyed by lowercase method name, each with:
    seconds_per_edit: mean wall time of one edit (after a warm-up edit, which pays the
        one-time costs: context templates, covariance statistics; see setup_s);
    delta_bytes: mean size of one edit's delta file; model_bytes: the model's weights;
    delta_fraction: delta_bytes / model_bytes;
    apply_revert_ms: median time to apply one delta and revert it exactly;
    edit_succ, locality: EditSucc and locality (kebench.editing.quality) on these edits;
    setup_s: the warm-up edit's time.
Targets (issue 4): ROME <= 10 s/edit on 2 CPU cores, delta_fraction <= 0.001.
The model is converted once under data/06_models and statistics cached under
data/06_models/stats, as a pipeline run would. KEBENCH_DATA_DIR locates mquake_t.

``--compare-profiles`` runs the pipelines (kg_build to risk_unification once, then
editing and evaluation per profile, ``--n-edits`` edits per risk) and prints, per method
and profile, the seconds per edit, the mean delta bytes and the headline's EditSucc,
Consistency and Locality with their 95% CIs per risk, and per metric whether the fast
profile's value lies within the faithful profile's CI (when both run; ``--profiles
faithful`` runs one, for a per-method table). The outputs go under ``--keep`` (a rerun resumes the edits
already stored) or a scratch folder; the model and statistics are the project's.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# Kedro's rich logging writes to stdout; keep stdout for the one JSON object.
with contextlib.redirect_stdout(sys.stderr):
    import pandas as pd
    from model_cli import model_parser, print_result

    from kebench.datasets.edit_cases_dataset import EditCasesDataset
    from kebench.editing.datasets import EditHparamsDataset
    from kebench.editing.delta import apply_delta, revert_delta, save_delta
    from kebench.editing.hparams import Architecture, resolve_all
    from kebench.editing.interface import EditContext
    from kebench.editing.quality import measure_edits
    from kebench.editing.registry import get_method, method_names
    from kebench.editing.requests import requests_from_frame
    from kebench.kg.edit_cases import RelationCatalog, parse_edit_cases
    from kebench.project import PROJECT_ROOT, load_config, project_model, run_pipeline

logger = logging.getLogger("benchmarks.editing")
METHODS = "ROME+MEMIT+FT-L+FT-M+KN+IKE"
N_PROBES = 16
UPSTREAM = ("kg_build", "rule_mining", "qa_generation", "risk_unification")
PROFILES = ("faithful", "fast")
HEADLINE_METRICS = (
    "EditSucc",
    "Deductive Consistency",
    "Inductive Consistency (paper)",
    "Locality",
)


def edit_cases(dataset: str, config) -> pd.DataFrame:
    """The dataset's parsed edit cases, as kg_build parses them (no KG needed)."""
    sources = config["globals"]["sources"]
    spec = sources[dataset]["edit_cases"]
    path = Path(spec["filepath"])
    if not path.is_absolute():
        sources = {
            dataset: {
                **sources[dataset],
                "edit_cases": {**spec, "filepath": str(PROJECT_ROOT / path)},
            }
        }
    raw = EditCasesDataset(dataset, sources).load()
    relations = RelationCatalog.from_config(config["parameters"]["relations"])
    return parse_edit_cases(raw, relations)


def edit_requests(dataset: str, config) -> list:
    """The dataset's edit requests (``edit_cases``)."""
    return requests_from_frame(edit_cases(dataset, config))


@dataclass(frozen=True)
class Workload:
    """The edits to time, the locality probes, and a warm-up edit outside both."""

    requests: list
    probes: list
    warmup: object
    context: EditContext


def measure(lm, method: str, raw_hparams: dict, work: Workload) -> dict:
    """Edit each request once, timing it, then time apply + revert of every delta."""
    entry = get_method(method)
    hparams = entry.hparams.from_dict(raw_hparams, method)
    context, requests = work.context, work.requests
    started = time.perf_counter()
    entry.compute(lm, [work.warmup], hparams, context)
    setup_s = time.perf_counter() - started
    deltas, seconds = [], []
    for request in requests:
        started = time.perf_counter()
        deltas.append(entry.compute(lm, [request], hparams, context))
        seconds.append(time.perf_counter() - started)
    sizes, apply_revert = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for i, delta in enumerate(deltas):
            path = Path(scratch) / f"{i}.safetensors"
            save_delta(delta, path)
            sizes.append(path.stat().st_size)
            for _ in range(5):
                started = time.perf_counter()
                revert_delta(lm.model, apply_delta(lm.model, delta))
                apply_revert.append(time.perf_counter() - started)
    quality = measure_edits(lm, requests, deltas, work.probes)
    delta_bytes = statistics.mean(sizes)
    return {
        "seconds_per_edit": round(statistics.mean(seconds), 3),
        "delta_bytes": round(delta_bytes),
        "model_bytes": lm.n_bytes,
        "delta_fraction": delta_bytes / lm.n_bytes,
        "apply_revert_ms": round(1000 * statistics.median(apply_revert), 3),
        "edit_succ": sum(q.edit_succ for q in quality) / len(quality),
        "locality": round(statistics.mean(q.locality for q in quality), 4),
        "n_edits": len(requests),
        "setup_s": round(setup_s, 2),
    }


def run(args: argparse.Namespace) -> dict[str, dict]:
    """Load the model and requests, then measure every method."""
    config = load_config({"dataset": args.dataset, "model": args.model})
    models = PROJECT_ROOT / "data" / "06_models"
    started = time.perf_counter()
    lm = project_model(args.model, config)
    logger.info("Model loaded in %.2f s", time.perf_counter() - started)
    requests = edit_requests(args.dataset, config)
    work = Workload(
        requests=requests[: args.n_edits],
        probes=requests[args.n_edits : args.n_edits + N_PROBES],
        warmup=requests[-1],
        context=EditContext(stats_dir=models / "stats", pool=requests),
    )
    files = EditHparamsDataset(
        str(PROJECT_ROOT / "conf" / "base" / "hparams"),
        args.model,
        config["catalog"]["model"]["registry"],
        profile=args.hparams_profile,
    ).load()
    hparams = resolve_all(
        method_names(),
        files,
        Architecture.of(lm.model.config),
        config["parameters"]["model_families"],
    )
    result = {}
    for method in args.methods.split("+"):
        result[method.lower()] = measure(lm, method, hparams[method].values, work)
        logger.info("%s: %s", method, result[method.lower()])
    return result


def profile_numbers(catalog, methods: list[str]) -> dict[str, dict]:
    """Per method: seconds per stored edit and the headline metrics with CIs per risk."""
    headline = catalog.load("headline_table")
    manifest = catalog.load("edit_manifest")
    found = {}
    for method in methods:
        rows = headline[headline["method"] == method]
        done = manifest[(manifest["method"] == method) & (manifest["status"] == "ok")]
        found[method] = {
            "seconds_per_edit": round(float(done["wall_s"].mean()), 2),
            "delta_bytes": round(float(done["tensor_bytes"].mean())),
            "n_edits": len(done),
            "risks": {
                row["risk"]: {
                    metric: [
                        round(float(row[column]), 4)
                        for column in (metric, f"{metric} ci_low", f"{metric} ci_high")
                    ]
                    for metric in HEADLINE_METRICS
                    if metric in row
                }
                for row in rows.to_dict("records")
            },
        }
    return found


def within_ci(faithful: dict, fast: dict) -> dict[str, dict[str, bool]]:
    """Per risk and metric: is the fast value inside the faithful 95% CI?"""
    return {
        risk: {
            metric: bool(bounds[1] <= fast["risks"][risk][metric][0] <= bounds[2])
            for metric, bounds in metrics.items()
        }
        for risk, metrics in faithful["risks"].items()
        if risk in fast["risks"]
    }


def compare_profiles(args: argparse.Namespace) -> dict:
    """The pipelines' numbers under each hparams profile, and whether fast stays
    within faithful's CIs."""
    methods = args.methods.split("+")
    params = {
        "dataset": args.dataset,
        "model": args.model,
        "method": args.methods,
        "n_edits": args.n_edits,
    }
    with contextlib.ExitStack() as stack:
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        models = root / "data" / "06_models"
        if not models.exists():
            models.parent.mkdir(parents=True, exist_ok=True)
            models.symlink_to(PROJECT_ROOT / "data" / "06_models")
        for name in UPSTREAM:
            run_pipeline(name, params, root)
        numbers = {}
        profiles = args.profiles.split("+")
        for profile in profiles:
            profiled = {**params, "hparams_profile": profile}
            run_pipeline("editing", profiled, root)
            catalog = run_pipeline("evaluation", profiled, root)
            numbers[profile] = profile_numbers(catalog, methods)
    return {
        "dataset": args.dataset,
        "n_edits_per_risk": args.n_edits,
        "methods": {
            method: {
                **{profile: numbers[profile][method] for profile in profiles},
                **(
                    {
                        "fast_within_faithful_ci": within_ci(
                            numbers["faithful"][method], numbers["fast"][method]
                        )
                    }
                    if set(PROFILES) <= set(profiles)
                    else {}
                ),
            }
            for method in methods
        },
    }


def main() -> None:
    parser = model_parser(__doc__)
    parser.add_argument("--n-edits", type=int, default=10)
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--hparams-profile", default="faithful", choices=PROFILES)
    parser.add_argument("--compare-profiles", action="store_true")
    parser.add_argument("--keep", type=Path, help="--compare-profiles: outputs here")
    parser.add_argument(
        "--profiles",
        default="+".join(PROFILES),
        help="--compare-profiles: the profiles to run, joined by + (one: its table)",
    )
    args = parser.parse_args()
    print_result(compare_profiles if args.compare_profiles else run, args)


if __name__ == "__main__":
    main()
