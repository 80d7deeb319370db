"""kedro-viz serves every registered pipeline with its data layers, in a real browser."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from kedro.framework.project import pipelines
from kedro.framework.startup import bootstrap_project

from kebench.kg.oxigraph_server import stop_process_group
from kebench.pipelines import NOT_IN_DEFAULT
from kebench.project import PROJECT_ROOT
from tests.helpers import CHROMIUM, free_port, headless_chromium, start_server


def start_viz(log_path: Path) -> tuple[subprocess.Popen, str]:
    """`kedro viz run` on a free port, in its own process group, logging to a file."""
    port = free_port()
    env = {**os.environ, "KEDRO_DISABLE_TELEMETRY": "1"}
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                str(Path(os.sys.executable).with_name("kedro")),
                "viz",
                "run",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-browser",
            ],
            cwd=PROJECT_ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return process, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def viz_server(tmp_path_factory: pytest.TempPathFactory):
    """A kedro-viz server, stopped with its whole process group afterwards."""
    log_path = tmp_path_factory.mktemp("viz") / "viz.log"
    process, url, data = start_server(
        lambda: start_viz(log_path), "/api/main", log_path
    )
    try:
        yield url, data
    finally:
        stop_process_group(process, timeout_s=15)


@pytest.mark.server
def test_api_lists_every_pipeline_and_node(viz_server):
    _, data = viz_server
    bootstrap_project(PROJECT_ROOT)
    registered = {name for name in pipelines if name != "__default__"}
    assert registered <= {p["id"] for p in data["pipelines"]}
    shown = {node["name"] for node in data["nodes"] if node["type"] == "task"}
    # /api/main holds the default run's nodes; a pipeline outside it (lifelong) is
    # listed above and shown when selected
    for name in registered - set(NOT_IN_DEFAULT):
        assert {node.name for node in pipelines[name].nodes} <= shown, name
    assert {"raw", "intermediate", "primary", "reporting"} <= set(data["layers"])


@pytest.mark.server
@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)"
)
def test_headless_chromium_renders_the_lineage(viz_server, tmp_path):
    url, _ = viz_server
    shot = tmp_path / "viz.png"
    headless_chromium(url, tmp_path / "profile", f"--screenshot={shot}")
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
