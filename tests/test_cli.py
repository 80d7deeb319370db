"""The user-facing `kebench` command."""

from __future__ import annotations

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
