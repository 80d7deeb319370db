"""editing end to end: a Kedro session on a project copy, and a run killed with SIGKILL."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from kebench.editing.delta import load_delta
from kebench.project import PROJECT_ROOT
from kebench.schemas import EDIT_DELTAS
from tests.models.shared import MODEL

OUTPUT = Path("data/07_model_output/demo") / MODEL
N_EDITS = 4


def copy_project(root: Path, model_folder: Path) -> Path:
    """Conf, code and demo data of the project, with the converted model linked in."""
    root.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", ".telemetry"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    shutil.copytree(
        PROJECT_ROOT / "conf", root / "conf", ignore=shutil.ignore_patterns("local")
    )
    (root / "conf" / "local").mkdir()
    shutil.copytree(
        PROJECT_ROOT / "src",
        root / "src",
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"),
    )
    shutil.copytree(
        PROJECT_ROOT / "data" / "01_raw" / "demo", root / "data" / "01_raw" / "demo"
    )
    (root / "data" / "06_models").mkdir(parents=True)
    (root / "data" / "06_models" / MODEL).symlink_to(model_folder)
    return root


def run_session(root: Path, pipeline: str, **runtime_params: object) -> None:
    bootstrap_project(root)
    with KedroSession.create(
        project_path=root, runtime_params=runtime_params
    ) as session:
        session.run(pipeline_names=[pipeline])


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, lm) -> Path:
    """A project copy where kg_build ran, then editing with ROME and IKE on 4 edits."""
    root = copy_project(tmp_path_factory.mktemp("project"), lm.folder)
    run_session(root, "kg_build")
    run_session(root, "editing", method="ROME+IKE", n_edits=N_EDITS)
    return root


def tensors(folder: Path) -> dict[str, dict[str, torch.Tensor]]:
    found = {}
    for path in sorted(folder.glob("*.safetensors")):
        delta = load_delta(path)
        found[path.name] = {
            f"{name}/{key}": tensor
            for name, change in delta.params.items()
            for key, tensor in change.tensors.items()
        }
    return found


@pytest.mark.model
def test_session_writes_a_delta_and_a_manifest_row_per_edit(project, lm):
    manifest = EDIT_DELTAS.validate(
        pd.read_parquet(project / OUTPUT / "edit_deltas.parquet")
    )
    assert len(manifest) == 2 * N_EDITS
    assert set(manifest["status"]) == {"ok"}
    assert list(manifest.groupby("method").size()) == [N_EDITS, N_EDITS]
    rome = manifest[manifest["method"] == "ROME"]
    for row in rome.itertuples():
        path = project / OUTPUT / "deltas" / row.delta_file
        assert path.is_file()
        assert list(row.param_names) == ["model.layers.5.mlp.down_proj.weight"]
        assert [list(s) for s in row.shapes] == [[576, 1536]]
        # Rank one, stored as u and v: far under 0.1% of the model's bytes.
        assert path.stat().st_size <= 0.001 * lm.n_bytes
    ike = manifest[manifest["method"] == "IKE"]
    assert all(len(names) == 0 for names in ike["param_names"])
    assert (ike["tensor_bytes"] == 0).all()


@pytest.mark.model
def test_a_run_killed_with_sigkill_resumes_to_the_same_deltas(project, lm, tmp_path):
    """`kedro run` in a subprocess, killed after its first edits, then run again."""
    root = copy_project(tmp_path / "copy", lm.folder)
    shutil.copytree(
        project / "data" / "02_intermediate", root / "data" / "02_intermediate"
    )
    command = [
        sys.executable,
        "-m",
        "kedro",
        "run",
        "--pipelines=editing",
        f"--params=model={MODEL},method=ROME,n_edits={N_EDITS}",
    ]
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    rows = root / OUTPUT / "deltas" / "ROME" / "single"
    process = subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 300
    while (
        len(list(rows.glob("*.json"))) < 2
        and process.poll() is None
        and time.monotonic() < deadline
    ):
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate()
    assert process.returncode == -signal.SIGKILL, stderr.decode()[-2000:]
    kept = {p.name: p.stat().st_mtime_ns for p in rows.glob("*.json")}
    assert 2 <= len(kept) < N_EDITS

    finished = subprocess.run(
        command, cwd=root, env=env, capture_output=True, check=False
    )
    assert finished.returncode == 0, finished.stderr.decode()[-2000:]
    assert {
        p.name: p.stat().st_mtime_ns for p in rows.glob("*.json") if p.name in kept
    } == kept
    assert len(list(rows.glob("*.json"))) == N_EDITS

    resumed = tensors(rows)
    uninterrupted = tensors(project / OUTPUT / "deltas" / "ROME" / "single")
    assert resumed.keys() == uninterrupted.keys()
    for name, parts in uninterrupted.items():
        assert resumed[name].keys() == parts.keys()
        for key, tensor in parts.items():
            assert torch.equal(resumed[name][key], tensor), f"{name}: {key}"
    manifest = EDIT_DELTAS.validate(
        pd.read_parquet(root / OUTPUT / "edit_deltas.parquet")
    )
    assert len(manifest) == N_EDITS
