"""The user-facing `kebench` command."""

from __future__ import annotations

import json
from pathlib import Path

import pyoxigraph as ox
from click.testing import CliRunner

from kebench.cli import cli


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and "version" in result.output


def test_convert_kg_turns_a_dbpedia_dump_into_ntriples(tmp_path):
    dump = tmp_path / "dump.tsv"
    dump.write_text(
        "http://dbpedia.org/resource/A\thttp://dbpedia.org/ontology/p\tline one\nline two\n"
        "http://dbpedia.org/resource/A\thttp://dbpedia.org/ontology/q\thttp://dbpedia.org/resource/B\n",
        encoding="utf-8",
    )
    target = tmp_path / "dump.nt"
    result = CliRunner().invoke(cli, ["convert-kg", str(dump), str(target)])
    assert result.exit_code == 0, result.output
    objects = {
        t.object for t in ox.parse(path=str(target), format=ox.RdfFormat.N_TRIPLES)
    }
    assert objects == {
        ox.Literal("line one\nline two"),
        ox.NamedNode("http://dbpedia.org/resource/B"),
    }


def test_edits_prints_requests_and_probes_or_the_error(tmp_path):
    data = Path(__file__).parent / "kg" / "data"
    result = CliRunner().invoke(
        cli, ["edits", str(data / "zsre_mem_eval.json"), "--format", "zsre"]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    requests = [line["edit_request"] for line in lines if "edit_request" in line]
    probes = [line["probe"] for line in lines if "probe" in line]
    assert [r["target_new"] for r in requests] == ["Canada", "Dutch"]
    assert requests[0]["subject_uri"] is None
    assert len(probes) == 4  # noqa: PLR2004 - a rephrase and a locality question each
    broken = tmp_path / "broken.json"
    broken.write_text('[{"subject": "Ada Lovelace"}]')
    result = CliRunner().invoke(cli, ["edits", str(broken), "--format", "zsre"])
    assert result.exit_code == 1
    assert "broken.json: record #0 ('Ada Lovelace'): missing or empty field 'src'" in (
        result.output
    )
