"""Run kebench pipelines in-process from the project's own configuration.

Benchmarks and tests use this to run a pipeline on other data or another endpoint,
with every file output moved under a scratch folder, and no MLflow run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kedro.config import OmegaConfigLoader
from kedro.framework.project import pipelines
from kedro.framework.startup import bootstrap_project
from kedro.io import DataCatalog
from kedro.runner import SequentialRunner

from kebench.models.loading import LoadedModel, load_model
from kebench.models.registry import resolve_model
from kebench.settings import CONFIG_LOADER_ARGS

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def load_config(
    runtime_params: dict[str, Any], project_root: Path = PROJECT_ROOT
) -> OmegaConfigLoader:
    """The project's configuration as Kedro resolves it, with these runtime params."""
    return OmegaConfigLoader(
        conf_source=str(project_root / "conf"),
        runtime_params=runtime_params,
        **CONFIG_LOADER_ARGS,
    )


def project_model(name: str, config: OmegaConfigLoader) -> LoadedModel:
    """The model ``name`` (a registry name, a hub id or a folder), as a pipeline run
    loads it: a shipped GGUF is converted once under data/06_models/<model key>."""
    entry = config["catalog"]["model"]
    spec = resolve_model(name, entry["registry"], entry.get("defaults"))
    return load_model(spec, PROJECT_ROOT / "data" / "06_models" / spec.name)


def _relocate(
    entry: dict[str, Any], project_root: Path, output_root: Path
) -> dict[str, Any]:
    # a PartitionedDataset's folder is "path" (hparams_files' "path" is conf, left as is)
    partitioned = str(entry.get("path", "")).startswith("data/")
    key = "path" if partitioned else "filepath"
    filepath = entry.get(key)
    # outputs (data/02_intermediate onwards) move; raw data and conf files are read
    # where the project keeps them
    if (
        isinstance(filepath, str)
        and filepath.startswith("data/")
        and not filepath.startswith("data/01_raw")
    ):
        entry = {**entry, key: str(output_root / filepath)}
    elif isinstance(filepath, str) and not Path(filepath).is_absolute():
        entry = {**entry, key: str(project_root / filepath)}
    return entry


def _untracked(entry: dict[str, Any]) -> dict[str, Any]:
    """The entry without MLflow tracking: an MLflow artifact keeps only its file, and
    MLflow metrics stay in memory (their fluent logging would start a run)."""
    kind = str(entry.get("type", ""))
    if kind.startswith("kedro_mlflow.io.artifacts."):
        return dict(entry["dataset"])
    if kind.startswith("kedro_mlflow.io.metrics."):
        return {"type": "MemoryDataset"}
    return entry


def project_catalog(
    runtime_params: dict[str, Any], output_root: Path, project_root: Path = PROJECT_ROOT
) -> DataCatalog:
    """The project's catalog with every non-raw file moved under ``output_root``.

    Raw inputs keep their paths, resolved against ``project_root``; parameters are
    added as ``params:<name>`` entries, as a Kedro session would. MLflow datasets
    lose their tracking, so that no run is started behind the caller's back.
    """
    config = load_config(runtime_params, project_root)
    entries = {
        name: _relocate(_untracked(dict(entry)), project_root, Path(output_root))
        for name, entry in config["catalog"].items()
    }
    for entry in entries.values():
        if "sources" in entry:
            entry["sources"] = _resolve_source_paths(entry["sources"], project_root)
    catalog = DataCatalog.from_config(entries, credentials=config["credentials"])
    _add_params(catalog, config["parameters"], "params:")
    return catalog


def _add_params(catalog: DataCatalog, params: dict[str, Any], prefix: str) -> None:
    """``params:a`` and ``params:a.b`` entries for nested parameters, as Kedro adds them."""
    for name, value in params.items():
        catalog[f"{prefix}{name}"] = value
        if isinstance(value, dict):
            _add_params(catalog, value, f"{prefix}{name}.")


def _resolve_source_paths(
    sources: dict[str, Any], project_root: Path
) -> dict[str, Any]:
    """Make relative KG and edit-case paths of every source absolute."""

    def absolute(path: str) -> str:
        return str(path if Path(path).is_absolute() else project_root / path)

    resolved = {}
    for name, spec in sources.items():
        filepath = spec["edit_cases"]["filepath"]
        edit_cases = {
            **spec["edit_cases"],
            "filepath": absolute(filepath)
            if isinstance(filepath, str)
            else [absolute(f) for f in filepath],
        }
        kg = dict(spec["kg"])
        if "files" in kg:
            kg["files"] = [absolute(f) for f in kg["files"]]
        resolved[name] = {**spec, "edit_cases": edit_cases, "kg": kg}
    return resolved


def run_pipeline(
    name: str,
    runtime_params: dict[str, Any],
    output_root: Path,
    project_root: Path = PROJECT_ROOT,
) -> DataCatalog:
    """Run one registered pipeline and return its catalog, whose outputs can be loaded."""
    catalog = project_catalog(runtime_params, output_root, project_root)
    run_in_catalog(name, catalog, project_root)
    return catalog


def run_in_catalog(
    name: str, catalog: DataCatalog, project_root: Path = PROJECT_ROOT
) -> None:
    """Run one registered pipeline of this project in ``catalog``.

    The project is bootstrapped again first: a Kedro session elsewhere in the process
    (another project, or a run of named pipelines only) changes the registry.
    """
    bootstrap_project(project_root)
    SequentialRunner().run(pipelines[name], catalog)
