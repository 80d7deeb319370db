"""Run shards of work in this process or fan them out over a Dask cluster.

The editing, evaluation and stealthiness pipelines cut their cases into shards. A
shard task is a plain function ``task(lm, payload) -> result``; the engine runs each
shard's task and yields ``(key, result)`` as shards finish, so the caller saves every
shard as soon as it is done: a crash loses at most the shards in flight (one per
worker), and a rerun skips the shards already saved. A task may return an iterator: in
process the caller consumes it as it comes (the editing pipeline saves edit by edit);
from a Dask worker it comes back as a list once the shard is done.

Schedulers (parameter ``compute.scheduler``):
    ``sequential``       in this process, on the model already loaded;
    ``local-cluster:N``  a ``dask.distributed.LocalCluster`` of N worker processes;
    ``tcp://host:port``  a running Dask scheduler (``dask scheduler``; workers started
                         with ``dask worker tcp://host:port --resources "GPU=1"``).

On a Dask worker the model is loaded once from its registry entry and kept for the
worker's later shards. Workers must see the project's ``data/`` folder at the same
path (a shared filesystem): they read the converted model, the covariance cache and
the stored deltas from it. Results travel back to this process over Dask's own
connections, which carry pickles: run Dask only among machines you trust (Dask's TLS
settings secure the connections).

``compute.resources`` (e.g. ``{GPU: 1}``) is what each shard needs of a worker; Dask
runs it only on workers that advertise it, so GPU workers are selected by starting
them with ``--resources "GPU=1"``. A local cluster's workers advertise it too.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
from tqdm.auto import tqdm

from kebench.models.loading import LoadedModel, load_model
from kebench.models.registry import ModelSpec

logger = logging.getLogger(__name__)

T = TypeVar("T")
ShardTask = Callable[[LoadedModel, Any], T]

SEQUENTIAL = "sequential"
LOCAL_CLUSTER = "local-cluster:"


@dataclass(frozen=True)
class ComputeSettings:
    """Where shards run (see the module docstring) and how many cases each holds."""

    scheduler: str = SEQUENTIAL
    shard_size: int = 8
    resources: Mapping[str, float] | None = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ComputeSettings:
        """From the ``compute`` parameters, checked."""
        scheduler = str(params.get("scheduler", SEQUENTIAL))
        shard_size = int(params.get("shard_size", 8))
        if shard_size < 1:
            raise ValueError(f"compute.shard_size must be at least 1, not {shard_size}")
        if not (
            scheduler == SEQUENTIAL
            or scheduler.startswith(("tcp://", "tls://"))
            or _local_workers(scheduler) is not None
        ):
            raise ValueError(
                f"compute.scheduler {scheduler!r}: use 'sequential', 'local-cluster:N' "
                "or a Dask scheduler address such as tcp://host:8786"
            )
        resources = dict(params.get("resources") or {}) or None
        return cls(scheduler, shard_size, resources)


def _local_workers(scheduler: str) -> int | None:
    if not scheduler.startswith(LOCAL_CLUSTER):
        return None
    count = scheduler.removeprefix(LOCAL_CLUSTER)
    return int(count) if count.isdigit() and int(count) > 0 else None


def chunks(items: list[T], size: int) -> list[list[T]]:
    """``items`` cut into consecutive lists of at most ``size``."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def pending_shards(
    plan: pd.DataFrame, stored: Mapping[str, Any]
) -> Iterator[tuple[str, pd.DataFrame, pd.DataFrame]]:
    """``(key, its rows, the rows of its method and mode)`` of each shard of ``plan``
    (a ``shard`` column) that is not in ``stored``, in key order."""
    for _, method_plan in plan.groupby(["method", "mode"], sort=True):
        for key, rows in method_plan.groupby("shard", sort=True):
            if key not in stored:
                yield key, rows, method_plan


def collect_shards(
    shards: Mapping[str, Callable[[], T]], plan: pd.DataFrame
) -> list[T]:
    """The stored result of every shard of ``plan``, in key order."""
    keys = sorted(set(plan["shard"]))
    missing = [key for key in keys if key not in shards]
    if missing:
        raise ValueError(
            f"planned shards not stored: {missing[:5]}; run the pipeline again"
        )
    return [shards[key]() for key in keys]


# The model of each Dask worker process, loaded by its first shard.
_WORKER_MODELS: dict[tuple[str, str], LoadedModel] = {}


def worker_model(spec: ModelSpec, folder: Path) -> LoadedModel:
    """The model of ``spec`` in this worker process, loaded once."""
    key = (spec.name, str(folder))
    if key not in _WORKER_MODELS:
        _WORKER_MODELS[key] = load_model(spec, folder)
    return _WORKER_MODELS[key]


def _run_on_worker(task: ShardTask, spec: ModelSpec, folder: Path, payload: Any) -> Any:
    result = task(worker_model(spec, folder), payload)
    # an iterator (an edit shard's outcomes) travels back whole
    return list(result) if isinstance(result, Iterator) else result


def dask_client(settings: ComputeSettings, stack: ExitStack):
    """A client of the configured cluster, closed (with a local cluster) by ``stack``."""
    # imported here: a sequential run needs no Dask
    from dask.distributed import Client, LocalCluster  # noqa: PLC0415

    workers = _local_workers(settings.scheduler)
    if workers is None:
        return stack.enter_context(Client(settings.scheduler))
    # Dask's nanny sets OMP_NUM_THREADS=1 (and more: distributed.nanny.pre-spawn-environ)
    # in *this* process before spawning a worker and leaves it set, so any subprocess
    # started later would run torch on one thread and sum in another order (a resumed
    # `kedro run` gave other ROME deltas). Put the environment back once the workers are
    # up, and again after the cluster closes (a restarted worker sets it anew).
    environ = dict(os.environ)
    stack.callback(_restore_environ, environ)
    cluster = stack.enter_context(
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            resources=dict(settings.resources or {}),
            dashboard_address=None,
        )
    )
    _restore_environ(environ)
    return stack.enter_context(Client(cluster))


def _restore_environ(environ: Mapping[str, str]) -> None:
    # key by key, not clear() then update(): the cluster's threads may read it meanwhile
    for key in set(os.environ) - set(environ):
        del os.environ[key]
    os.environ.update(environ)


def run_shards(
    lm: LoadedModel,
    task: ShardTask,
    payloads: Mapping[str, Any],
    settings: ComputeSettings,
    description: str,
) -> Iterator[tuple[str, Any]]:
    """``(key, task(model, payload))`` for every shard, as shards finish."""
    progress = tqdm(total=len(payloads), desc=description, unit="shard")
    with ExitStack() as stack:
        stack.callback(progress.close)
        if settings.scheduler == SEQUENTIAL or not payloads:
            for key, payload in payloads.items():
                yield key, task(lm, payload)
                progress.update()
            return
        if lm.spec is None:
            raise ValueError(
                f"model {lm.name!r} has no registry entry to load on workers"
            )
        # imported here: a sequential run needs no Dask
        from dask.distributed import as_completed  # noqa: PLC0415

        client = dask_client(settings, stack)
        logger.info(
            "%s: %d shards on the Dask cluster %s", description, len(payloads), client
        )
        futures = {
            client.submit(
                _run_on_worker,
                task,
                lm.spec,
                lm.folder,
                payload,
                resources=settings.resources,
                pure=False,
            ): key
            for key, payload in payloads.items()
        }
        for future in as_completed(futures):
            yield futures[future], future.result()
            progress.update()
