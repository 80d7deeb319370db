"""The vocabulary's logic: which predicates state facts, and what its axioms entail.

A perfect reasoner accepts an edit, the world's unchanged facts and the logic of the
vocabulary. That logic comes from two real sources, read into one ``axioms`` table
(``kebench.schemas.AXIOMS``):

- the OWL and RDFS statements of the KG itself (``owl:inverseOf``,
  ``owl:SymmetricProperty``, ``owl:TransitiveProperty``, ``owl:FunctionalProperty``,
  ``rdfs:subPropertyOf``, ``owl:equivalentProperty``, ``rdfs:domain``, ``rdfs:range``,
  ``rdfs:subClassOf``), queried from its endpoint (``kg_axioms_query``);
- a table shipped in conf for the relations of the shipped sources (DBpedia ontology
  names and Wikidata ids; ``conf/base/vocabulary/axioms.csv``), read by
  ``read_axiom_table``, which names the file and line of a malformed row.

The table's ``factual`` rows are an allow-list: the object properties whose triples
state a fact about the world. Links between pages (``rdfs:seeAlso``,
``wikiPageWikiLink``), names (``foaf:name``, ``dbp:name``), categories
(``dct:subject``), images, ``owl:sameAs`` and ``rdf:type`` state none, and no
consequence may rest on them. A KG's ``owl:ObjectProperty`` declarations are not read
as factual: DBpedia declares link properties that way too.
"""

from __future__ import annotations

import csv
import io
import logging
import math
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kebench.kg.amie_export import local_name
from kebench.kg.linking import batched
from kebench.kg.sparql import SparqlEndpoint, iri_term, values_block
from kebench.schemas import AXIOM_KINDS, AXIOMS, ENTITY_TYPES

logger = logging.getLogger(__name__)

OWL = "http://www.w3.org/2002/07/owl#"
RDFS = "http://www.w3.org/2000/01/rdf-schema#"
OWL_THING = OWL + "Thing"
PREFIXES = {
    "dbo": "http://dbpedia.org/ontology/",
    "dbp": "http://dbpedia.org/property/",
    "wdt": "http://www.wikidata.org/prop/direct/",
    "owl": OWL,
    "rdfs": RDFS,
}
# axioms that hold of one relation alone; the others link it to a relation or class
CHARACTERISTICS = ("factual", "symmetric", "transitive", "functional")
TABLE_COLUMNS = ["relation", "axiom", "value", "source"]


class AxiomError(ValueError):
    """A malformed row of an axiom table, named by file and line."""


def expand_term(text: str) -> str:
    """A prefixed name (``dbo:spouse``) or ``<IRI>`` as a full IRI.

    Raises:
        ValueError: for any other form, or an unknown prefix.
    """
    text = text.strip()
    if text.startswith("<") and text.endswith(">") and len(text) > 2:  # noqa: PLR2004
        iri = text[1:-1]
        if any(c in iri for c in ' <>"{}|\\^`'):
            raise ValueError(f"{text!r} is not a valid IRI")
        return iri
    prefix, colon, local = text.partition(":")
    if not colon or not local or prefix not in PREFIXES:
        raise ValueError(
            f"{text!r} is neither <IRI> nor a prefixed name with one of "
            f"{sorted(PREFIXES)}"
        )
    return PREFIXES[prefix] + local


def read_axiom_table(text: str, origin: str) -> pd.DataFrame:
    """The ``AXIOMS`` rows of a shipped axiom table (CSV, header
    ``relation,axiom,value,source``; lines starting with ``#`` are comments).

    Raises:
        AxiomError: naming ``origin`` and the line of the first malformed row.
    """
    lines = [
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    ]
    if not lines:
        raise AxiomError(f"{origin}: no header line {','.join(TABLE_COLUMNS)!r}")
    header_line, header = lines[0]
    if [c.strip() for c in next(csv.reader([header]))] != TABLE_COLUMNS:
        raise AxiomError(
            f"{origin}:{header_line}: header must be {','.join(TABLE_COLUMNS)!r}, "
            f"got {header!r}"
        )
    rows = []
    for number, line in lines[1:]:
        where = f"{origin}:{number}"
        fields = next(csv.reader(io.StringIO(line)))
        if len(fields) != len(TABLE_COLUMNS):
            raise AxiomError(
                f"{where}: expected {len(TABLE_COLUMNS)} fields "
                f"({','.join(TABLE_COLUMNS)}), got {len(fields)}: {line!r}"
            )
        relation, axiom, value, source = (f.strip() for f in fields)
        if axiom not in AXIOM_KINDS:
            raise AxiomError(
                f"{where}: unknown axiom {axiom!r}; use one of {list(AXIOM_KINDS)}"
            )
        if (axiom in CHARACTERISTICS) != (not value):
            needs = "no value" if axiom in CHARACTERISTICS else "a value"
            raise AxiomError(f"{where}: axiom {axiom!r} takes {needs}: {line!r}")
        try:
            relation_iri = expand_term(relation)
            value_iri = expand_term(value) if value else None
        except ValueError as err:
            raise AxiomError(f"{where}: {err}") from err
        rows.append(
            {
                "relation": relation_iri,
                "axiom": axiom,
                "value": value_iri,
                "source": source,
                "origin": where,
            }
        )
    return AXIOMS.validate(pd.DataFrame(rows, columns=list(AXIOMS.columns)))


# What each OWL/RDFS statement of a KG says, as (axiom, its predicate, its object).
KG_STATEMENTS = (
    ("inverse_of", OWL + "inverseOf", None),
    ("sub_property_of", RDFS + "subPropertyOf", None),
    ("equivalent_property", OWL + "equivalentProperty", None),
    ("domain", RDFS + "domain", None),
    ("range", RDFS + "range", None),
    ("sub_class_of", RDFS + "subClassOf", None),
    ("symmetric", "http://www.w3.org/1999/02/22-rdf-syntax-ns#type", OWL + "SymmetricProperty"),
    ("transitive", "http://www.w3.org/1999/02/22-rdf-syntax-ns#type", OWL + "TransitiveProperty"),
    ("functional", "http://www.w3.org/1999/02/22-rdf-syntax-ns#type", OWL + "FunctionalProperty"),
)  # fmt: skip


def kg_axioms_query() -> str:
    """One SELECT of ``?relation ?axiom ?value`` over the KG's own OWL/RDFS
    statements (``KG_STATEMENTS``); values that are not IRIs (blank-node class
    expressions) are left out."""
    blocks = []
    for axiom, predicate, obj in KG_STATEMENTS:
        if obj is None:
            blocks.append(
                f"{{ ?relation <{predicate}> ?value . FILTER(isIRI(?value)) "
                f'BIND("{axiom}" AS ?axiom) }}'
            )
        else:
            blocks.append(
                f'{{ ?relation <{predicate}> <{obj}> . BIND("{axiom}" AS ?axiom) }}'
            )
    return (
        "SELECT DISTINCT ?relation ?axiom ?value WHERE { "
        + " UNION ".join(blocks)
        + " FILTER(isIRI(?relation)) }"
    )


def fetch_kg_axioms(endpoint: SparqlEndpoint) -> pd.DataFrame:
    """The ``AXIOMS`` rows the KG states about its own vocabulary."""
    rows = [
        {
            "relation": row["relation"].value,
            "axiom": row["axiom"].value,
            "value": row["value"].value if "value" in row else None,
            "source": "the KG's own OWL/RDFS statements",
            "origin": endpoint.name,
        }
        for row in endpoint.select(kg_axioms_query())
    ]
    table = pd.DataFrame(rows, columns=list(AXIOMS.columns))
    table = table.sort_values(["relation", "axiom", "value"], ignore_index=True)
    logger.info("%d vocabulary axioms stated in the KG (%s)", len(table), endpoint.name)
    return AXIOMS.validate(table)


Step = tuple[str, bool]  # (predicate IRI, walked backward)


@dataclass
class Vocabulary:
    """The axioms of a vocabulary, closed under their logic (see the module docstring).

    Attributes:
        factual: predicates whose triples state facts (the allow-list).
    """

    factual: frozenset[str] = frozenset()
    symmetric: frozenset[str] = frozenset()
    transitive: frozenset[str] = frozenset()
    functional: frozenset[str] = frozenset()
    inverses: Mapping[str, frozenset[str]] = field(default_factory=dict)
    super_properties: Mapping[str, frozenset[str]] = field(default_factory=dict)
    domains: Mapping[str, frozenset[str]] = field(default_factory=dict)
    ranges: Mapping[str, frozenset[str]] = field(default_factory=dict)
    super_classes: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def from_axioms(
        cls, axioms: pd.DataFrame, factual: Iterable[str] = ()
    ) -> Vocabulary:
        """From ``AXIOMS`` rows (any number of tables, concatenated) and further
        factual predicates (the edit relations' predicates)."""
        by_kind: dict[str, list[tuple[str, str | None]]] = defaultdict(list)
        for relation, axiom, value in zip(
            axioms["relation"], axioms["axiom"], axioms["value"], strict=True
        ):
            by_kind[axiom].append((relation, value if isinstance(value, str) else None))

        def links(*kinds: str, both_ways: bool = False) -> dict[str, frozenset[str]]:
            linked: dict[str, set[str]] = defaultdict(set)
            for kind in kinds:
                for relation, value in by_kind[kind]:
                    linked[relation].add(value)
                    if both_ways:
                        linked[value].add(relation)
            return {k: frozenset(v) for k, v in linked.items()}

        supers: dict[str, set[str]] = defaultdict(set)
        for relation, value in by_kind["sub_property_of"]:
            supers[relation].add(value)
        for relation, value in by_kind["equivalent_property"]:
            supers[relation].add(value)
            supers[value].add(relation)
        return cls(
            factual=frozenset({r for r, _ in by_kind["factual"]} | set(factual)),
            symmetric=frozenset(r for r, _ in by_kind["symmetric"]),
            transitive=frozenset(r for r, _ in by_kind["transitive"]),
            functional=frozenset(r for r, _ in by_kind["functional"]),
            inverses=links("inverse_of", both_ways=True),
            super_properties={k: frozenset(v) for k, v in supers.items()},
            domains=links("domain"),
            ranges=links("range"),
            super_classes=_closure(links("sub_class_of")),
        )

    def is_factual(self, predicate: str) -> bool:
        return predicate in self.factual

    def implying(self, predicate: str) -> frozenset[Step]:
        """Every (q, flipped) such that a stored fact q(x, y) (q(y, x) when flipped)
        implies ``predicate``(x, y): the predicate itself, its sub- and equivalent
        properties, its inverses (flipped), itself flipped when symmetric, and so on
        through each other's axioms."""
        found = {(predicate, False)}
        queue = deque(found)
        while queue:
            current, flipped = queue.popleft()
            nexts = [(sub, flipped) for sub in self._sub_properties(current)]
            nexts += [(inv, not flipped) for inv in self.inverses.get(current, ())]
            if current in self.symmetric:
                nexts.append((current, not flipped))
            for item in nexts:
                if item not in found:
                    found.add(item)
                    queue.append(item)
        return frozenset(found)

    def _sub_properties(self, predicate: str) -> set[str]:
        return {p for p, supers in self.super_properties.items() if predicate in supers}

    def entails(self, premise: str, flipped: bool, conclusion: str) -> bool:
        """Whether ``premise``(x, y) (``premise``(y, x) when ``flipped``) entails
        ``conclusion``(x, y) under the axioms alone."""
        return (premise, flipped) in self.implying(conclusion)

    def conforms(self, types: Iterable[str], wanted: Iterable[str]) -> bool:
        """Whether an entity of ``types`` may be of every class in ``wanted`` (a
        relation's domain or range). Open world: an entity with no type, or with a
        type the class hierarchy does not know, conforms."""
        types, wanted = set(types), set(wanted)
        if not types or not wanted:
            return True
        known = [t for t in types if t in self.super_classes or t == OWL_THING]
        if len(known) < len(types):
            return True
        reached = set(types).union(*(self.super_classes.get(t, ()) for t in types))
        return wanted <= reached | {OWL_THING}

    def compatible(self, first: Iterable[str], second: Iterable[str]) -> bool:
        """Whether one entity may be of a class of ``first`` and of one of
        ``second``: the two are the same, or one lies below the other. Open world: no
        class, or a class the hierarchy does not know, is compatible with any."""
        first, second = set(first), set(second)
        if not first or not second:
            return True
        if any(c not in self.super_classes for c in first | second):
            return True
        return any(
            a == b or b in self.super_classes[a] or a in self.super_classes[b]
            for a in first
            for b in second
        )

    def functional_violations(self, triples: pd.DataFrame) -> dict[str, int]:
        """Per functional predicate, the subjects the KG gives several objects."""
        stated = triples[triples["p"].isin(self.functional)]
        objects = stated.drop_duplicates(["s", "p", "o"]).groupby(["p", "s"]).size()
        several = objects[objects > 1]
        return {str(p): int(n) for p, n in several.groupby(level="p").size().items()}


def edit_relations(
    relation_id: str, relations: Mapping[str, Mapping[str, Any]]
) -> list[str]:
    """Local names of the KG predicates that state a relation (P-id)."""
    return [
        local_name(iri) for iri in relations.get(relation_id, {}).get("dbpedia", [])
    ]


def join_axioms(tables: Iterable[pd.DataFrame]) -> pd.DataFrame:
    """One ``AXIOMS`` table of several (a row stated twice is kept once, with the
    first table's origin)."""
    joined = pd.concat(list(tables), ignore_index=True)
    joined = joined.drop_duplicates(["relation", "axiom", "value"], ignore_index=True)
    return AXIOMS.validate(joined)


def vocabulary_of(
    axioms: pd.DataFrame, relations: Mapping[str, Mapping[str, Iterable[str]]]
) -> Vocabulary:
    """The ``Vocabulary`` of ``axioms``, with the predicates the edit relations map
    to (``relations``: P-id -> ``dbpedia`` predicates) taken as factual."""
    return Vocabulary.from_axioms(
        axioms,
        factual=(iri for spec in relations.values() for iri in spec.get("dbpedia", [])),
    )


def _closure(direct: Mapping[str, frozenset[str]]) -> dict[str, frozenset[str]]:
    """Each key's transitive closure under ``direct`` (superclasses of superclasses)."""
    closed = {}
    for start in direct:
        seen: set[str] = set()
        queue = deque(direct[start])
        while queue:
            current = queue.popleft()
            if current not in seen:
                seen.add(current)
                queue.extend(direct.get(current, ()))
        closed[start] = frozenset(seen)
    return closed


def warn_contradictions(
    vocabulary: Vocabulary, triples: pd.DataFrame
) -> dict[str, int]:
    """Log a warning, with counts, for each functional axiom the KG contradicts (a
    subject with two objects); returns the counts for the report."""
    violations = vocabulary.functional_violations(triples)
    for predicate, subjects in sorted(violations.items()):
        logger.warning(
            "axiom %s functional: the KG gives %d subjects several objects; a "
            "consequence through it is probed only where it has one value",
            predicate,
            subjects,
        )
    return violations


RDF_TYPE = "http://www.w3.org/1999/02/22-rdf-syntax-ns#type"


def entity_types_query(entities: Iterable[str]) -> str:
    """One SELECT of ``?e ?type`` (the rdf:type classes, IRIs only) of ``entities``."""
    return (
        "SELECT DISTINCT ?e ?type WHERE { "
        + values_block("e", (iri_term(e) for e in entities))
        + f" ?e {iri_term(RDF_TYPE)} ?type . FILTER(isIRI(?type)) }}"
    )


def kg_entities(kg_triples: pd.DataFrame) -> set[str]:
    """The KG's entities: its subjects and its objects that are no literal."""
    return set(kg_triples["s"]) | set(kg_triples.loc[~kg_triples["o_is_literal"], "o"])


def vocabulary_queries(n_entities: int, batch_size: int) -> int:
    """The queries ``fetch_kg_axioms`` (one) and ``fetch_entity_types`` (one per
    batch of ``n_entities``) send."""
    return 1 + math.ceil(n_entities / batch_size)


def fetch_entity_types(
    entities: Iterable[str], endpoint: SparqlEndpoint, batch_size: int
) -> pd.DataFrame:
    """``entity_types``: the classes the endpoint gives ``entities`` (rdf:type)."""
    entities = sorted(set(entities))
    rows = [
        {"uri": row["e"].value, "type": row["type"].value}
        for batch in batched(entities, batch_size)
        for row in endpoint.select(entity_types_query(batch))
    ]
    table = pd.DataFrame(rows, columns=list(ENTITY_TYPES.columns))
    logger.info(
        "types of %d of %d entities from %s",
        table["uri"].nunique(),
        len(entities),
        endpoint.name,
    )
    return ENTITY_TYPES.validate(
        table.drop_duplicates().sort_values(["uri", "type"], ignore_index=True)
    )
