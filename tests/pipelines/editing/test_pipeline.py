"""editing end to end: a Kedro session on a project copy, and a run killed with SIGKILL."""

from __future__ import annotations

import json
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
from mlflow.tracking import MlflowClient

from kebench.editing.delta import load_delta
from kebench.models.registry import model_key
from kebench.schemas import EDIT_DELTAS
from tests.helpers import copy_project
from tests.models.shared import MODEL
from tests.models.tiny import build_checkpoint

OUTPUT = Path("data/07_model_output/demo") / MODEL / "fast"
# the first 2 edits of each of the demo's 3 risks (benign, misinformation, bias)
PER_RISK = 2
N_EDITS = 3 * PER_RISK
# ROME's edits computed together: in groups of two, a run can be killed between them
VALUE_BATCH = 2


def run_session(root: Path, pipelines: list[str], **runtime_params: object) -> None:
    bootstrap_project(root)
    with KedroSession.create(
        project_path=root, runtime_params={"hparams_profile": "fast", **runtime_params}
    ) as session:
        session.run(pipeline_names=pipelines)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory, lm) -> Path:
    """A project copy where the pipelines up to the probes ran, then editing with ROME
    and IKE on the first edits of each risk."""
    root = copy_project(tmp_path_factory.mktemp("project"), (MODEL, lm.folder))
    run_session(root, ["kg_build", "rule_mining", "qa_generation", "risk_unification"])
    run_session(
        root,
        ["editing"],
        method="ROME+IKE",
        n_edits=PER_RISK,
        editing={"value_batch": VALUE_BATCH},
    )
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
    # the demo's counterfactual edits, then EditAttack's injected claims
    assert {c.rsplit("-", 1)[0] for c in rome["case_id"]} == {
        "demo",
        "editattack_commonsense",
        "editattack_bias",
    }
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
    root = copy_project(tmp_path / "copy", (MODEL, lm.folder))
    shutil.copytree(
        project / "data" / "05_model_input", root / "data" / "05_model_input"
    )
    command = [
        sys.executable,
        "-m",
        "kedro",
        "run",
        "--pipelines=editing",
        f"--params=model={MODEL},method=ROME,n_edits={PER_RISK},hparams_profile=fast,"
        f"editing.value_batch={VALUE_BATCH}",
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


@pytest.mark.model
def test_a_checkpoint_folder_never_edited_is_edited_and_evaluated_in_one_run(
    project, lm
):
    """``kedro run --pipelines=evaluation --params model=<folder of a tiny
    Qwen2>,method=ROME+MEMIT`` with the faithful hparams: no YAML names the model, so
    its hparams are derived from its architecture and Qwen2.5-7B's files, with the fast
    profile's covariance count in place of their 100,000 texts; the one run edits, and
    ends with metrics and the derived hparams in MLflow."""
    folder = build_checkpoint(
        "qwen2", project / "checkpoints" / "tiny-qwen2", lm.tokenizer
    )
    run_session(
        project,
        ["evaluation"],
        model=str(folder),
        method="ROME+MEMIT",
        n_edits=1,
        hparams_profile="faithful",
    )
    key = model_key(str(folder))
    output = project / "data" / "07_model_output" / "demo" / key / "faithful"
    manifest = EDIT_DELTAS.validate(pd.read_parquet(output / "edit_deltas.parquet"))
    assert set(manifest["method"]) == {"ROME", "MEMIT"}
    assert set(manifest["model"]) == {key}
    rome = json.loads(manifest[manifest["method"] == "ROME"]["hparams"].iloc[0])
    # Qwen2.5-7B's ROME layer 5 of 28 on 4 layers: 5 * 3 / 27 = 0.56 -> 1
    assert rome["layers"] == [1]
    assert rome["rewrite_module_tmp"] == "model.layers.{}.mlp.down_proj"
    # MEMIT's fast overlay's count (conf/base/hparams/MEMIT/fast/_default.yaml)
    assert rome["mom2_adjustment"] is True and rome["mom2_n_samples"] == 128
    provenance = json.loads((output / "hparams_provenance.json").read_text())
    assert provenance["ROME"]["reference"] == "qwen2.5-7b"
    assert "layers" in provenance["ROME"]["derived"]
    assert set(provenance["ROME"]["adjusted"]) == {"mom2_n_samples"}

    client = MlflowClient()
    (run,) = client.search_runs(
        client.get_experiment_by_name("kebench").experiment_id,
        filter_string=f"params.model = '{key}'",
    )
    assert "layers" in run.data.params["hparams_derived.ROME"].split(",")
    assert run.data.params["hparams_reference.MEMIT"] == "qwen2.5-7b"
    for method in ("ROME", "MEMIT"):
        adjusted = run.data.params[f"hparams_adjusted.{method}"]
        assert adjusted.startswith("mom2_n_samples: the fast profile's count")
    for method in ("ROME", "MEMIT"):
        assert any(m.startswith(f"evaluation.{method}.") for m in run.data.metrics)
