"""Benchmark the built-in AMIE 3 rule miner (``-mins 1``) on four knowledge graphs.

Usage: python benchmarks/rule_mining.py [KG ...]
KGs: kg_mlake (the paper's MLaKE KG), dbpedia_mquake (the paper's MQuAKE DBpedia
subgraph, converted to AMIE input by kebench.kg.amie_export with literals kept),
gen_kg_50000_1 and gen_kg_300000_2 (``gen_kg.py N SEED`` synthetic KGs). Default: all.

Prints one JSON object {"<kg>": {"triples", "wall_s", "peak_rss_mb", "rules"}}. Each KG
runs in its own Python process: wall_s is the in-process time of reading the TSV and
mining (interpreter start and imports excluded), peak_rss_mb that process's peak
resident memory (ru_maxrss, imports included), triples the lines of the TSV, rules the
rules mined. Needs KEBENCH_DATA_DIR (default ../shared/data); the generator is
../tools/gen_kg.py beside that folder.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(
    os.environ.get("KEBENCH_DATA_DIR", PROJECT_ROOT.parent / "shared" / "data")
)
GENERATOR = DATA_DIR.parent / "tools" / "gen_kg.py"


def mine_one(kb_path: Path) -> dict[str, float | int]:
    """Read and mine one TSV in this process; report time, memory and counts."""
    from kebench.rules import mine_rules, read_amie_tsv  # noqa: PLC0415 - timed apart

    started = time.perf_counter()
    rules = mine_rules(read_amie_tsv(kb_path))
    wall_s = time.perf_counter() - started
    with kb_path.open("rb") as handle:
        triples = sum(1 for _ in handle)
    return {
        "triples": triples,
        "wall_s": round(wall_s, 3),
        "peak_rss_mb": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1
        ),
        "rules": len(rules),
    }


def _reference_kg(folder: Path) -> Path:
    return DATA_DIR / "amie_reference" / "kg_mlake.tsv"


def _dbpedia_kg(folder: Path) -> Path:
    from kebench.kg.amie_export import read_dbpedia_tsv, to_amie_tsv  # noqa: PLC0415

    target = folder / "dbpedia_mquake.tsv"
    triples = read_dbpedia_tsv(
        DATA_DIR / "benchmarking_ke" / "dbpedia_triples_mquake.tsv"
    )
    to_amie_tsv(triples, target, include_literals=True)
    return target


def _generated_kg(people: int, seed: int) -> Callable[[Path], Path]:
    def generate(folder: Path) -> Path:
        target = folder / f"gen_kg_{people}_{seed}.tsv"
        with target.open("w", encoding="utf-8") as handle:
            subprocess.run(
                [sys.executable, str(GENERATOR), str(people), str(seed)],
                stdout=handle,
                check=True,
            )
        return target

    return generate


KGS: dict[str, Callable[[Path], Path]] = {
    "kg_mlake": _reference_kg,
    "dbpedia_mquake": _dbpedia_kg,
    "gen_kg_50000_1": _generated_kg(50000, 1),
    "gen_kg_300000_2": _generated_kg(300000, 2),
}


def main() -> None:
    """Build each KG's TSV, mine it in a fresh process, print all results as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "kgs", nargs="*", help=f"some of {', '.join(KGS)} (default: all)"
    )
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)  # worker mode
    arguments = parser.parse_args()
    unknown = sorted(set(arguments.kgs) - set(KGS))
    if unknown:
        parser.error(f"unknown KG(s) {unknown}; choose from {list(KGS)}")
    if arguments.one:
        sys.stdout.write(json.dumps(mine_one(arguments.one)) + "\n")
        return
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for name in arguments.kgs or KGS:
            kb_path = KGS[name](Path(folder))
            worker = subprocess.run(
                [sys.executable, __file__, "--one", str(kb_path)],
                capture_output=True,
                text=True,
                check=True,
            )
            results[name] = json.loads(worker.stdout)
    sys.stdout.write(json.dumps(results) + "\n")


if __name__ == "__main__":
    main()
