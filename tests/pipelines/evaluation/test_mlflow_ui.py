"""A tracked `kedro run` of two methods, read back through `kedro mlflow ui`'s REST API
and in headless Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project
from mlflow.tracking import MlflowClient

from kebench.kg.oxigraph_server import stop_process_group
from tests.helpers import (
    CHROMIUM,
    copy_project,
    free_port,
    headless_chromium,
    start_server,
    wait_for_json,
)
from tests.models.shared import MODEL
from tests.pipelines.conftest import DEMO_EDITS

METHODS = ("ROME", "IKE")


@pytest.fixture(scope="module")
def tracked_project(evaluated_root, lm, tmp_path_factory) -> tuple[Path, str]:
    """`kedro run --pipelines=evaluation --params=method=ROME+IKE` in a project copy
    holding the shared demo run's edits and scores, tracked in a fresh SQLite store."""
    # the earlier in-process runs must not have left a run open for this one to reuse
    assert mlflow.active_run() is None
    assert DEMO_EDITS["method"] == "+".join(METHODS)
    root = tmp_path_factory.mktemp("tracked")
    project = copy_project(root / "project", (MODEL, lm.folder))
    source = evaluated_root / "data"
    shutil.copytree(
        source / "07_model_output/demo" / MODEL / "fast",
        project / "data/07_model_output/demo" / MODEL / "fast",
    )
    shutil.copytree(source / "05_model_input", project / "data/05_model_input")
    # the base model's stored scores: this run reads them, as a user's second run would
    shutil.copytree(
        source / "07_model_output/base_scores",
        project / "data/07_model_output/base_scores",
    )
    uri = f"sqlite:///{root / 'mlflow.db'}"
    previous = os.environ["MLFLOW_TRACKING_URI"]
    os.environ["MLFLOW_TRACKING_URI"] = uri
    cwd = Path.cwd()
    try:
        os.chdir(project)
        bootstrap_project(project)
        with KedroSession.create(
            project_path=project,
            runtime_params={"method": "+".join(METHODS), "hparams_profile": "fast"},
        ) as session:
            session.run(pipeline_names=["evaluation"])
    finally:
        os.chdir(cwd)
        os.environ["MLFLOW_TRACKING_URI"] = previous
    return project, uri


@pytest.mark.model
def test_the_run_logs_params_metrics_and_artifacts(tracked_project):
    _, uri = tracked_project
    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs(client.get_experiment_by_name("kebench").experiment_id)
    (run,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert {
        "evaluation.ROME.counterfactual.direct.edit_succ",
        "evaluation.ROME.counterfactual.direct-entailed.gap_deductive",
        "evaluation.unedited.counterfactual.direct.edit_succ",
        "evaluation.ROME.failed_edits",
        "evaluation.IKE.counterfactual.direct.edit_succ",
    } <= set(run.data.metrics)
    params = run.data.params
    assert params["evaluation.methods"] == "ROME+IKE" and params["model"] == MODEL
    # named and tagged by what it did; the experiment opens on its runs table
    assert run.info.run_name == f"evaluation · demo · {MODEL} · fast"
    assert {
        "kebench.dataset": "demo",
        "kebench.model": MODEL,
        "kebench.profile": "fast",
        "kebench.methods": "ROME+IKE",
        "kebench.pipelines": "evaluation",
        "runner": "SequentialRunner",
    }.items() <= run.data.tags.items()
    (edit_cases,) = run.inputs.dataset_inputs
    assert edit_cases.dataset.name == "demo"
    assert edit_cases.dataset.source.endswith('data/01_raw/demo/edit_cases.json"}')
    experiment = client.get_experiment_by_name("kebench")
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert params["hparams.ROME.layers"] == "[5]"
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {
        "report.md",
        "metrics.csv",
        "direct_vs_entailed.png",
        "consistency_distribution.png",
    } <= artifacts


def start_mlflow_ui(project: Path, uri: str, log_path: Path):
    """`kedro mlflow ui` on a free port, in its own process group."""
    port = free_port()
    bin_dir = str(Path(sys.executable).parent)  # kedro-mlflow calls `mlflow` by name
    env = {
        **os.environ,
        "KEDRO_DISABLE_TELEMETRY": "1",
        "MLFLOW_TRACKING_URI": uri,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    kedro = str(Path(bin_dir) / "kedro")
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [kedro, "mlflow", "ui", "--host", "127.0.0.1", "--port", str(port)],
            cwd=project,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, f"http://127.0.0.1:{port}/api/2.0/mlflow"


def metrics_of(run: dict) -> dict[str, float]:
    return {m["key"]: m["value"] for m in run["data"].get("metrics", [])}


def tags_of(run: dict) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


@pytest.fixture(scope="module")
def mlflow_ui(tracked_project):
    """`kedro mlflow ui` over the tracked run: the REST API's URL, the experiment id
    and its runs; stopped with its process group afterwards."""
    project, uri = tracked_project
    log_path = project / "mlflow_ui.log"
    process, api, found = start_server(
        lambda: start_mlflow_ui(project, uri, log_path),
        "/experiments/get-by-name?experiment_name=kebench",
        log_path,
    )
    experiment = found["experiment"]["experiment_id"]
    try:
        runs = wait_for_json(
            f"{api}/runs/search",
            process,
            body={"experiment_ids": [experiment], "max_results": 50},
        )["runs"]
        yield api, experiment, runs
    finally:
        stop_process_group(process, timeout_s=15)


@pytest.mark.model
@pytest.mark.server
def test_the_ui_serves_both_methods_with_the_same_metric_keys(mlflow_ui):
    """Each method's child run carries the same keys, so the UI compares them."""
    _, _, runs = mlflow_ui
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in tags_of(r)]
    children = {
        tags_of(r)["kebench.method"]: r
        for r in runs
        if tags_of(r).get("mlflow.parentRunId") == parent["info"]["run_id"]
    }
    assert set(children) == {*METHODS, "unedited"}
    keys = {method: set(metrics_of(run)) for method, run in children.items()}
    assert keys["ROME"] == keys["IKE"]
    assert "evaluation.counterfactual.direct.edit_succ" in keys["ROME"]
    assert "evaluation.ROME.counterfactual.direct.edit_succ" not in keys["ROME"]
    on_parent = metrics_of(parent)
    for method in METHODS:
        assert children[method]["info"]["run_name"] == method
        for key, value in metrics_of(children[method]).items():
            rest = key.removeprefix("evaluation.")
            assert on_parent[f"evaluation.{method}.{rest}"] == value, key


def page_text(dom: str) -> str:
    """The visible text of a rendered page."""
    dom = re.sub(r"<(script|style).*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", dom)))


@pytest.mark.model
@pytest.mark.server
@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)"
)
def test_a_browser_shows_the_runs_by_name_and_compares_two_methods(mlflow_ui, tmp_path):
    """The runs table names the run by pipeline, dataset, model and profile, with its
    dataset; the run's page shows the runner by its class name; comparing the two
    methods' child runs shows the headline metric side by side, with their tags."""
    api, experiment, runs = mlflow_ui
    ui = api.removesuffix("/api/2.0/mlflow")
    # MLflow 3.17 remembers the GenAI / Model training switch per browser, and a fresh
    # one starts on GenAI: the docs give this link (docs/evaluation.md)
    table = page_text(
        headless_chromium(
            f"{ui}/#/experiments/{experiment}/runs?workflowType=machine_learning",
            tmp_path / "profile-runs",
            "--dump-dom",
        )
    )
    child = {tags_of(r).get("kebench.method"): r["info"]["run_id"] for r in runs}
    compared = json.dumps([child["ROME"], child["IKE"]])
    compare = page_text(
        headless_chromium(
            f'{ui}/#/compare-runs?runs={compared}&experiments=["{experiment}"]',
            tmp_path / "profile-compare",
            "--dump-dom",
        )
    )
    (parent,) = [r for r in runs if "mlflow.parentRunId" not in tags_of(r)]
    page = page_text(
        headless_chromium(
            f"{ui}/#/experiments/{experiment}/runs/{parent['info']['run_id']}",
            tmp_path / "profile-run",
            "--dump-dom",
        )
    )
    # the row: name, then age, then the Dataset column (name, digest, context)
    name = re.escape(f"evaluation · demo · {MODEL} · fast")
    assert re.search(rf"{name} .*? demo \(\w{{8}}\) edit_cases", table)
    assert "runner : SequentialRunner" in page
    assert "Comparing 2 Runs" in compare
    assert "Run Name: ROME IKE" in compare
    assert "evaluation.counterfactual.direct.edit_succ" in compare
    assert "kebench.profile fast fast" in compare
