"""kedro-viz serves every registered pipeline with its data layers, each pipeline as a
modular pipeline of its own, in a real browser."""

from __future__ import annotations

import os
import re
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


# the pipelines of a plain `kedro run`, in data-flow order (lifelong is outside it)
DEFAULT_RUN = (
    "kg_build",
    "rule_mining",
    "qa_generation",
    "risk_unification",
    "editing",
    "evaluation",
    "stealthiness",
    "mitigation",
)


@pytest.mark.server
def test_api_lists_every_pipeline_and_node(viz_server):
    _, data = viz_server
    bootstrap_project(PROJECT_ROOT)
    registered = {name for name in pipelines if name != "__default__"}
    assert registered <= {p["id"] for p in data["pipelines"]}
    shown = {node["full_name"] for node in data["nodes"] if node["type"] == "task"}
    # /api/main holds the default run's nodes; a pipeline outside it (lifelong) is
    # listed above and shown when selected
    for name in registered - set(NOT_IN_DEFAULT):
        assert {node.name for node in pipelines[name].nodes} <= shown, name
    assert {"raw", "intermediate", "primary", "reporting"} <= set(data["layers"])


@pytest.mark.server
def test_api_shows_each_pipeline_as_a_modular_pipeline(viz_server):
    """The lineage's top level is one modular pipeline per pipeline (and the datasets
    between them); each holds its own nodes, named ``<pipeline>.<node>``."""
    _, data = viz_server
    modular = data["modular_pipelines"]
    assert set(modular) == {"__root__", *DEFAULT_RUN}
    top = {c["id"] for c in modular["__root__"]["children"]}
    assert set(DEFAULT_RUN) <= top
    tasks = {n["id"]: n for n in data["nodes"] if n["type"] == "task"}
    # no node is left outside a pipeline's box
    assert not top & set(tasks)
    inside = {
        name: {
            tasks[c["id"]]["full_name"]
            for c in modular[name]["children"]
            if c["type"] == "task"
        }
        for name in DEFAULT_RUN
    }
    assert "kg_build.parse_edit_requests" in inside["kg_build"]
    assert "rule_mining.mine_kg_rules" in inside["rule_mining"]
    # evaluation runs editing's nodes, which stay in editing's box
    assert "editing.compute_edit_deltas" in inside["editing"]
    assert not any(n.startswith("editing.") for n in inside["evaluation"])
    for name, nodes in inside.items():
        assert all(n.startswith(f"{name}.") for n in nodes), name


@pytest.mark.server
@pytest.mark.skipif(
    CHROMIUM is None, reason="Debian chromium is not installed (.ci/run installs it)"
)
def test_headless_chromium_renders_the_lineage_as_one_box_per_pipeline(
    viz_server, tmp_path
):
    url, _ = viz_server
    shot = tmp_path / "viz.png"
    headless_chromium(url, tmp_path / "profile", f"--screenshot={shot}")
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    # the drawn graph: the pipelines collapsed, each a box; no node drawn alone
    graph = headless_chromium(url, tmp_path / "profile-dom", "--dump-dom")
    boxes = re.findall(r'data-id="([^"]+)" data-node-type="modularPipeline"', graph)
    assert sorted(boxes) == sorted(DEFAULT_RUN)
    assert 'data-node-type="task"' not in graph
    assert 'data-node-type="data"' in graph  # the datasets between the pipelines
