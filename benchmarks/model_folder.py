"""A model folder edits in minutes: `kedro run` on tiny random checkpoints of three families.

Usage: python benchmarks/model_folder.py [--families qwen2,olmo2,starcoder2] [--keep DIR]

Builds a tiny random checkpoint folder of each family with transformers' own config
class (``tests/models/tiny.py``, as the family tests do: 4 layers, width 64, SmolLM2's
byte-level BPE tokenizer), copies the project (conf, code, demo data) to a scratch
folder, runs the pipelines up to the probes there once, then, per family, exactly

    kedro run --pipelines=editing,evaluation --params=model=<folder>,method=ROME+MEMIT,n_edits=2

as a subprocess, with MLflow tracking to a scratch SQLite store (MLFLOW_TRACKING_URI).
Nothing is written under the repository's data/. No hparams file names these folders,
so every value is derived (docs/models.md), the covariance statistics (MEMIT, ROME with
mom2) included: they are computed from nothing in each run.

Prints one JSON object: per family, seconds (the `kedro run` alone), rc, edits (rows of
its manifest, by status), mlflow_metrics (metrics of the run's MLflow run, found by its
`model` param), hparams_adjusted (its MLflow params of that name) and the 1-minute
load average before and after; plus the CPU count. Target: each run at most 600 s on
2 cores.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
# The tiny checkpoints and the project copy are the tests' own (tests/models/tiny.py,
# tests/helpers.py), reused rather than copied here.
sys.path.insert(0, str(PROJECT_ROOT))

with contextlib.redirect_stdout(sys.stderr):
    import pandas as pd
    from mlflow.tracking import MlflowClient
    from model_cli import print_result

    from kebench.models.loading import load_model
    from kebench.models.registry import model_key, model_spec
    from kebench.project import load_config
    from tests.helpers import copy_project
    from tests.models.tiny import build_checkpoint

FAMILIES = ("qwen2", "olmo2", "starcoder2")
UPSTREAM = "kg_build,rule_mining,qa_generation,risk_unification"
TOKENIZER_MODEL = "smollm2-135m"


def kedro_run(root: Path, env: dict[str, str], log: Path, *arguments: str) -> int:
    """`kedro run` with ``arguments`` in the project ``root``; its output to ``log``."""
    with log.open("w", encoding="utf-8") as out:
        return subprocess.run(  # noqa: S603 - this interpreter's kedro, our arguments
            [sys.executable, "-m", "kedro", "run", *arguments],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        ).returncode


def mlflow_run(tracking_uri: str, key: str) -> dict:
    """The metric count and the ``hparams_adjusted`` params of the run of ``key``."""
    client = MlflowClient(tracking_uri)
    experiment = client.get_experiment_by_name("kebench")
    runs = (
        client.search_runs(
            experiment.experiment_id, filter_string=f"params.model = '{key}'"
        )
        if experiment
        else []
    )
    return {
        "mlflow_runs": len(runs),
        "mlflow_metrics": sum(len(run.data.metrics) for run in runs),
        "hparams_adjusted": {
            name: value
            for run in runs
            for name, value in run.data.params.items()
            if name.startswith("hparams_adjusted.")
        },
    }


def edit_statuses(root: Path, key: str) -> dict[str, int]:
    """How many of the run's stored edits of model ``key`` are ok, and failed."""
    manifest = root / "data" / "07_model_output" / "demo" / key / "faithful"
    statuses = pd.read_parquet(manifest / "edit_deltas.parquet")["status"]
    return {str(k): int(v) for k, v in statuses.value_counts().items()}


def run(args: argparse.Namespace) -> dict:
    """Each family's `kedro run` of editing and evaluation, timed, in a scratch copy."""
    with contextlib.ExitStack() as stack:
        scratch = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        registry = load_config({})["catalog"]["model"]["registry"]
        bpe = load_model(
            model_spec(TOKENIZER_MODEL, registry),
            scratch / "06_models" / TOKENIZER_MODEL,
        ).tokenizer
        root = copy_project(scratch / "project")
        tracking_uri = f"sqlite:///{scratch / 'mlflow.db'}"
        env = {
            **os.environ,
            "MLFLOW_TRACKING_URI": tracking_uri,
            "KEDRO_DISABLE_TELEMETRY": "1",
            # the default, ../shared/data, is relative to the project: the copy's
            # would miss the reference data (EditAttack's injections and general sets)
            "KEBENCH_DATA_DIR": os.environ.get(
                "KEBENCH_DATA_DIR", str(PROJECT_ROOT.parent / "shared" / "data")
            ),
        }
        rc = kedro_run(root, env, scratch / "upstream.log", f"--pipelines={UPSTREAM}")
        if rc:
            raise SystemExit(f"the pipelines up to the probes failed: {scratch}")
        results = {}
        for family in args.families.split(","):
            folder = build_checkpoint(family, scratch / "checkpoints" / family, bpe)
            load_before = os.getloadavg()[0]
            started = time.perf_counter()
            rc = kedro_run(
                root,
                env,
                scratch / f"{family}.log",
                "--pipelines=editing,evaluation",
                f"--params=model={folder},method=ROME+MEMIT,n_edits=2",
            )
            seconds = round(time.perf_counter() - started, 1)
            key = model_key(str(folder))
            if rc:
                tail = (scratch / f"{family}.log").read_text()[-3000:]
                sys.stderr.write(f"{family}: rc {rc}\n{tail}\n")
            results[family] = {
                "seconds": seconds,
                "rc": rc,
                "edits": {} if rc else edit_statuses(root, key),
                **mlflow_run(tracking_uri, key),
                "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            }
    return {"families": results, "cpus": os.cpu_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument(
        "--keep", type=Path, help="work here (project copy, logs, MLflow) and keep it"
    )
    print_result(run, parser.parse_args())


if __name__ == "__main__":
    main()
