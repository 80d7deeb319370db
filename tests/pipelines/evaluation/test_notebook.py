"""notebooks/headline.ipynb runs on a demo run's catalog through kedro.ipython."""

from __future__ import annotations

import json
import os
import shutil

import mlflow
import pytest
from IPython.core.interactiveshell import InteractiveShell

from kebench.project import PROJECT_ROOT
from tests.helpers import copy_project

NOTEBOOK = PROJECT_ROOT / "notebooks" / "headline.ipynb"


@pytest.mark.model
def test_headline_notebook_runs_on_the_catalog(evaluated_root, tmp_path):
    project = copy_project(tmp_path / "project")
    shutil.copytree(
        evaluated_root / "data",
        project / "data",
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns("06_models"),
    )
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    shell = InteractiveShell.instance()
    here = os.getcwd()
    os.chdir(project)
    try:
        for cell in cells:
            if cell["cell_type"] == "code":
                result = shell.run_cell("".join(cell["source"]), store_history=True)
                assert result.success, result.error_in_exec or result.error_before_exec
        headline = shell.user_ns["headline"]
        assert set(headline["method"]) == {"ROME", "IKE", "unedited"}
        figure = shell.user_ns["_"]  # the plot cell's value
        assert figure.axes and figure.axes[0].patches
        # the notebook's Kedro session only reads: it leaves no MLflow run open
        assert mlflow.active_run() is None
    finally:
        os.chdir(here)
