"""Project hooks."""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import pkgutil
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from kedro.framework.hooks import hook_impl
from kedro.io import DataCatalog, DatasetError
from kedro.pipeline import Node, Pipeline
from kedro.runner import SequentialRunner
from pandera.errors import SchemaError, SchemaErrors

import kebench
import kebench.pipelines
from kebench.pipelines import NOT_IN_DEFAULT

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput

logger = logging.getLogger(__name__)
# conf/logging.yml sends this logger to the log file only: the traceback of an error
# that prints as a paragraph
traceback_log = logging.getLogger("kebench.tracebacks")
LOG_FILE = "logs/kebench.log"


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
    """Before a run, make what it reads from other pipelines and what is not stored
    yet: those pipelines run first, on the run's own catalog and parameters. So
    `kedro run --pipelines=evaluation --params dataset=<source>` builds the source's KG,
    mines its rules and writes its probes when they are missing, and skips them when
    they are stored. Each pipeline resumes from what it stored (edits, score shards)."""

    def __init__(
        self, registry: Callable[[], dict[str, Pipeline]] = all_pipelines
    ) -> None:
        self._registry = registry

    @hook_impl
    def before_pipeline_run(self, pipeline: Pipeline, catalog: DataCatalog) -> None:
        # a pipeline outside the default run (lifelong) is never the one to run first
        producers = {
            name: registered
            for name, registered in self._registry().items()
            if name not in NOT_IN_DEFAULT
        }
        missing, needed = missing_upstream(pipeline, catalog, producers)
        if not missing:
            return
        logger.info(
            "not stored yet: %s; running %s first",
            ", ".join(missing),
            " then ".join(needed),
        )
        # one pipeline of them all: a node two of them share (editing's, inside
        # evaluation) runs once
        upstream = sum((producers[name] for name in needed), Pipeline([]))
        # the run's own hooks (MLflow's run, this hook) stay with the requested pipeline
        try:
            SequentialRunner().run(upstream, catalog)
        except Exception as error:
            # Kedro calls on_pipeline_error only for the requested pipeline's nodes
            raise user_error(error, f"running {' then '.join(needed)} first") or error


class RunError(click.ClickException):
    """An error the user can act on, printed as its paragraph alone (Kedro's command
    line shows a click exception's message, with no traceback panel)."""

    def show(self, file=None) -> None:
        click.secho(self.format_message(), err=True, fg="red")


# Errors that come from the run's input: a dataset that cannot load, a missing file, a
# table that breaks its schema. Besides these, the errors kebench raises for the user
# are of its own classes (EditCaseError, HparamsError, ModelError, ...) or ValueErrors
# it raises itself with a message naming the input. Any other error (a TypeError, a
# KeyError, anything raised inside a library) is a bug and keeps its traceback.
INPUT_ERRORS = (DatasetError, FileNotFoundError, SchemaError, SchemaErrors)


def is_user_error(error: BaseException) -> bool:
    """Whether ``error`` is one the user can act on (``INPUT_ERRORS`` above)."""
    if isinstance(error, INPUT_ERRORS):
        return True
    if type(error).__module__.startswith(f"{kebench.__name__}."):
        return True
    frames = traceback.extract_tb(error.__traceback__)
    raised_here = bool(frames) and Path(frames[-1].filename).is_relative_to(
        Path(kebench.__file__).parent
    )
    return raised_here and type(error) is ValueError


def user_error(error: BaseException, where: str) -> RunError | None:
    """``error`` as one paragraph naming ``where`` it happened, when the user can act
    on it (its traceback goes to the log file); None for any other error."""
    if not is_user_error(error):
        return None
    Path(LOG_FILE).parent.mkdir(exist_ok=True)
    traceback_log.error("%s failed", where, exc_info=error)
    return RunError(
        f"kedro run stopped while {where}: {error}\n(The traceback is in {LOG_FILE}.)"
    )


class UserErrorHook:
    """A run stopped by an error the user can act on prints one paragraph: what ran,
    the error's message, where the traceback is. Other errors keep Kedro's panel."""

    def __init__(self) -> None:
        self._current_node: str | None = None

    @hook_impl
    def after_context_created(self) -> None:
        """Errors before any node runs (a model folder that does not exist, met when
        the catalog is made) reach Python's excepthook, which Kedro's rich handler
        prints as a panel: the paragraph goes first there too."""
        if getattr(sys.excepthook, "prints_user_errors", False):
            return
        previous = sys.excepthook

        def excepthook(kind, error, trace) -> None:
            paragraph = user_error(error, "preparing the run")
            if paragraph is None:
                previous(kind, error, trace)
            else:
                paragraph.show()

        excepthook.prints_user_errors = True
        sys.excepthook = excepthook

    # the node started last: a generator node fails after Kedro's on_node_error
    # window (while its outputs are saved), and the runners here run one at a time
    @hook_impl
    def before_node_run(self, node: Node) -> None:
        self._current_node = node.name

    # last: kedro-mlflow's own hook ends its run as failed first
    @hook_impl(trylast=True)
    def on_pipeline_error(self, error: Exception) -> None:
        where = (
            f"running node {self._current_node}" if self._current_node else "running"
        )
        paragraph = user_error(error, where)
        if paragraph is not None:
            raise paragraph from error


# MLflow's experiment kind for model training: the UI opens the experiment on its runs
# table, not on the GenAI overview
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
TAG_PREFIX = "kebench."
# the catalog entries of the model under test and of the run's edit cases
MODEL_DATASET = "model"
EDIT_CASES_DATASET = "raw_edit_cases"


def run_tags(
    what: dict[str, str], methods: str, pipelines: list[str] | None, used_model: bool
) -> dict[str, str]:
    """The tags a run is filtered and grouped by: dataset and the pipelines it ran,
    and where it ran a model, the model, profile and methods."""
    tags = {
        f"{TAG_PREFIX}dataset": str(what["dataset"]),
        f"{TAG_PREFIX}pipelines": pipelines_label(pipelines),
    }
    if used_model:
        tags |= {
            f"{TAG_PREFIX}model": str(what["model"]),
            f"{TAG_PREFIX}profile": str(what["hparams_profile"]),
            f"{TAG_PREFIX}methods": str(methods),
        }
    return tags


def pipelines_label(pipelines: list[str] | None) -> str:
    """The pipelines a run named, sorted (Kedro passes ``--pipelines`` as a set)."""
    return "+".join(sorted(pipelines or ["__default__"]))


def mlflow_run_name(
    what: dict[str, str], pipelines: list[str] | None, used_model: bool
) -> str:
    """What a run did: its pipelines and dataset, and the model and profile where it
    ran a model (``evaluation · demo · smollm2-135m · fast``; ``kg_build · demo``)."""
    # imported here: settings load this module for every kedro command
    from kebench.scoring.report import run_name  # noqa: PLC0415

    measured = run_name(what) if used_model else str(what["dataset"])
    return f"{pipelines_label(pipelines)} · {measured}"


# a URL's user:password@ part: credentials belong in conf/local or the environment
URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")


def redact_credentials(text: str) -> str:
    """``text`` with every URL's user and password replaced by ``***``."""
    return URL_CREDENTIALS.sub(r"\g<scheme>***@", text)


def redacted_run_params(run_params: dict[str, Any]) -> dict[str, str]:
    """The tags kedro-mlflow set from ``run_params`` (every one with a value, as
    ``str``) that held a URL's credentials, with them redacted: a user who puts
    them in ``--params endpoint=`` must not find them in MLflow."""
    redacted = {
        key: redact_credentials(str(value))
        for key, value in run_params.items()
        if value
    }
    return {key: text for key, text in redacted.items() if text != str(run_params[key])}


def runner_name(runner: str | None) -> str:
    """The runner's class name. Kedro's run_params hold ``str(runner)``: an object's
    repr from `kedro run`, ``None`` where a session ran its default runner."""
    if runner in (None, "None"):
        return SequentialRunner.__name__
    found = re.fullmatch(r"<([\w.]+) object at 0x[0-9a-fA-F]+>", runner)
    return found.group(1).rpartition(".")[2] if found else runner


def edit_cases_inputs(catalog: DataCatalog, dataset: str) -> list[DatasetInput]:
    """The run's edit-case files as MLflow dataset inputs, named by the dataset
    source, for the runs table's Dataset column."""
    # imported here: settings load this module for every kedro command
    from mlflow.entities import Dataset, DatasetInput, InputTag  # noqa: PLC0415
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT  # noqa: PLC0415

    filepath = catalog.get(EDIT_CASES_DATASET)._describe()["filepath"]
    files = [filepath] if isinstance(filepath, str) else list(filepath)
    inputs = []
    for file in files:
        source = json.dumps({"uri": str(file)})
        # of the file's name, as MLflow's MetaDataset: no multi-MB read before a run
        digest = hashlib.sha256(f"{dataset}\n{source}".encode()).hexdigest()[:8]
        inputs.append(
            DatasetInput(
                Dataset(dataset, digest, source_type="local", source=source),
                tags=[InputTag(MLFLOW_DATASET_CONTEXT, "edit_cases")],
            )
        )
    return inputs


class MlflowRunHook:
    """Name the run's MLflow run by what it did and tag it (``mlflow_run_name``,
    ``run_tags``), with the runner's class name and the edit cases as its dataset
    input, and no URL's credentials in kedro-mlflow's tags of the run's parameters
    (``redacted_run_params``); open the experiment on its runs table. The methods' child runs
    (``MlflowMethodMetricsDataset``) are named by method and carry the same tags."""

    # last: kedro-mlflow's own hook starts the run (and tags it with run_params) first
    @hook_impl(trylast=True)
    def before_pipeline_run(
        self, run_params: dict[str, Any], pipeline: Pipeline, catalog: DataCatalog
    ) -> None:
        # imported here: settings load this module for every kedro command
        import mlflow  # noqa: PLC0415

        run = mlflow.active_run()
        if run is None:
            return
        what = catalog.load("params:run")
        methods = catalog.load("params:editing")["methods"]
        pipelines = run_params.get("pipeline_names")
        used_model = MODEL_DATASET in pipeline.inputs()
        mlflow.set_tags(
            {
                **redacted_run_params(run_params),
                "mlflow.runName": mlflow_run_name(what, pipelines, used_model),
                "runner": runner_name(run_params.get("runner")),
                **run_tags(what, methods, pipelines, used_model),
            }
        )
        client = mlflow.MlflowClient()
        client.log_inputs(
            run.info.run_id, datasets=edit_cases_inputs(catalog, what["dataset"])
        )
        client.set_experiment_tag(run.info.experiment_id, *EXPERIMENT_KIND)


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
