"""DBpedia TSV parsing and AMIE export."""

from __future__ import annotations

import pyoxigraph as ox

from kebench.kg.amie_export import (
    local_name,
    read_dbpedia_tsv,
    to_amie_frame,
    to_amie_tsv,
    triples_to_quads,
)

R = "http://dbpedia.org/resource/"
DBO = "http://dbpedia.org/ontology/"


def write_dump(tmp_path):
    path = tmp_path / "dump.tsv"
    path.write_text(
        f"{R}Iraq\thttp://dbpedia.org/property/gdp\t$512.926\t billion\n"
        f"{R}Mexico\thttp://dbpedia.org/property/history\t*  First Empire\n"
        "*  1848–present\n"
        f"{R}Mexico\t{DBO}capital\t{R}Mexico_City\n"
        f"{R}Mexico\t{DBO}capital\t{R}Mexico_City\n"
        f"{R}AC/DC\t{DBO}genre\t{R}Hard_rock\n"
        f"{R}Mexico\thttp://dbpedia.org/property/motto\t\n",
        encoding="utf-8",
    )
    return path


def test_literals_keep_tabs_and_newlines(tmp_path):
    triples = read_dbpedia_tsv(write_dump(tmp_path))
    by_p = dict(
        zip(triples["p"].map(local_name), zip(triples["o"], triples["o_is_literal"]))
    )
    assert by_p["gdp"] == ("$512.926\t billion", True)
    assert by_p["history"] == ("*  First Empire\n*  1848–present", True)
    assert by_p["capital"] == (f"{R}Mexico_City", False)
    assert "motto" not in by_p  # empty literal dropped
    assert len(triples) == 4  # the duplicate counted once


def test_quads_are_valid_rdf(tmp_path):
    triples = read_dbpedia_tsv(write_dump(tmp_path))
    store = ox.Store()
    store.extend(triples_to_quads(triples))
    assert len(store) == 4


def test_local_names_keep_slashes_of_entities():
    assert local_name(f"{R}AC/DC") == "AC/DC"
    assert local_name("http://purl.org/dc/terms/subject") == "subject"
    assert local_name("http://www.w3.org/2000/01/rdf-schema#label") == "label"


def test_amie_frame_literals_only_when_asked(tmp_path):
    triples = read_dbpedia_tsv(write_dump(tmp_path))
    assert set(to_amie_frame(triples)["p"]) == {"capital", "genre"}
    with_literals = to_amie_frame(triples, include_literals=True)
    assert "$512.926_billion" in set(with_literals["o"])
    assert "*_First_Empire_*_1848–present" in set(with_literals["o"])
    path = tmp_path / "kb.tsv"
    assert to_amie_tsv(triples, path, include_literals=True) == 4
    assert all(len(line.split("\t")) == 3 for line in path.read_text().splitlines())
