"""The demo builder reproduces the committed demo files from its tables, the files
state the facts the deductive probes need, and a malformed table is refused."""

from __future__ import annotations

import json
import re
import shutil
import tomllib
from pathlib import Path

import pyoxigraph as ox
import pytest
from click.testing import CliRunner

from kebench.cli import cli
from kebench.demo.build import TABLES, DemoDataError, write_demo
from kebench.project import PROJECT_ROOT

DEMO = PROJECT_ROOT / "data" / "01_raw" / "demo"
DBR = "http://dbpedia.org/resource/"
DBO = "http://dbpedia.org/ontology/"
P1376 = ox.NamedNode("http://www.wikidata.org/prop/direct/P1376")
REDIRECTS = ox.NamedNode(DBO + "wikiPageRedirects")
LABEL = ox.NamedNode("http://www.w3.org/2000/01/rdf-schema#label")
TYPE = ox.NamedNode("http://www.w3.org/1999/02/22-rdf-syntax-ns#type")


@pytest.fixture(scope="module")
def kg() -> ox.Store:
    store = ox.Store()
    store.load(path=str(DEMO / "kg.nt"), format=ox.RdfFormat.N_TRIPLES)
    return store


def dbr(name: str) -> ox.NamedNode:
    return ox.NamedNode(DBR + name)


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


def test_a_capital_is_stated_capital_of_its_country_too(kg):
    """Wikidata's P1376 "capital of", the inverse of P36 capital, for every capital."""
    for city, country in [
        ("Paris", "France"),
        ("Ottawa", "Canada"),
        ("Washington,_D.C.", "United_States"),
        ("Pretoria", "South_Africa"),
        ("Cape_Town", "South_Africa"),  # one of South Africa's three capitals
    ]:
        assert ox.Quad(dbr(city), P1376, dbr(country)) in kg, city
    # Switzerland states no capital, so Bern is no capital of anything
    assert not list(kg.quads_for_pattern(dbr("Bern"), P1376, None))
    capital = ox.NamedNode(DBO + "capital")
    pairs = {(q.object, q.subject) for q in kg.quads_for_pattern(None, capital, None)}
    inverse = {(q.subject, q.object) for q in kg.quads_for_pattern(None, P1376, None)}
    assert pairs == inverse


def test_other_names_are_dbpedia_redirects(kg):
    """A redirect resource points to its entity and is labelled with the name; it has
    no type, so it is no entity of the graph."""
    obama = dbr("Barack_Hussein_Obama")
    assert ox.Quad(obama, REDIRECTS, dbr("Barack_Obama")) in kg
    name = ox.Literal("Barack Hussein Obama", language="en")
    assert ox.Quad(obama, LABEL, name) in kg
    assert ox.Quad(dbr("Leo_Messi"), REDIRECTS, dbr("Lionel_Messi")) in kg
    assert ox.Quad(dbr("French_Republic"), REDIRECTS, dbr("France")) in kg
    apple = dbr("Apple_Computer,_Inc.")
    assert ox.Quad(apple, REDIRECTS, dbr("Apple_Inc.")) in kg
    assert (
        ox.Quad(apple, LABEL, ox.Literal("Apple Computer, Inc.", language="en")) in kg
    )
    entity_labels = {
        q.object.value
        for q in kg.quads_for_pattern(None, LABEL, None)
        if list(kg.quads_for_pattern(q.subject, TYPE, None))
    }
    redirects = list(kg.quads_for_pattern(None, REDIRECTS, None))
    assert len(redirects) >= 80
    for quad in redirects:
        name = quad.subject
        assert not list(kg.quads_for_pattern(name, TYPE, None)), name
        assert list(kg.quads_for_pattern(quad.object, TYPE, None)), quad.object
        (label,) = [q.object.value for q in kg.quads_for_pattern(name, LABEL, None)]
        assert label not in entity_labels, label
        assert name.value == DBR + label.replace(" ", "_")


def test_most_edited_subjects_have_another_name(kg):
    cases = json.loads((DEMO / "edit_cases.json").read_text(encoding="utf-8"))
    subjects = {case["requested_rewrite"][0]["subject"] for case in cases}
    assert len(subjects) == 54
    named = set()
    for subject in subjects:
        (entity,) = [
            q.subject
            for q in kg.quads_for_pattern(
                None, LABEL, ox.Literal(subject, language="en")
            )
            if list(kg.quads_for_pattern(q.subject, TYPE, None))
        ]
        if list(kg.quads_for_pattern(None, REDIRECTS, entity)):
            named.add(subject)
    # docs/demo_data.md: six have no other name a reasoner must read as them (a bare
    # surname, a nickname, another state's former name)
    assert subjects - named == {
        "Olaf Scholz",
        "Xi Jinping",
        "Virat Kohli",
        "Roger Federer",
        "Robert Lewandowski",
        "Canada",
    }


@pytest.fixture
def tables(tmp_path: Path) -> Path:
    """A copy of the fact tables to break."""
    return Path(shutil.copytree(TABLES, tmp_path / "tables"))


def append(path: Path, line: str) -> int:
    """Append a line to a table; its line number."""
    text = path.read_text(encoding="utf-8")
    path.write_text(text + line + "\n", encoding="utf-8")
    return text.count("\n") + 1


def replace_line(path: Path, number: int, line: str) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    lines[number - 1] = line
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_a_row_with_a_missing_cell_names_its_file_and_line(tables, tmp_path):
    people = tables / "people.csv"
    line = append(people, "Ada_Lovelace,London")  # 2 of 4 cells
    with pytest.raises(
        DemoDataError, match=rf"people\.csv:{line}: 2 cells, expected 4"
    ):
        write_demo(tmp_path / "out", tables)
    assert not (tmp_path / "out").exists()


def test_an_unknown_reference_names_its_file_and_line(tables, tmp_path):
    # line 3 of cities.csv is New York City's
    replace_line(tables / "cities.csv", 3, "New_York_City,Atlantis")
    with pytest.raises(
        DemoDataError, match=r"cities\.csv:3: unknown Country: Atlantis"
    ):
        write_demo(tmp_path / "out", tables)


def test_an_unbalanced_quote_names_its_file_and_line(tables, tmp_path):
    line = append(tables / "companies.csv", 'Acme,"Paris,,')
    with pytest.raises(DemoDataError, match=rf"companies\.csv:{line}: "):
        write_demo(tmp_path / "out", tables)


@pytest.mark.parametrize(
    ("row", "problem"),
    [
        # the label of another entity (Amazon_(company)'s), in any case
        ("Jeff_Bezos,Amazon,short name", "already names Amazon_(company)"),
        ("Barack_Obama,PARIS,short name", "already names Paris"),
        # a resource that is an entity (Republic_of_Ireland, labelled "Ireland")
        ("Republic_of_Ireland,Republic of Ireland,official name", "is an entity"),
        # a name already given to another entity
        ("Michelle_Obama,Barack Hussein Obama,full name", "already names Barack_Obama"),
        ("Atlantis_(island),Atlantis,former name", "unknown entity: Atlantis_(island)"),
    ],
)
def test_a_wrong_other_name_is_refused(tables, tmp_path, row, problem):
    line = append(tables / "redirects.csv", row)
    with pytest.raises(
        DemoDataError, match=rf"redirects\.csv:{line}: .*{re.escape(problem)}"
    ):
        write_demo(tmp_path / "out", tables)


def test_the_tables_are_package_data():
    """A non-editable install ships every table: pyproject's package-data for the
    tables' package matches each CSV file of the folder."""
    config = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["kebench.demo.tables"]
    shipped = {p for pattern in patterns for p in TABLES.glob(pattern)}
    assert shipped == set(TABLES.glob("*.csv"))
    assert len(shipped) == 16
