"""The project's hooks: the summary a run prints at its end."""

from __future__ import annotations

import pandas as pd
from kedro.io import DataCatalog
from kedro.pipeline import Node, Pipeline

from kebench.datasets import AtomicCSVDataset, AtomicTextDataset
from kebench.hooks import RunSummaryHook


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
