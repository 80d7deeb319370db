"""The demo builder reproduces the committed demo files, and checks its own tables."""

from __future__ import annotations

import json

import pyoxigraph as ox
from click.testing import CliRunner

from kebench.cli import cli
from kebench.project import PROJECT_ROOT

DEMO = PROJECT_ROOT / "data" / "01_raw" / "demo"


def test_build_demo_rewrites_the_committed_files_byte_for_byte(tmp_path):
    result = CliRunner().invoke(cli, ["build-demo", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    for name in ("kg.nt", "edit_cases.json"):
        assert (tmp_path / name).read_bytes() == (DEMO / name).read_bytes(), name
    summary = json.loads(result.output.strip().splitlines()[-1])
    cases = json.loads((DEMO / "edit_cases.json").read_text(encoding="utf-8"))
    assert summary["cases"] == len(cases)
    # the N-Triples parse, and say what the summary counts
    triples = list(ox.parse(path=str(DEMO / "kg.nt"), format=ox.RdfFormat.N_TRIPLES))
    assert summary["triples"] == len(triples)


def test_every_edit_case_changes_its_answer():
    cases = json.loads((DEMO / "edit_cases.json").read_text(encoding="utf-8"))
    for case in cases:
        (rewrite,) = case["requested_rewrite"]
        assert rewrite["target_true"]["str"] != rewrite["target_new"]["str"]
        assert case["answer"] != case["new_answer"], case["case_id"]
