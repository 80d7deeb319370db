"""Benchmark kg_build on the paper's MQuAKE-T edits: embedded store vs local HTTP server.

Usage: python benchmarks/kg_build.py [--dataset mquake_t]
Prints one JSON object: {"embedded": {...}, "http": {...}}, each with entities_per_s,
queries_per_entity (all SPARQL queries of the build per linked entity; target <= 0.05),
linked_entities, queries, triples and wall_s. Needs KEBENCH_DATA_DIR (default
../shared/data) for the non-demo datasets.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

# Kedro's rich logging writes to stdout; keep stdout for the one JSON object.
with contextlib.redirect_stdout(sys.stderr):
    from kebench.kg.oxigraph_server import load_store, serve
    from kebench.project import load_config, run_pipeline


def measure(dataset: str, output_root: Path, endpoint: str | None = None) -> dict:
    """Run kg_build once and report its throughput and query count."""
    params = {"dataset": dataset} | ({"endpoint": endpoint} if endpoint else {})
    started = time.perf_counter()
    catalog = run_pipeline("kg_build", params, output_root)
    wall_s = time.perf_counter() - started
    coverage = catalog.load("kg_coverage")
    entities = coverage["linked_entities"]
    return {
        "entities_per_s": round(entities / wall_s, 1),
        "queries_per_entity": round(coverage["sparql_queries"] / entities, 4),
        "linked_entities": entities,
        "queries": coverage["sparql_queries"],
        "triples": coverage["triples"],
        "wall_s": round(wall_s, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mquake_t")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", category=UserWarning)
    kg_files = load_config({"dataset": args.dataset})["globals"]["sources"][
        args.dataset
    ]["kg"]["files"]
    with (
        tempfile.TemporaryDirectory() as scratch,
        contextlib.redirect_stdout(sys.stderr),
    ):
        root = Path(scratch)
        result = {
            "dataset": args.dataset,
            "embedded": measure(args.dataset, root / "embedded"),
        }
        with serve(load_store(kg_files, root / "store")) as url:
            result["http"] = measure(args.dataset, root / "http", endpoint=url)
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
