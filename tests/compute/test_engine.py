"""The shard engine's settings, plans and bookkeeping (the Dask runs are in
tests/pipelines/evaluation/test_dask.py, on the real model)."""

from __future__ import annotations

import os

import pandas as pd
import pytest

from kebench.compute.engine import (
    ComputeSettings,
    chunks,
    collect_shards,
    pending_shards,
    run_shards,
)
from kebench.scoring.evaluate import case_digests, plan_shards


def test_settings_accept_the_three_schedulers_and_refuse_others():
    for scheduler in ("sequential", "local-cluster:2", "tcp://10.0.0.5:8786"):
        assert ComputeSettings.from_params({"scheduler": scheduler}).scheduler == (
            scheduler
        )
    gpu = ComputeSettings.from_params({"resources": {"GPU": 1}, "shard_size": 3})
    assert gpu.resources == {"GPU": 1} and gpu.shard_size == 3
    assert ComputeSettings.from_params({"resources": {}}).resources is None
    for scheduler in ("local-cluster:0", "local-cluster:two", "dask", "http://x:1"):
        with pytest.raises(ValueError, match="compute.scheduler"):
            ComputeSettings.from_params({"scheduler": scheduler})
    with pytest.raises(ValueError, match="shard_size must be at least 1"):
        ComputeSettings.from_params({"shard_size": 0})


def test_chunks_keep_order():
    assert chunks([1, 2, 3, 4, 5], 2) == [[1, 2], [3, 4], [5]]
    assert chunks([], 3) == []


def manifest(method: str, mode: str, n: int, batch: int = 1) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "method": method,
            "mode": mode,
            "case_id": [f"{method}-{i}" for i in range(n)],
            "order": range(n),
            "delta_file": [f"{method}/{mode}/d{i // batch}" for i in range(n)],
            "fingerprint": [f"fp-{method}-{i}" for i in range(n)],
            "status": "ok",
        }
    )


def test_plans_cut_whole_delta_groups_and_key_by_content():
    edits = pd.concat(
        [
            manifest("ROME", "single", 5),
            manifest("MEMIT", "batch", 6, batch=3),
            manifest("FT-L", "sequential", 3),
        ]
    )
    plan = plan_shards(edits, 2, {"batch_size": 16})
    sizes = plan.groupby(["method", "shard"]).size()
    assert list(sizes["ROME"]) == [2, 2, 1]
    assert list(sizes["MEMIT"]) == [3, 3]  # a batch is never split
    assert list(sizes["FT-L"]) == [2, 1]
    # one measure of the sequential run's final state for all its cases (drift)
    whole = plan_shards(edits, 2, {"batch_size": 16}, split_sequential=False)
    assert list(whole.groupby(["method", "shard"]).size()["FT-L"]) == [3]
    assert whole[whole["method"] != "FT-L"].equals(plan[plan["method"] != "FT-L"])
    prefixes = plan["method"] + "/" + plan["mode"] + "/"
    assert all(map(str.startswith, plan["shard"], prefixes))
    # the same edits scored the same way give the same keys; anything else, new ones
    assert plan_shards(edits, 2, {"batch_size": 16}).equals(plan)
    other = plan_shards(edits, 2, {"batch_size": 8})
    assert not set(other["shard"]) & set(plan["shard"])
    changed = edits.assign(
        fingerprint=edits["fingerprint"].where(edits["case_id"] != "ROME-0", "new")
    )
    rekeyed = set(plan_shards(changed, 2, {"batch_size": 16})["shard"])
    assert len(set(plan["shard"]) - rekeyed) == 1
    # a sequential shard applies every delta of the run: changing one re-keys all
    seq = changed.assign(
        fingerprint=changed["fingerprint"].where(changed["case_id"] != "FT-L-2", "x")
    )
    assert not {k for k in plan["shard"] if k.startswith("FT-L")} & set(
        plan_shards(seq, 2, {"batch_size": 16})["shard"]
    )
    # new probes for one case (its content digest) re-key only that case's shard
    content = {case: "v1" for case in edits["case_id"]}
    before = set(plan_shards(edits, 2, content=content)["shard"])
    after = set(plan_shards(edits, 2, content=content | {"ROME-3": "v2"})["shard"])
    assert len(before - after) == 1 and len(after - before) == 1
    assert plan_shards(edits.iloc[:0], 2)["shard"].empty


def test_case_digests_change_with_any_probe_field():
    probes = pd.DataFrame(
        {
            "case_id": ["a", "a", "b"],
            "probe_id": ["a-d", "a-e", "b-d"],
            "probe_type": ["direct", "entailed", "direct"],
            "prompt": ["A is in", "A's capital is", "B is in"],
            "answer_new": ["X", "Y", "Z"],
            "answer_old": ["W", None, "V"],
        }
    )
    digests = case_digests(probes)
    assert set(digests) == {"a", "b"} and digests == case_digests(probes)
    changed = case_digests(probes.assign(answer_new=["X", "Q", "Z"]))
    assert changed["a"] != digests["a"] and changed["b"] == digests["b"]


def test_only_missing_shards_run_and_every_planned_one_is_collected():
    plan = plan_shards(manifest("ROME", "single", 5), 2)
    keys = sorted(set(plan["shard"]))
    stored = {keys[0]: lambda: "first"}
    pending = list(pending_shards(plan, stored))
    assert [key for key, _, _ in pending] == keys[1:]
    key, rows, method_plan = pending[0]
    assert set(rows["shard"]) == {key} and len(method_plan) == 5

    def double(lm, payload):  # a sequential run hands the task the driver's model
        return (lm, payload * 2)

    done = dict(
        run_shards("model", double, {k: 1 for k in keys[1:]}, ComputeSettings(), "t")
    )
    assert done == {k: ("model", 2) for k in keys[1:]}
    stored |= {k: (lambda v=v: v) for k, v in done.items()}
    assert collect_shards(stored, plan) == ["first", ("model", 2), ("model", 2)]
    with pytest.raises(ValueError, match="planned shards not stored"):
        collect_shards({keys[0]: lambda: 0}, plan)


def worker_identity(lm, payload: int) -> tuple[str, int, int]:
    """A shard task: which model and which process ran it (a module-level function,
    so that Dask workers can import it)."""
    return lm.name, os.getpid(), payload


@pytest.mark.model
def test_a_local_cluster_runs_gpu_shards_on_workers_that_load_the_model(lm):
    """Shards asking for the resource GPU=1 run on the workers of a local cluster,
    which advertise it; each worker loads the model from its registry entry."""
    settings = ComputeSettings("local-cluster:2", 1, {"GPU": 1})
    payloads = {f"shard-{i}": i for i in range(4)}
    environ = dict(os.environ)
    done = dict(run_shards(lm, worker_identity, payloads, settings, "identity"))
    # Dask's nanny sets OMP_NUM_THREADS=1 here to spawn workers; it is put back
    assert dict(os.environ) == environ
    assert sorted(done) == sorted(payloads)
    assert all(name == lm.name for name, _, _ in done.values())
    assert {payload for _, _, payload in done.values()} == set(range(4))
    assert os.getpid() not in {pid for _, pid, _ in done.values()}
