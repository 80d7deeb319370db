"""Time the design card's one command after `make run` (issue 41, part 1).

Usage: python benchmarks/one_command.py [--model smollm2-135m] [--runs 2] [--cold]

Runs ``kedro run --pipelines=evaluation --params model=<model>`` in the project root,
``--runs`` times in a row, each in a fresh process, as a user types it: model loading,
Kedro's start-up and MLflow included. Run it after `make run`, so that every edit and
score is stored. ``--cold`` empties the page cache before the first run (Linux, as
root: ``/proc/sys/vm/drop_caches``), so Python, torch, Kedro and the model are read
from disk. Prints one JSON object: {"runs_s": [...], "cold_first": bool,
"recomputed": [...], "target_s": 30, "met": bool}. ``recomputed`` lists the log
lines of the base-model stores that say something was scored now (empty: nothing
was); ``met`` is every run within the target with nothing recomputed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
TARGET_S = 30.0
# the evaluation's log line for the base-model stores: "<n> ...: <k> scored now"
SCORED_NOW = re.compile(r": (\d+) scored now")


def empty_page_cache() -> None:
    """Write dirty pages, then drop the page cache (needs root)."""
    os.sync()
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def time_run(model: str) -> tuple[float, str]:
    """The command's wall seconds and its output; a failed run stops the benchmark."""
    command = [
        sys.executable,
        "-m",
        "kedro",
        "run",
        "--pipelines=evaluation",
        "--params",
        f"model={model}",
    ]
    started = time.perf_counter()
    # a wide console: rich wraps log lines, and would cut the counts from their words
    done = subprocess.run(
        command,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "COLUMNS": "1000"},
    )
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stdout[-3000:]}{done.stderr}")
    return seconds, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cold", action="store_true")
    args = parser.parse_args()
    if args.cold:
        empty_page_cache()
    seconds, recomputed = [], []
    for _ in range(args.runs):
        elapsed, output = time_run(args.model)
        seconds.append(round(elapsed, 1))
        counts = list(SCORED_NOW.finditer(output))
        if not counts:  # the log no longer says: nothing proves the stores were read
            recomputed.append("no base-store log line")
        recomputed += [m.group(0) for m in counts if m.group(1) != "0"]
    result = {
        "runs_s": seconds,
        "cold_first": args.cold,
        "recomputed": recomputed,
        "target_s": TARGET_S,
        "met": not recomputed and max(seconds) <= TARGET_S,
    }
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
