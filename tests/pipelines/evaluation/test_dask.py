"""The demo's editing and evaluation on a 2-worker Dask LocalCluster score exactly as
the sequential run does; shards are partitions, and a rerun resumes."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from kebench.project import project_catalog, run_pipeline
from tests.pipelines.conftest import DEMO_EDITS

ON_DASK = DEMO_EDITS | {"scheduler": "local-cluster:2", "shard_size": 1}
KEYS = ["method", "probe_id"]


@pytest.fixture(scope="module")
def on_dask(evaluated_root, tmp_path_factory):
    """The shared sequential run's inputs, edited and evaluated again on Dask."""
    root = tmp_path_factory.mktemp("dask_demo")
    shutil.copytree(
        evaluated_root / "data",
        root / "data",
        ignore=shutil.ignore_patterns("06_models", "07_model_output", "08_reporting"),
    )
    (root / "data" / "06_models").symlink_to(evaluated_root / "data" / "06_models")
    run_pipeline("editing", ON_DASK, root)
    run_pipeline("evaluation", ON_DASK, root)
    return root


def sorted_frame(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(KEYS).reset_index(drop=True)


@pytest.mark.model
def test_dask_scores_equal_the_sequential_ones(on_dask, evaluated_root):
    sequential = project_catalog(DEMO_EDITS, evaluated_root)
    on_dask = project_catalog(ON_DASK, on_dask)
    manifest = on_dask.load("edit_manifest")
    expected_manifest = sequential.load("edit_manifest")
    assert (manifest["status"] == "ok").all()
    # the same edits, in the same run order, with the same fingerprints
    columns = ["method", "case_id", "order", "fingerprint"]
    pd.testing.assert_frame_equal(manifest[columns], expected_manifest[columns])
    scores = sorted_frame(on_dask.load("probe_scores"))
    expected = sorted_frame(sequential.load("probe_scores"))
    numeric = scores.select_dtypes("number").columns
    pd.testing.assert_frame_equal(
        scores.drop(columns=numeric), expected.drop(columns=numeric)
    )
    # Dask's workers run torch on one thread each: sums differ in the last bits
    np.testing.assert_allclose(
        scores[numeric].to_numpy(float), expected[numeric].to_numpy(float), atol=1e-4
    )
    metrics = on_dask.load("metrics")
    expected_metrics = sequential.load("metrics")
    pd.testing.assert_frame_equal(
        metrics.drop(columns=["value", "ci_low", "ci_high"]),
        expected_metrics.drop(columns=["value", "ci_low", "ci_high"]),
    )
    np.testing.assert_allclose(
        metrics["value"].to_numpy(float),
        expected_metrics["value"].to_numpy(float),
        atol=1e-4,
    )


@pytest.mark.model
def test_each_shard_is_a_partition_and_a_rerun_redoes_only_the_lost_one(on_dask):
    catalog = project_catalog(ON_DASK, on_dask)
    folder = catalog.load("edit_deltas_stored").root.parent / "probe_score_shards"
    files = sorted(folder.rglob("*.parquet"))
    # shard_size 1: one shard per edit, three edits per method
    assert len(files) == 6
    assert {f.parent.parent.name for f in files} == {"ROME", "IKE"}
    lost, *kept = files
    stamps = {f: f.stat().st_mtime_ns for f in kept}
    lost.unlink()  # a crash before this shard was saved
    before = catalog.load("probe_scores")
    # the shards' keys do not depend on where they ran: this run redoes the lost one
    run_pipeline("evaluation", ON_DASK | {"scheduler": "sequential"}, on_dask)
    assert lost.is_file()
    assert all(f.stat().st_mtime_ns == stamp for f, stamp in stamps.items())
    pd.testing.assert_frame_equal(
        sorted_frame(catalog.load("probe_scores")),
        sorted_frame(before),
        check_exact=False,
        atol=1e-4,
    )
