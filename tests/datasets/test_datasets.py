"""kebench's Kedro datasets: atomic writes, source selection, the endpoint handle."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from kedro.io import DatasetError

from kebench.datasets import (
    AmieTsvDataset,
    AtomicJSONDataset,
    AtomicParquetDataset,
    EditCasesDataset,
    InjectionSetsDataset,
    NTriplesDataset,
    SparqlEndpointDataset,
)
from kebench.project import PROJECT_ROOT

DEMO = {
    "demo": {
        "edit_cases": {
            "filepath": str(PROJECT_ROOT / "data/01_raw/demo/edit_cases.json"),
            "format": "mquake",
            "risk": "counterfactual",
        },
        "kg": {
            "kind": "embedded",
            "files": [str(PROJECT_ROOT / "data/01_raw/demo/kg.nt")],
        },
    }
}


def test_failed_write_keeps_the_previous_file(tmp_path):
    dataset = AtomicParquetDataset(filepath=str(tmp_path / "t.parquet"))
    dataset.save(pd.DataFrame({"a": [1, 2]}))
    with pytest.raises(DatasetError):
        dataset.save(pd.DataFrame({"a": [object()]}))  # not serialisable to parquet
    assert dataset.load()["a"].tolist() == [1, 2]
    assert [p.name for p in tmp_path.iterdir()] == ["t.parquet"]  # no temp file left


def test_json_round_trip(tmp_path):
    dataset = AtomicJSONDataset(filepath=str(tmp_path / "r" / "report.json"))
    dataset.save({"pct": 97.5, "name": "Côte d'Ivoire"})
    assert dataset.load() == {"pct": 97.5, "name": "Côte d'Ivoire"}


def test_rdf_exports_round_trip(tmp_path):
    triples = pd.DataFrame(
        {
            "s": ["http://x/a", "http://x/a"],
            "p": ["http://x/p", "http://x/q"],
            "o": ["http://x/b", 'say "hi"\nbye'],
            "o_is_literal": [False, True],
            "o_lang": [None, "en"],
        }
    )
    nt = NTriplesDataset(filepath=str(tmp_path / "kg.nt"))
    nt.save(triples)
    pd.testing.assert_frame_equal(
        nt.load().sort_values("p", ignore_index=True), triples
    )
    amie = AmieTsvDataset(filepath=str(tmp_path / "kg.tsv"))
    amie.save(pd.DataFrame({"s": ["a"], "p": ["p"], "o": ["b"]}))
    assert amie.load().to_dict("records") == [{"s": "a", "p": "p", "o": "b"}]


def test_unknown_source_lists_the_known_ones():
    with pytest.raises(
        DatasetError, match=r"unknown dataset 'nope'; configured datasets: \['demo'\]"
    ):
        EditCasesDataset(source="nope", sources=DEMO)


def test_edit_cases_of_a_source_load_with_their_metadata():
    raw = EditCasesDataset(source="demo", sources=DEMO).load()
    assert (raw.source, raw.format, raw.risk) == ("demo", "mquake", "counterfactual")
    assert len(raw.records) >= 40


def test_missing_edit_case_file_is_named(tmp_path):
    sources = {
        "x": {
            **DEMO["demo"],
            "edit_cases": {
                **DEMO["demo"]["edit_cases"],
                "filepath": str(tmp_path / "no.json"),
            },
        }
    }
    with pytest.raises(DatasetError, match="edit-case file not found: .*no.json"):
        EditCasesDataset(source="x", sources=sources).load()


def test_endpoint_is_opened_once_and_described_without_secrets():
    dataset = SparqlEndpointDataset(source="demo", sources=DEMO)
    assert dataset.load() is dataset.load()
    http = SparqlEndpointDataset(
        source="demo",
        sources=DEMO,
        url="https://example.org/sparql",
        credentials={"user": "me", "password": "pw"},
    )
    assert "pw" not in repr(http)
    assert http.load().name == "https://example.org/sparql"


def test_missing_kg_file_is_a_clear_error(tmp_path):
    sources = {
        "x": {
            **DEMO["demo"],
            "kg": {"kind": "embedded", "files": [str(tmp_path / "none.nt")]},
        }
    }
    with pytest.raises(DatasetError, match="KG file not found: .*none.nt"):
        SparqlEndpointDataset(source="x", sources=sources).load()


def test_a_source_of_several_files_reads_them_in_order(tmp_path):
    files = []
    for name, count in (("first", 2), ("second", 1)):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps([{"n": f"{name}-{i}"} for i in range(count)]))
        files.append(str(path))
    sources = {
        "x": {
            "edit_cases": {
                "filepath": files,
                "format": "mquake",
                "risk": "counterfactual",
            }
        }
    }
    raw = EditCasesDataset(source="x", sources=sources).load()
    assert [r["n"] for r in raw.records] == ["first-0", "first-1", "second-0"]
    # a record is named by its own file and its index there
    assert raw.origin(2) == (files[1], 0)


def test_a_source_gets_the_injection_sets_it_names_and_no_others(tmp_path, caplog):
    folder = tmp_path / "editattack"
    folder.mkdir()
    (folder / "bias.csv").write_text("subject,target_new\nnurses,are always women\n")
    (folder / "facts.csv").write_text("subject,target_new\nthe Moon,is cheese\n")
    sets = {
        "bias": {"file": "bias.csv", "risk": "bias"},
        "facts": {"file": "facts.csv", "risk": "misinformation"},
    }
    sources = {"demo": {"injection_sets": ["bias"]}, "mine": {}}

    def loaded(source: str) -> list[tuple[str, str, int]]:
        chosen = InjectionSetsDataset(str(folder), sets, source, sources).load()
        return [(s.name, s.risk, len(s.table)) for s in chosen]

    with caplog.at_level("INFO"):
        assert loaded("demo") == [("bias", "bias", 1)]
        assert loaded("mine") == []
    said = caplog.text
    assert "dataset demo adds the harmful-injection sets ['bias']" in said
    assert "dataset mine adds no harmful-injection sets" in said
    with pytest.raises(DatasetError, match=r"sources.x.injection_sets .*\['nope'\]"):
        InjectionSetsDataset(
            str(folder), sets, "x", {"x": {"injection_sets": ["nope"]}}
        )
