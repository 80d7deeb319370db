"""The project's hooks: the summary a run prints at its end, the upstream pipelines a
run makes first, an error the user can act on as one paragraph, and the MLflow run's
name, tags and dataset input."""

from __future__ import annotations

import logging

import mlflow
import pandas as pd
import pytest
from kedro.io import DataCatalog, DatasetError, MemoryDataset
from kedro.pipeline import Node, Pipeline

from kebench.datasets import AtomicCSVDataset, AtomicTextDataset, EditCasesDataset
from kebench.editing.runner import select_methods
from kebench.hooks import (
    LOG_FILE,
    MlflowRunHook,
    RunError,
    RunSummaryHook,
    UpstreamOutputsHook,
    user_error,
)
from kebench.kg.vocabulary import AxiomError, read_axiom_table


def _identity(value):
    return value


def _catalog(tmp_path) -> DataCatalog:
    headline = pd.DataFrame(
        {
            "model": ["smollm2-135m"],
            "method": ["ROME"],
            "risk": ["counterfactual"],
            "protocol": ["prob"],
            "EditSucc": [0.95],
            "EditSucc ci_low": [0.85],
            "EditSucc ci_high": [1.0],
            "EditSucc n": [20],
            "population": ["itt"],
        }
    )
    catalog = DataCatalog(
        {
            "headline_table": AtomicCSVDataset(filepath=str(tmp_path / "headline.csv")),
            "evaluation_report": AtomicTextDataset(
                filepath=str(tmp_path / "report.md")
            ),
        }
    )
    catalog.save("headline_table", headline)
    catalog.save("evaluation_report", "# report")
    return catalog


def _pipeline() -> Pipeline:
    return Pipeline(
        [
            Node(_identity, "metrics", "headline_table", name="make_headline"),
            Node(_identity, "headline_table", "evaluation_report", name="make_report"),
        ]
    )


def test_a_run_that_made_the_headline_prints_it_and_its_reports(tmp_path, capsys):
    RunSummaryHook().after_pipeline_run(
        pipeline=_pipeline(), catalog=_catalog(tmp_path)
    )
    printed = capsys.readouterr().out
    assert "Headline (population itt" in printed
    assert (
        "| smollm2-135m | ROME | counterfactual | prob | 95.0 [85.0, 100.0] (n=20) |"
        in printed
    )
    # a measure the table does not hold is a dash, not a number
    assert "| – |" in printed
    assert f"  {tmp_path / 'report.md'}" in printed
    assert "headline.csv" not in printed


def test_a_run_without_the_headline_prints_nothing(tmp_path, capsys):
    other = Pipeline([Node(_identity, "a", "evaluation_report", name="report")])
    catalog = _catalog(tmp_path)
    capsys.readouterr()  # Kedro's log of the saves, where an earlier test set it up
    RunSummaryHook().after_pipeline_run(pipeline=other, catalog=catalog)
    assert capsys.readouterr().out == ""


def _plus_one(table: pd.DataFrame) -> pd.DataFrame:
    return table.assign(x=table["x"] + 1)


def test_what_a_pipeline_reads_from_others_is_made_first_and_only_when_missing(
    tmp_path,
):
    """raw -> (build) -> built -> (probe) -> probed -> (score) -> scored: running
    ``score`` alone first runs ``build`` and ``probe``; with ``built`` stored, only
    ``probe``."""

    def csv(name: str) -> AtomicCSVDataset:
        return AtomicCSVDataset(filepath=str(tmp_path / f"{name}.csv"))

    registry = {
        "build": Pipeline([Node(_plus_one, "raw", "built", name="build")]),
        "probe": Pipeline([Node(_plus_one, "built", "probed", name="probe")]),
        "score": Pipeline([Node(_plus_one, "probed", "scored", name="score")]),
    }
    catalog = DataCatalog({n: csv(n) for n in ("raw", "built", "probed", "scored")})
    catalog.save("raw", pd.DataFrame({"x": [1, 2]}))
    hook = UpstreamOutputsHook(lambda: registry)
    hook.before_pipeline_run(pipeline=registry["score"], catalog=catalog)
    assert list(catalog.load("probed")["x"]) == [3, 4]
    # stored upstream outputs are not made again
    catalog.save("built", pd.DataFrame({"x": [10]}))
    (tmp_path / "probed.csv").unlink()
    hook.before_pipeline_run(pipeline=registry["score"], catalog=catalog)
    assert list(catalog.load("probed")["x"]) == [11]
    assert list(catalog.load("built")["x"]) == [10]
    assert not catalog.exists("scored")  # the requested pipeline is Kedro's to run


def test_an_upstream_failure_is_one_paragraph_naming_what_ran(tmp_path):
    registry = {
        "build": Pipeline([Node(_plus_one, "raw", "built", name="build")]),
        "score": Pipeline([Node(_plus_one, "built", "scored", name="score")]),
    }
    catalog = DataCatalog(
        {
            name: AtomicCSVDataset(filepath=str(tmp_path / f"{name}.csv"))
            for name in ("raw", "built", "scored")
        }
    )
    with pytest.raises(RunError, match=r"while running build first: .*raw"):
        UpstreamOutputsHook(lambda: registry).before_pipeline_run(
            pipeline=registry["score"], catalog=catalog
        )


def test_an_error_the_user_can_act_on_is_a_paragraph_and_others_are_not(
    tmp_path, caplog, monkeypatch
):
    monkeypatch.chdir(tmp_path)  # the log folder is made where the run is
    axioms = "axioms.csv"
    with pytest.raises(AxiomError) as raised:  # kebench's own message
        read_axiom_table("relation,axiom,value,source\ndbo:capital,nope,,x\n", axioms)
    # conf/logging.yml, once a session has read it, stops this logger's records at
    # its file: listen to the logger itself
    tracebacks = logging.getLogger("kebench.tracebacks")
    tracebacks.addHandler(caplog.handler)
    try:
        paragraph = user_error(raised.value, "running node read_axioms")
    finally:
        tracebacks.removeHandler(caplog.handler)
    assert isinstance(paragraph, RunError)
    message = paragraph.format_message()
    assert message.startswith("kedro run stopped while running node read_axioms: ")
    assert "axioms.csv:2: unknown axiom 'nope'" in message and LOG_FILE in message
    assert "Traceback" not in message
    # the traceback is logged (to the log file, conf/logging.yml)
    (record,) = caplog.records
    assert record.exc_info[1] is raised.value

    assert user_error(DatasetError("cannot load x.csv"), "running") is not None
    # a ValueError kebench raises itself names its input ...
    with pytest.raises(ValueError, match="unknown editing method") as unknown:
        select_methods("NOPE", ["ROME"])
    assert user_error(unknown.value, "running") is not None
    # ... one raised inside a library, or an error of another kind, is a bug
    with pytest.raises(ValueError) as library:
        pd.to_numeric(pd.Series(["x"]))
    with pytest.raises(ZeroDivisionError) as bug:
        _ = 1 / 0
    assert user_error(library.value, "running") is None
    assert user_error(bug.value, "running") is None


def _tracked(tmp_path, pipeline: Pipeline, run_params: dict) -> mlflow.entities.Run:
    """The MLflow run of a run of ``pipeline`` on the demo source, as the hook names,
    tags and describes it (kedro-mlflow's hook starts the run before it)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    catalog = DataCatalog(
        {
            "params:run": MemoryDataset(
                {"dataset": "demo", "model": "smollm2-135m", "hparams_profile": "fast"}
            ),
            "params:editing": MemoryDataset({"methods": "ROME+IKE"}),
            "raw_edit_cases": EditCasesDataset(
                "demo",
                {
                    "demo": {
                        "edit_cases": {
                            "filepath": "data/01_raw/demo/edit_cases.json",
                            "format": "mquake",
                            "risk": "counterfactual",
                        }
                    }
                },
            ),
        }
    )
    mlflow.set_tracking_uri(uri)
    try:
        mlflow.set_experiment("hooks")
        with mlflow.start_run() as run:
            # as kedro-mlflow's hook tags the run before this one
            mlflow.set_tags({k: v for k, v in run_params.items() if v})
            MlflowRunHook().before_pipeline_run(
                run_params=run_params, pipeline=pipeline, catalog=catalog
            )
    finally:
        mlflow.set_tracking_uri(None)
    return mlflow.MlflowClient(tracking_uri=uri).get_run(run.info.run_id)


def test_a_run_without_a_model_is_named_by_its_pipelines_and_dataset(tmp_path):
    qa_only = Pipeline([Node(_identity, "raw_edit_cases", "probes", name="unify")])
    run = _tracked(
        tmp_path,
        qa_only,
        {
            # Kedro passes --pipelines as a set, and str(runner)
            "pipeline_names": ["rule_mining", "kg_build"],
            "runner": "<kedro.runner.sequential_runner.SequentialRunner object at 0x7f3a>",
        },
    )
    assert run.info.run_name == "kg_build+rule_mining · demo"
    tags = run.data.tags
    assert tags["runner"] == "SequentialRunner"
    assert tags["kebench.dataset"] == "demo"
    assert tags["kebench.pipelines"] == "kg_build+rule_mining"
    assert not {"kebench.model", "kebench.profile", "kebench.methods"} & set(tags)
    (edit_cases,) = run.inputs.dataset_inputs
    assert edit_cases.dataset.name == "demo"
    assert edit_cases.dataset.source_type == "local"
    assert edit_cases.dataset.source == '{"uri": "data/01_raw/demo/edit_cases.json"}'
    assert [(t.key, t.value) for t in edit_cases.tags] == [
        ("mlflow.data.context", "edit_cases")
    ]


def test_a_run_of_a_model_is_named_by_its_model_and_profile_too(tmp_path):
    evaluation = Pipeline([Node(_identity, "model", "metrics", name="evaluate")])
    # a session run with no runner given runs Kedro's SequentialRunner
    run = _tracked(tmp_path, evaluation, {"pipeline_names": None, "runner": "None"})
    assert run.info.run_name == "__default__ · demo · smollm2-135m · fast"
    assert {
        "runner": "SequentialRunner",
        "kebench.model": "smollm2-135m",
        "kebench.profile": "fast",
        "kebench.methods": "ROME+IKE",
        "kebench.pipelines": "__default__",
    }.items() <= run.data.tags.items()


def test_credentials_in_a_runs_parameters_never_reach_mlflow(tmp_path):
    qa_only = Pipeline([Node(_identity, "raw_edit_cases", "probes", name="unify")])
    run = _tracked(
        tmp_path,
        qa_only,
        {
            "pipeline_names": ["kg_build"],
            "runtime_params": {
                "endpoint": "https://alice:s3cret@kg.example.org/sparql",
                "dataset": "demo",
            },
        },
    )
    tags = run.data.tags
    assert "s3cret" not in str(tags)
    assert "alice" not in str(tags)
    assert tags["runtime_params"] == (
        "{'endpoint': 'https://***@kg.example.org/sparql', 'dataset': 'demo'}"
    )
