"""Shard partitions: empty before the first shard, one file per shard, never overwritten."""

from __future__ import annotations

import pandas as pd

from kebench.datasets import ShardPartitionsDataset


def shards(path) -> ShardPartitionsDataset:
    return ShardPartitionsDataset(
        path=str(path),
        dataset="kebench.datasets.AtomicParquetDataset",
        filename_suffix=".parquet",
    )


def test_nothing_stored_loads_as_empty_then_each_shard_is_a_file(tmp_path):
    dataset = shards(tmp_path / "scores")
    assert dataset.load() == {}
    dataset.save({"ROME/single/0000-ab": pd.DataFrame({"x": [1.0]})})
    dataset.save({"ROME/single/0001-cd": pd.DataFrame({"x": [2.0]})})
    files = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.parquet"))
    assert [str(f) for f in files] == [
        "scores/ROME/single/0000-ab.parquet",
        "scores/ROME/single/0001-cd.parquet",
    ]
    # an interrupted atomic write leaves a hidden temporary file: not a shard
    (tmp_path / "scores/ROME/single/.0002-ef.parquet.x.tmp").write_bytes(b"partial")
    loaded = shards(tmp_path / "scores").load()
    assert sorted(loaded) == ["ROME/single/0000-ab", "ROME/single/0001-cd"]
    assert loaded["ROME/single/0001-cd"]()["x"].tolist() == [2.0]
