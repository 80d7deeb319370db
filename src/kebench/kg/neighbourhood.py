"""The 1-hop neighbourhood of linked entities, in both directions, batched with VALUES."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pandas as pd
from tqdm.auto import tqdm

from kebench.kg.amie_export import local_name
from kebench.kg.linking import batched
from kebench.kg.sparql import RDFS_LABEL, SparqlEndpoint, Term, iri_term
from kebench.schemas import KG_TRIPLES

logger = logging.getLogger(__name__)


def neighbourhood_query(
    entities: Sequence[str],
    excluded_predicates: Sequence[str],
    limit_per_entity: int,
    lang: str,
) -> str:
    """One query for the out- and in-edges of every entity, each capped at the limit.

    Each (entity, direction) is its own ordered sub-select with a LIMIT, so the cap is
    exact and the same on every endpoint; the union is one request.
    """
    excluded = ", ".join(iri_term(p) for p in excluded_predicates)
    predicate_filter = f"FILTER(?p NOT IN ({excluded}))" if excluded else ""
    blocks = []
    for iri in map(iri_term, entities):
        for direction, pattern in (("out", f"{iri} ?p ?x"), ("in", f"?x ?p {iri}")):
            blocks.append(
                f'{{ SELECT ?p ?x ("{direction}" AS ?dir) ({iri} AS ?e) WHERE {{ {pattern} . '
                f"{predicate_filter} FILTER(!isBlank(?x)) }} ORDER BY ?p ?x LIMIT {int(limit_per_entity)} }}"
            )
    label_filter = f'FILTER(lang(?{{v}}) = "" || langMatches(lang(?{{v}}), "{lang}"))'
    return (
        "SELECT ?e ?dir ?p ?x ?el ?xl WHERE { "
        + " UNION ".join(blocks)
        + f" OPTIONAL {{ ?e <{RDFS_LABEL}> ?el . {label_filter.format(v='el')} }}"
        + f" OPTIONAL {{ ?x <{RDFS_LABEL}> ?xl . {label_filter.format(v='xl')} }} }}"
    )


def _label(term: Term | None, iri: str) -> str:
    return term.value if term is not None else local_name(iri).replace("_", " ")


def _triple(row: dict[str, Term]) -> dict:
    entity, other = row["e"], row["x"]
    entity_label = _label(row.get("el"), entity.value)
    other_label = (
        other.value if other.is_literal else _label(row.get("xl"), other.value)
    )
    outgoing = row["dir"].value == "out"
    subject, subject_label = (
        (entity.value, entity_label) if outgoing else (other.value, other_label)
    )
    obj, obj_label = (other, other_label) if outgoing else (entity, entity_label)
    return {
        "s": subject,
        "p": row["p"].value,
        "o": obj.value,
        "o_is_literal": obj.is_literal,
        "o_lang": obj.lang or None,
        "s_label": subject_label,
        "p_local": local_name(row["p"].value),
        "o_label": obj_label,
    }


def fetch_neighbourhood(  # noqa: PLR0913 - query settings are keyword-only
    entities: Sequence[str],
    endpoint: SparqlEndpoint,
    *,
    excluded_predicates: Sequence[str],
    limit_per_entity: int,
    batch_size: int,
    lang: str = "en",
    hops: int = 1,
) -> pd.DataFrame:
    """``kg_triples`` for the ``hops``-hop neighbourhood of ``entities``.

    One hop is the paper's Algorithm 1. A second hop also fetches the edges of every
    entity the first reached, so the KG holds the evidence a consequence is checked
    against (the other alumni of a university one edited person attended).

    Raises:
        ValueError: when there are no entities or the endpoint returns no triple, so an
            empty KG never reaches the next pipeline.
    """
    entities = sorted(set(entities))
    if not entities:
        raise ValueError(
            f"no linked entity to query on {endpoint.name}: the KG would be empty"
        )
    rows: list[dict] = []
    queried: set[str] = set()
    frontier, n_queries = entities, 0
    for hop in range(1, hops + 1):
        batches = list(batched(frontier, batch_size))
        for batch in tqdm(batches, desc=f"hop {hop} neighbourhood", unit="batch"):
            query = neighbourhood_query(
                batch, excluded_predicates, limit_per_entity, lang
            )
            rows.extend(_triple(row) for row in endpoint.select(query))
        n_queries += len(batches)
        queried.update(frontier)
        reached = {r["s"] for r in rows} | {
            r["o"] for r in rows if not r["o_is_literal"]
        }
        frontier = sorted(reached - queried)
    if not rows:
        raise ValueError(
            f"{endpoint.name} returned no triple for the {len(entities)} linked entities"
        )
    triples = pd.DataFrame(rows).drop_duplicates(
        ["s", "p", "o", "o_is_literal", "o_lang"]
    )
    triples = triples.sort_values(["s", "p", "o"], ignore_index=True)
    logger.info(
        "%d triples within %d hops of %d entities (%.1f per entity) from %s in %d "
        "queries",
        len(triples),
        hops,
        len(entities),
        len(triples) / len(entities),
        endpoint.name,
        n_queries,
    )
    return KG_TRIPLES.validate(triples)
