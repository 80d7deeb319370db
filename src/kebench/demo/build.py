"""Build the demo data from the fact tables in ``kebench/demo/tables``: a KG of true
facts (N-Triples) and MQuAKE-style single-edit cases (JSON), deterministic (sorted
triples, fixed case order).

Each table is a UTF-8 CSV file with a header (``SCHEMAS`` lists the columns; a cell
with several values separates them with ``|``). Entity keys are DBpedia resource names
(``http://dbpedia.org/resource/<key>``); an entity's rdfs:label is its key with
underscores replaced by spaces unless ``labels.csv`` or ``languages.csv`` gives one.

The edit cases are *derived* from the tables: each case gives only the edited
relation, subject, new object and the other hop of its 2-hop chain; old and new
answers, single hops and labelled triples are computed from the graph, so they cannot
drift apart from ``kg.nt``. Checks run as the data is built (every cell is well
formed, every referenced entity exists with the right type, labels are unique,
capitals and largest cities lie in their country, nobody is in two couples, every
other name is new and names an entity, every edited subject has another name, every
edit has single-valued hops and really changes its answer); a failed check raises
``DemoDataError`` naming the table's file and line.

Besides the tables' facts the KG states two kinds of derived facts: the inverse of
every capital (Wikidata's P1376 "capital of", the inverse property of P36 capital)
and each other name of ``redirects.csv`` as a DBpedia redirect resource
(``dbo:wikiPageRedirects`` to the entity, its name as ``rdfs:label``, no type).

Rebuild with ``kebench build-demo`` (writes ``data/01_raw/demo``).
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

TABLES = Path(__file__).with_name("tables")

RES = "http://dbpedia.org/resource/"
ONT = "http://dbpedia.org/ontology/"
WDT = "http://www.wikidata.org/prop/direct/"
RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"
RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"
REDIRECT = "dbo:wikiPageRedirects"
PREFIXES = {"dbo": ONT, "wdt": WDT}

# Facts stated in both directions: for each (s, p, o) also (o, inverse, s).
# Wikidata declares P1376 "capital of" the inverse property of P36 "capital".
INVERSES = {"dbo:capital": "wdt:P1376"}

# Each table's columns, in order; a column ending in "?" may be empty.
SCHEMAS: dict[str, tuple[str, ...]] = {
    "continents": ("key",),
    "languages": ("key", "label"),
    "countries": (
        "key",
        "capital?",
        "official_language",
        "continent",
        "currency",
        "largest_city?",
        "head_of_state?",
    ),
    "cities": ("key", "country"),
    "people": ("key", "birth_place?", "citizenship?", "death_place?"),
    "couples": ("person", "spouse"),
    "universities": ("key", "country"),
    "alma_mater": ("person", "universities"),
    "companies": ("key", "headquarter", "founded_by?", "ceo?"),
    "labels": ("key", "label"),
    "redirects": ("key", "name", "kind"),
    "qids": ("key", "qid"),
    "answer_aliases": ("key", "aliases"),
    "relations": ("pid", "label", "predicates", "prompt?", "question?"),
    "edits": ("relation", "subject", "new_object", "other_relation", "head?"),
    "multi_hop": ("first_relation", "second_relation", "question"),
}
# Tables that list each entity or relation (their first column) once.
KEYED = {
    "continents",
    "languages",
    "countries",
    "cities",
    "people",
    "universities",
    "alma_mater",
    "companies",
    "labels",
    "qids",
    "answer_aliases",
    "relations",
}
# Where each other name in redirects.csv comes from (docs/demo_data.md).
REDIRECT_KINDS = {
    "full name",
    "birth name",
    "short name",
    "common name",
    "official name",
    "former name",
    "native name",
    "qualified name",
    "spelling",
}

_IRI_BAD = re.compile(r'[\x00-\x20<>"{}|^`\\]')
_KEY = re.compile(r"[^\s|]+")
_QID = re.compile(r"Q[1-9][0-9]*")
_PID = re.compile(r"P[1-9][0-9]*")


class DemoDataError(ValueError):
    """A fact table is malformed or contradicts another one: ``<file>:<line>: why``."""


@dataclass(frozen=True)
class Row:
    """One data line of a table: its cells by column, and where it is."""

    where: str  # "<file>:<line>"
    cells: dict[str, str]

    def __getitem__(self, column: str) -> str:
        return self.cells[column]

    def fail(self, problem: str) -> NoReturn:
        raise DemoDataError(f"{self.where}: {problem}")

    def many(self, column: str) -> list[str]:
        """The ``|``-separated values of a cell (none for an empty cell)."""
        text = self.cells[column]
        values = text.split("|") if text else []
        if any(not v or v != v.strip() for v in values):
            self.fail(f"column {column}: empty or padded value in {text!r}")
        return values


def read_table(path: Path, columns: tuple[str, ...]) -> list[Row]:
    """The rows of one CSV table, checked against its columns (``SCHEMAS``).

    Raises:
        DemoDataError: a wrong header, a row with the wrong number of cells, an empty
            required cell, a cell with surrounding spaces, or unbalanced quotes.
    """
    names = [c.rstrip("?") for c in columns]
    required = [c for c in columns if not c.endswith("?")]
    rows: list[Row] = []
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        try:
            header = next(reader, None)
            if header != names:
                raise DemoDataError(f"{path}:1: header {header}, expected {names}")
            for cells in reader:
                where = f"{path}:{reader.line_num}"
                if len(cells) != len(names):
                    raise DemoDataError(
                        f"{where}: {len(cells)} cells, expected {len(names)} "
                        f"({', '.join(names)})"
                    )
                row = Row(where, dict(zip(names, cells, strict=True)))
                for name, value in row.cells.items():
                    if value != value.strip():
                        row.fail(f"column {name}: spaces around {value!r}")
                for name in required:
                    if not row[name]:
                        row.fail(f"column {name} is empty")
                rows.append(row)
        except csv.Error as err:
            raise DemoDataError(f"{path}:{reader.line_num}: {err}") from err
    return rows


def load_tables(folder: Path = TABLES) -> dict[str, list[Row]]:
    """Every table of ``SCHEMAS`` from ``folder``; a keyed table's keys are unique."""
    tables = {
        name: read_table(folder / f"{name}.csv", columns)
        for name, columns in SCHEMAS.items()
    }
    for name in KEYED:
        seen: set[str] = set()
        for row in tables[name]:
            key = row[SCHEMAS[name][0]]
            if key in seen:
                row.fail(f"{key} is listed twice")
            seen.add(key)
    return tables


def iri(key: str, base: str = RES) -> str:
    """Full IRI for a resource key, percent-encoding characters illegal in IRIs."""
    enc = _IRI_BAD.sub(lambda m: "".join(f"%{b:02X}" for b in m.group().encode()), key)
    return base + enc


def expand(curie: str) -> str:
    """``dbo:capital`` -> the predicate's full IRI."""
    prefix, _, local = curie.partition(":")
    return PREFIXES[prefix] + local


def literal(text: str, lang: str = "en") -> str:
    """N-Triples language-tagged literal with the required escapes."""
    esc = (
        text.replace("\\", "\\\\")
        .replace('"', '\\"')
        .replace("\n", "\\n")
        .replace("\r", "\\r")
    )
    return f'"{esc}"@{lang}'


class KG:
    """The demo's entities (typed, labelled), facts and redirects, by key."""

    def __init__(self) -> None:
        self.types: dict[str, str] = {}
        self.where: dict[str, str] = {}  # where each entity is first defined
        self.labels: dict[str, str] = {}  # labels that are not the key's words
        self.facts: set[tuple[str, str, str]] = set()  # (subject, predicate, object)
        self.redirects: dict[str, tuple[str, str]] = {}  # key -> (entity, name)

    def entity(self, row: Row, key: str, cls: str) -> None:
        if not _KEY.fullmatch(key):
            row.fail(f"{key!r} is not an entity key (no spaces or '|')")
        old = self.types.setdefault(key, cls)
        self.where.setdefault(key, row.where)
        if old != cls:
            row.fail(f"{key} typed both {old} and {cls}")

    def need(self, row: Row, cls: str, key: str) -> str:
        if self.types.get(key) != cls:
            row.fail(f"unknown {cls}: {key}")
        return key

    def add(self, s: str, p: str, o: str) -> None:
        self.facts.add((s, p, o))

    def objects(self, s: str, preds: list[str]) -> list[str]:
        return sorted(o for (s2, p, o) in self.facts if s2 == s and p in preds)

    def label_of(self, key: str) -> str:
        return self.labels.get(key, key.replace("_", " "))


def _add_entities(kg: KG, tables: dict[str, list[Row]]) -> dict[str, str]:
    """Continents, languages, cities and people; each city's country."""
    for row in tables["continents"]:
        kg.entity(row, row["key"], "Continent")
    for row in tables["languages"]:
        kg.entity(row, row["key"], "Language")
        kg.labels[row["key"]] = row["label"]
    countries = {row["key"] for row in tables["countries"]}
    city_country: dict[str, str] = {}
    for row in tables["cities"]:
        city, country = row["key"], row["country"]
        if country not in countries:
            row.fail(f"unknown Country: {country}")
        kg.entity(row, city, "City")
        city_country[city] = country
        kg.add(city, "dbo:country", country)
    for row in tables["people"]:
        kg.entity(row, row["key"], "Person")
    return city_country


def _add_countries(
    kg: KG, tables: dict[str, list[Row]], city_country: dict[str, str]
) -> None:
    """Countries with their capitals, languages, continents, currency, largest city
    and head of state."""
    for row in tables["countries"]:
        country = row["key"]
        kg.entity(row, country, "Country")
        for cap in row.many("capital"):
            if city_country.get(cap) != country:
                row.fail(f"capital {cap} is not a city of {country}")
            kg.add(country, "dbo:capital", cap)
        for lang in row.many("official_language"):
            kg.add(country, "dbo:officialLanguage", kg.need(row, "Language", lang))
        for cont in row.many("continent"):
            kg.add(country, "dbo:continent", kg.need(row, "Continent", cont))
        kg.entity(row, row["currency"], "Currency")
        kg.add(country, "dbo:currency", row["currency"])
        if big := row["largest_city"]:
            if city_country.get(big) != country:
                row.fail(f"largest city {big} is not a city of {country}")
            kg.add(country, "dbo:largestCity", big)
        if hos := row["head_of_state"]:
            kg.add(country, "dbo:leader", kg.need(row, "Person", hos))


def _add_people(kg: KG, tables: dict[str, list[Row]]) -> None:
    """People's places and citizenships, couples, universities and alma maters."""
    for row in tables["people"]:
        person = row["key"]
        if birth := row["birth_place"]:
            kg.add(person, "dbo:birthPlace", kg.need(row, "City", birth))
        for cit in row.many("citizenship"):
            kg.add(person, "dbo:citizenship", kg.need(row, "Country", cit))
        if death := row["death_place"]:
            kg.add(person, "dbo:deathPlace", kg.need(row, "City", death))
    married: set[str] = set()
    for row in tables["couples"]:
        a, b = row["person"], row["spouse"]
        for x in (a, b):
            kg.need(row, "Person", x)
            if x in married:
                row.fail(f"{x} is listed in two couples")
            married.add(x)
        kg.add(a, "dbo:spouse", b)
        kg.add(b, "dbo:spouse", a)
    for row in tables["universities"]:
        kg.entity(row, row["key"], "University")
        kg.add(row["key"], "dbo:country", kg.need(row, "Country", row["country"]))
    for row in tables["alma_mater"]:
        person = kg.need(row, "Person", row["person"])
        for uni in row.many("universities"):
            kg.add(person, "dbo:almaMater", kg.need(row, "University", uni))


def _add_companies(
    kg: KG, tables: dict[str, list[Row]], city_country: dict[str, str]
) -> None:
    """Companies; dbo:locationCountry is the country of the headquarters city."""
    for row in tables["companies"]:
        comp, hq = row["key"], row["headquarter"]
        kg.entity(row, comp, "Company")
        kg.add(comp, "dbo:headquarter", kg.need(row, "City", hq))
        kg.add(comp, "dbo:locationCountry", city_country[hq])
        for founder in row.many("founded_by"):
            kg.add(comp, "dbo:foundedBy", kg.need(row, "Person", founder))
        if ceo := row["ceo"]:
            kg.add(comp, "dbo:ceo", kg.need(row, "Person", ceo))


def _add_names(kg: KG, tables: dict[str, list[Row]]) -> None:
    """Labels (unique across the graph), then the other names as redirects."""
    for row in tables["labels"]:
        if row["key"] not in kg.types:
            row.fail(f"label of an unknown entity: {row['key']}")
        kg.labels[row["key"]] = row["label"]
    owner: dict[str, str] = {}  # casefolded label or name -> its entity
    for key in kg.types:
        label = kg.label_of(key).casefold()
        if label in owner:
            raise DemoDataError(
                f"{kg.where[key]}: {key} has the label {kg.label_of(key)!r} of "
                f"{owner[label]} ({kg.where[owner[label]]})"
            )
        owner[label] = key
    for row in tables["redirects"]:
        target, name = row["key"], row["name"]
        if target not in kg.types:
            row.fail(f"other name of an unknown entity: {target}")
        if row["kind"] not in REDIRECT_KINDS:
            row.fail(f"kind {row['kind']!r} is none of {sorted(REDIRECT_KINDS)}")
        if name != " ".join(name.split()) or "_" in name or not name[:1].isupper():
            row.fail(
                f"{name!r} is not a page name (one space between words, no '_', "
                "a capital first letter)"
            )
        key = name.replace(" ", "_")
        if key in kg.types:
            row.fail(f"the redirect <{iri(key)}> is an entity of the KG")
        if name.casefold() in owner:
            other = owner[name.casefold()]
            row.fail(f"{name!r} already names {other}")
        owner[name.casefold()] = target
        kg.redirects[key] = (target, name)


def build_kg(tables: dict[str, list[Row]]) -> KG:
    """The demo KG from its tables (``load_tables``), checked as it is built."""
    kg = KG()
    city_country = _add_entities(kg, tables)
    _add_countries(kg, tables, city_country)
    _add_people(kg, tables)
    _add_companies(kg, tables, city_country)
    for s, p, o in sorted(kg.facts):
        if p in INVERSES:
            kg.add(o, INVERSES[p], s)
    _add_names(kg, tables)
    return kg


def triple_lines(kg: KG) -> Iterator[str]:
    """Every triple of the KG as an N-Triples line, in no particular order."""
    for key, cls in kg.types.items():
        yield f"<{iri(key)}> <{RDF_TYPE}> <{ONT}{cls}> ."
        yield f"<{iri(key)}> <{RDFS_LABEL}> {literal(kg.label_of(key))} ."
    for s, p, o in kg.facts:
        yield f"<{iri(s)}> <{expand(p)}> <{iri(o)}> ."
    for key, (target, name) in kg.redirects.items():
        yield f"<{iri(key)}> <{expand(REDIRECT)}> <{iri(target)}> ."
        yield f"<{iri(key)}> <{RDFS_LABEL}> {literal(name)} ."


def write_nt(kg: KG, path: Path) -> int:
    out = sorted(set(triple_lines(kg)))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return len(out)


# --------------------------------------------------------------------------
# Edit cases
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Relation:
    """A Wikidata relation: its label, DBpedia predicates, cloze and question."""

    label: str
    predicates: list[str]
    prompt: str
    question: str


def load_relations(
    tables: dict[str, list[Row]],
) -> tuple[dict[str, Relation], dict[tuple[str, str], list[str]]]:
    """The relations by P-id, and the two-hop questions by (first, second) P-id."""
    relations: dict[str, Relation] = {}
    for row in tables["relations"]:
        if not _PID.fullmatch(row["pid"]):
            row.fail(f"{row['pid']!r} is not a Wikidata property id")
        preds = row.many("predicates")
        for pred in preds:
            if pred.partition(":")[0] not in PREFIXES or not pred.partition(":")[2]:
                row.fail(f"predicate {pred!r} is none of {sorted(PREFIXES)}:<name>")
        for column in ("prompt", "question"):
            if row[column] and row[column].count("{}") != 1:
                row.fail(f"column {column} must hold exactly one '{{}}'")
        relations[row["pid"]] = Relation(
            row["label"], preds, row["prompt"], row["question"]
        )
    multi_hop: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row in tables["multi_hop"]:
        for column in ("first_relation", "second_relation"):
            if not relations.get(row[column], Relation("", [], "", "")).question:
                row.fail(f"{row[column]} is no relation with a question")
        if row["question"].count("{}") != 1:
            row.fail("the question must hold exactly one '{}'")
        multi_hop[(row["first_relation"], row["second_relation"])].append(
            row["question"]
        )
    return relations, dict(multi_hop)


@dataclass(frozen=True)
class Lookups:
    """What the edit cases look up besides the graph."""

    relations: dict[str, Relation]
    multi_hop: dict[tuple[str, str], list[str]]
    qids: dict[str, str]
    aliases: dict[str, list[str]]  # answer aliases


def load_lookups(kg: KG, tables: dict[str, list[Row]]) -> Lookups:
    relations, multi_hop = load_relations(tables)
    qids: dict[str, str] = {}
    for row in tables["qids"]:
        if row["key"] not in kg.types:
            row.fail(f"Q-id of an unknown entity: {row['key']}")
        if not _QID.fullmatch(row["qid"]):
            row.fail(f"{row['qid']!r} is not a Wikidata item id")
        qids[row["key"]] = row["qid"]
    aliases: dict[str, list[str]] = {}
    for row in tables["answer_aliases"]:
        if row["key"] not in kg.types:
            row.fail(f"aliases of an unknown entity: {row['key']}")
        aliases[row["key"]] = row.many("aliases")
    return Lookups(relations, multi_hop, qids, aliases)


def build_case(kg: KG, look: Lookups, n: int, row: Row) -> dict:
    """Edit case ``n`` from its row of edits.csv, checked against the graph."""
    relations = look.relations
    rel, subj, new = row["relation"], row["subject"], row["new_object"]
    other, head = row["other_relation"], row["head"] or None
    for pid in (rel, other):
        if pid not in relations or not relations[pid].question:
            row.fail(f"{pid} is no relation with a prompt and a question")

    def one(s: str, pid: str, override: dict | None = None) -> str:
        """The single object of (s, pid), optionally under an edit override."""
        if override and (s, pid) in override:
            return override[(s, pid)]
        objs = kg.objects(s, relations[pid].predicates)
        if len(objs) != 1:
            row.fail(f"({s}, {pid}) has {len(objs)} objects: {objs}")
        return objs[0]

    old = one(subj, rel)
    if new == old or new not in kg.types or kg.types[new] != kg.types[old]:
        row.fail(f"{new} is no other {kg.types[old]} than {old}")
    if new in kg.objects(subj, relations[rel].predicates):
        row.fail(f"{subj} {rel} {new} is already true")

    rels, start = ((rel, other), subj) if head is None else ((other, rel), head)
    if head is not None and one(head, other) != subj:
        row.fail(f"({head}, {other}) is not {subj}")
    if rels not in look.multi_hop:
        row.fail(f"multi_hop.csv has no questions for {rels}")

    def chain(override: dict | None) -> list[tuple[str, str, str]]:
        triples, cur = [], start
        for pid in rels:
            nxt = one(cur, pid, override)
            triples.append((cur, pid, nxt))
            cur = nxt
        return triples

    orig, edited = chain(None), chain({(subj, rel): new})
    ans, new_ans = orig[-1][2], edited[-1][2]
    if ans == new_ans:
        row.fail(f"case {n}: the edit does not change the answer {ans}")

    label = kg.label_of

    def labelled(triples: list[tuple[str, str, str]]) -> list[list[str]]:
        return [[label(s), relations[p].label, label(o)] for s, p, o in triples]

    def hop(pid: str, s: str, o: str) -> dict:
        return {
            "question": relations[pid].question.format(label(s)),
            "cloze": relations[pid].prompt.format(label(s)),
            "answer": label(o),
        }

    return {
        "case_id": n,
        "requested_rewrite": [
            {
                "prompt": relations[rel].prompt,
                "relation_id": rel,
                "subject": label(subj),
                "target_true": {"str": label(old), "id": look.qids.get(old)},
                "target_new": {"str": label(new), "id": look.qids.get(new)},
                "question": relations[rel].question.format(label(subj)),
            }
        ],
        "questions": [q.format(label(start)) for q in look.multi_hop[rels]],
        "answer": label(ans),
        "answer_alias": look.aliases.get(ans, []),
        "new_answer": label(new_ans),
        "new_answer_alias": look.aliases.get(new_ans, []),
        "single_hops": [hop(p, s, o) for s, p, o in orig],
        "new_single_hops": [hop(p, s, o) for s, p, o in edited],
        "orig": {
            "triples_labeled": labelled(orig),
            "new_triples_labeled": labelled(edited),
            "edit_triples_labeled": labelled([(subj, rel, new)]),
        },
    }


def build_cases(kg: KG, tables: dict[str, list[Row]]) -> list[dict]:
    """The edit cases, one per row of edits.csv, in its order."""
    look = load_lookups(kg, tables)
    return [
        build_case(kg, look, n, row) for n, row in enumerate(tables["edits"], start=1)
    ]


def write_demo(folder: Path, tables: Path = TABLES) -> dict[str, object]:
    """Write ``kg.nt`` and ``edit_cases.json`` into ``folder`` from the tables in
    ``tables``; what was written."""
    facts = load_tables(tables)
    kg = build_kg(facts)
    cases = build_cases(kg, facts)
    folder.mkdir(parents=True, exist_ok=True)
    n_triples = write_nt(kg, folder / "kg.nt")
    (folder / "edit_cases.json").write_text(
        json.dumps(cases, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    by_type: dict[str, int] = defaultdict(int)
    for cls in kg.types.values():
        by_type[cls] += 1
    by_pred: dict[str, int] = defaultdict(int)
    for _, p, _ in kg.facts:
        by_pred[p] += 1
    if kg.redirects:
        by_pred[REDIRECT] = len(kg.redirects)
    by_rel: dict[str, int] = defaultdict(int)
    for row in facts["edits"]:
        by_rel[row["relation"]] += 1
    return {
        "triples": n_triples,
        "entities": dict(sorted(by_type.items())),
        "facts": dict(sorted(by_pred.items())),
        "cases": len(cases),
        "cases_by_relation": dict(by_rel),
    }
