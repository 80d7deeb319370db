"""Project hooks."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from typing import Any

from kedro.framework.hooks import hook_impl
from kedro.io import DataCatalog
from kedro.pipeline import Pipeline

import kebench.pipelines
from kebench.pipelines import NOT_IN_DEFAULT


def all_pipelines() -> dict[str, Pipeline]:
    """Every pipeline of the project. Kedro's own registry holds only the pipelines
    named on the command line during a run, so they are created here directly."""
    package = kebench.pipelines
    return {
        module.name: importlib.import_module(
            f"{package.__name__}.{module.name}"
        ).create_pipeline()
        for module in pkgutil.iter_modules(package.__path__)
    }


class MissingInputsError(RuntimeError):
    """A pipeline was run before the pipelines that produce its inputs."""


def missing_upstream(
    pipeline: Pipeline, catalog: DataCatalog, registry: dict[str, Pipeline]
) -> tuple[dict[str, list[str]], list[str]]:
    """Inputs of ``pipeline`` that other pipelines make and that do not exist yet, and
    every pipeline to run first (transitively), in data-flow order."""
    producers: dict[str, list[str]] = {}
    for name, registered in registry.items():
        for output in registered.all_outputs():
            producers.setdefault(output, []).append(name)

    def absent(p: Pipeline) -> dict[str, list[str]]:
        return {
            d: producers[d]
            for d in sorted(p.inputs())
            if d in producers and not catalog.exists(d)
        }

    missing = absent(pipeline)
    needed: list[str] = []
    frontier = sorted({name for names in missing.values() for name in names})
    while frontier:
        name = frontier.pop()
        if name in needed:
            continue
        needed.append(name)
        frontier += [p for names in absent(registry[name]).values() for p in names]
    ordered, remaining = [], set(needed)
    while remaining:  # producers before consumers
        ready = sorted(
            n
            for n in remaining
            if not any(
                registry[m].all_outputs() & registry[n].inputs()
                for m in remaining - {n}
            )
        ) or sorted(remaining)
        ordered += ready
        remaining -= set(ready)
    return missing, ordered


class UpstreamOutputsHook:
    """Before a run, check that inputs made by other pipelines exist, and say which
    pipelines to run first when they do not (e.g. evaluation on a fresh clone)."""

    @hook_impl
    def before_pipeline_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: DataCatalog
    ) -> None:
        # a pipeline outside the default run (lifelong) is never the one to run first
        producers = {
            name: registered
            for name, registered in all_pipelines().items()
            if name not in NOT_IN_DEFAULT
        }
        missing, needed = missing_upstream(pipeline, catalog, producers)
        if missing:
            details = "; ".join(
                f"{d} (from {', '.join(p)})" for d, p in missing.items()
            )
            extra = run_params.get("runtime_params") or {}
            params = ",".join(f"{k}={v}" for k, v in extra.items())
            suffix = f" --params={params}" if params else ""
            raise MissingInputsError(
                f"these inputs have not been produced yet: {details}. Run first: "
                f"kedro run --pipelines={','.join(needed)}{suffix}"
            )


# what a person opens after a run: the reports and the plots
REPORT_SUFFIXES = (".md", ".png")


def _filepath(catalog: DataCatalog, name: str) -> str | None:
    """Where a catalog entry writes, when it is a file."""
    if name not in catalog:
        return None
    filepath = catalog.get(name)._describe().get("filepath")
    return str(filepath) if filepath is not None else None


class RunSummaryHook:
    """After a run that made the headline table, print it and the paths of the run's
    reports and plots (the last thing `make run` shows)."""

    @hook_impl
    def after_pipeline_run(self, pipeline: Pipeline, catalog: DataCatalog) -> None:
        outputs = pipeline.all_outputs()
        if "headline_table" not in outputs or not catalog.exists("headline_table"):
            return
        # imported here: settings load this module for every kedro command
        from kebench.scoring.report import run_summary  # noqa: PLC0415

        paths = sorted(
            path
            for name in outputs
            if (path := _filepath(catalog, name)) and path.endswith(REPORT_SUFFIXES)
        )
        sys.stdout.write(run_summary(catalog.load("headline_table"), paths))
