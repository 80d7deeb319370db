"""An independent checker of the deductive tier, written apart from the code it checks.

kebench derives deductive consequences with pyoxigraph SPARQL property paths over an
edited store (``kebench.qa.deduction``). This checker reads the same inputs with plain
Python (dicts of triples, the ``csv`` module for the axiom table) and verifies, for
every probed deductive row of ``entailed_facts``:

- its ``relation`` is a property path of KG local names, ``/``-joined, each
  optionally prefixed by ``^``, one step per ``path_uri`` triple;
- walking the path from ``subject_uri`` over those triples, forward along a triple or
  backward against it (``^``), reaches ``answer_new_uri``;
- each triple is a KG triple or the edit's new triple, and the edit's new triple is
  one of them (``subject_alias`` rows: the edit's triple alone);
- no triple states the value the edit replaced, nor its symmetric twin or inverse;
- every prefix of the path has exactly one value in the edited world, where a step
  of p also follows p's equivalent and sub-properties, and p backward when the axioms
  make it symmetric or name an inverse;
- ``fact_subject_uri`` and ``fact_relation`` are the last triple's subject and
  predicate;
- no triple of any row of either tier uses a predicate that states no fact.
"""

from __future__ import annotations

import csv
import json
import re
from collections import defaultdict
from pathlib import Path

import pandas as pd

PREFIX = {
    "dbo": "http://dbpedia.org/ontology/",
    "dbp": "http://dbpedia.org/property/",
    "wdt": "http://www.wikidata.org/prop/direct/",
}
# predicates no consequence may rest on, whatever the allow-list says
NON_FACTUAL = re.compile(
    r"(seeAlso|wikiPage|sameAs|#type$|/subject$|hypernym|depiction|thumbnail|/voy$|"
    r"/(name|commonName|conventionalLongName|conventionalShortName|officialName|"
    r"nativeName|birthName|fullName|otherName|alternativeName|shortName)$)"
)
STEP = re.compile(r"^\^?[^/^\s]+$")


def _short(iri: str) -> str:
    return re.split(r"[/#]", iri)[-1]


def read_axioms(path: Path) -> dict[str, set[tuple[str, str]]]:
    """Axiom rows of the table, by kind: (relation IRI, value IRI or "")."""
    rows = (
        line
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    )
    axioms: dict[str, set[tuple[str, str]]] = defaultdict(set)

    def full(term: str) -> str:
        if term.startswith("<"):
            return term[1:-1]
        prefix, _, local = term.partition(":")
        return PREFIX.get(prefix, prefix + ":") + local if local else ""

    for row in csv.DictReader(rows):
        axioms[row["axiom"]].add((full(row["relation"]), full(row["value"])))
    return axioms


class Checker:
    """Checks ``entailed_facts`` against the KG, the edits and the axiom table."""

    def __init__(
        self,
        kg_triples: pd.DataFrame,
        edit_requests: pd.DataFrame,
        axioms_csv: Path,
        relations: dict,
    ) -> None:
        self.triples = set(zip(kg_triples["s"], kg_triples["p"], kg_triples["o"]))
        self.edits = edit_requests.set_index("case_id")
        self.relations = relations
        axioms = read_axioms(axioms_csv)
        self.factual = {r for r, _ in axioms["factual"]} | {
            iri for spec in relations.values() for iri in spec.get("dbpedia", [])
        }
        # DBpedia's disambiguation pages name no one entity: no consequence names one
        self.pages = {
            s
            for s, p, _ in self.triples
            if p == "http://dbpedia.org/ontology/wikiPageDisambiguates"
        }
        # the world a consequence is judged in holds the facts only
        self.facts = {t for t in self.triples if t[1] in self.factual}
        self.symmetric = {r for r, _ in axioms["symmetric"]}
        self.inverse = defaultdict(set)
        for r, v in axioms["inverse_of"]:
            self.inverse[r].add(v)
            self.inverse[v].add(r)
        self.same = defaultdict(set)  # equivalent or sub-property: states p too
        for r, v in axioms["equivalent_property"]:
            self.same[r].add(v)
            self.same[v].add(r)
        for r, v in axioms["sub_property_of"]:
            self.same[v].add(r)

    def _stating(self, p: str) -> set[tuple[str, bool]]:
        """(q, backward) whose stored fact states p: a naive fixpoint."""
        found = {(p, False)}
        while True:
            more = set()
            for q, back in found:
                more |= {(x, back) for x in self.same[q]}
                more |= {(x, not back) for x in self.inverse[q]}
                if q in self.symmetric:
                    more.add((q, not back))
            if more <= found:
                return found
            found |= more

    def _edit_predicates(self, edit: pd.Series) -> set[str]:
        listed = set(self.relations.get(edit["relation_id"], {}).get("dbpedia", []))
        return listed & self.factual

    @staticmethod
    def _target(edit: pd.Series, side: str) -> str:
        uri = edit[f"{side}_uri"]
        return uri if isinstance(uri, str) else edit[side]

    def _world(self, edit: pd.Series) -> set[tuple[str, str, str]]:
        """The edited world: the KG without the replaced value (and every triple
        stating it), with the new one."""
        subject = edit["subject_uri"]
        old, new = self._target(edit, "target_true"), self._target(edit, "target_new")
        world = set(self.facts)
        for p in self._edit_predicates(edit):
            for q, back in self._stating(p):
                world.discard((old, q, subject) if back else (subject, q, old))
            world.add((subject, p, new))
        return world

    def _values(
        self, world: set[tuple[str, str, str]], start: str, steps: list[str]
    ) -> set[str]:
        nodes = {start}
        out, into = defaultdict(set), defaultdict(set)
        for s, p, o in world:
            out[(s, p)].add(o)
            into[(o, p)].add(s)
        for step in steps:
            back = step.startswith("^")
            name = step.lstrip("^")
            predicates = {p for _, p, _ in world if _short(p) == name}
            reached = set()
            for node in nodes:
                for p in predicates:
                    for q, flipped in self._stating(p):
                        forward = back == flipped
                        reached |= (out if forward else into)[(node, q)]
            nodes = reached
        return nodes

    def problems(self, entailed_facts: pd.DataFrame) -> list[str]:
        """Every violation found, one line each (empty: the table passes)."""
        found = []
        for row in entailed_facts.to_dict("records"):
            for s, p, o in json.loads(row["path_uri"]):
                if p not in self.factual or NON_FACTUAL.search(p):
                    found.append(f"{row['fact_id']}: non-factual predicate {p}")
                if {s, o} & self.pages:
                    found.append(f"{row['fact_id']}: names a disambiguation page")
        deductive = entailed_facts[
            (entailed_facts["tier"] == "deductive")
            & (entailed_facts["status"] == "entailed")
        ]
        worlds: dict[str, set] = {}
        for row in deductive.to_dict("records"):
            found += self._check(row, worlds)
        return found

    def _check(self, row: dict, worlds: dict) -> list[str]:  # noqa: C901, PLR0912
        name = row["fact_id"]
        edit = self.edits.loc[row["case_id"]]
        steps = row["relation"].split("/")
        path = [tuple(t) for t in json.loads(row["path_uri"])]
        if len(steps) != len(path) or not all(STEP.match(s) for s in steps):
            return [f"{name}: path {row['relation']!r} does not match its triples"]
        subject = edit["subject_uri"]
        old, new = self._target(edit, "target_true"), self._target(edit, "target_new")
        new_triples = {(subject, p, new) for p in self._edit_predicates(edit)}
        problems = []
        node = row["subject_uri"]
        for step, (s, p, o) in zip(steps, path, strict=True):
            if _short(p) != step.lstrip("^"):
                problems.append(f"{name}: step {step} walks {p}")
            if step.startswith("^"):
                if o != node:
                    problems.append(f"{name}: ^{_short(p)} does not start at {node}")
                node = s
            else:
                if s != node:
                    problems.append(f"{name}: {_short(p)} does not start at {node}")
                node = o
            if (s, p, o) not in self.triples and (s, p, o) not in new_triples:
                problems.append(f"{name}: {(s, p, o)} is no KG triple nor the edit")
            for q in self._edit_predicates(edit):
                for stated, back in self._stating(q):
                    replaced = (
                        (old, stated, subject) if back else (subject, stated, old)
                    )
                    if (s, p, o) == replaced:
                        problems.append(f"{name}: rests on the replaced {replaced}")
        if node != row["answer_new_uri"]:
            problems.append(f"{name}: the walk ends at {node}, not the answer")
        if not new_triples & set(path):
            problems.append(f"{name}: does not use the edit's new triple")
        if row["kind"] == "subject_alias" and len(path) != 1:
            problems.append(f"{name}: an alias row walks the edit's triple alone")
        if (row["fact_subject_uri"], row["fact_relation"]) != (
            path[-1][0],
            _short(path[-1][1]),
        ):
            problems.append(f"{name}: fact key is not the last triple's")
        world = worlds.setdefault(row["case_id"], self._world(edit))
        for length in range(1, len(steps) + 1):
            values = self._values(world, row["subject_uri"], steps[:length])
            if len(values) != 1:
                problems.append(
                    f"{name}: {'/'.join(steps[:length])} has {len(values)} values"
                )
        return problems
