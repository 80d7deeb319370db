"""Nodes of kg_build: thin glue over ``kebench.kg``."""

from __future__ import annotations

import logging
import math
from typing import Any

import pandas as pd

from kebench.kg.aliases import AliasSettings, aliased_entities, fetch_aliases
from kebench.kg.amie_export import to_amie_frame
from kebench.kg.edit_cases import RawEditCases, RelationCatalog, parse_edit_cases
from kebench.kg.linking import link_mentions
from kebench.kg.mentions import (
    ENTITY_FIELDS,
    build_entity_ruler,
    extract_mentions,
    fetch_kg_labels,
)
from kebench.kg.neighbourhood import fetch_neighbourhood
from kebench.kg.sparql import SparqlEndpoint
from kebench.kg.vocabulary import (
    fetch_entity_types,
    fetch_kg_axioms,
    kg_entities,
    vocabulary_queries,
)
from kebench.schemas import EDIT_REQUESTS

logger = logging.getLogger(__name__)


def parse_edit_requests(
    raw_edit_cases: RawEditCases,
    relations: dict[str, Any],
    rippleedits_relations: dict[str, Any],
) -> pd.DataFrame:
    """Parse raw edit cases into ``edit_requests`` rows, without URIs yet (a
    RippleEdits file's with the phrases of RippleEdits' relation table)."""
    catalog = RelationCatalog.from_config(relations, rippleedits_relations)
    return parse_edit_cases(raw_edit_cases, catalog)


def find_mentions(
    parsed_edit_requests: pd.DataFrame,
    sparql_endpoint: SparqlEndpoint,
    params: dict[str, Any],
) -> pd.DataFrame:
    """Entity mentions: spaCy over prompts and questions, plus the dataset's entity fields."""
    labels = fetch_kg_labels(sparql_endpoint, params["kg_label_limit"], params["lang"])
    dataset_entities = (
        pd.concat([parsed_edit_requests[f] for f in ENTITY_FIELDS]).dropna().tolist()
    )
    nlp = build_entity_ruler(labels + dataset_entities, params["spacy_model"])
    return extract_mentions(parsed_edit_requests, nlp)


def link_entities(
    mentions: pd.DataFrame, sparql_endpoint: SparqlEndpoint, params: dict[str, Any]
) -> pd.DataFrame:
    """Link each mention to a KG IRI, recording how or why not."""
    return link_mentions(
        mentions,
        sparql_endpoint,
        resource_namespace=params["resource_namespace"],
        lang=params["lang"],
        batch_size=params["link_batch_size"],
    )


def attach_entity_uris(
    parsed_edit_requests: pd.DataFrame, entity_links: pd.DataFrame
) -> pd.DataFrame:
    """Fill subject_uri, target_true_uri and target_new_uri from the entity links."""
    uri_of = entity_links.set_index("mention")["uri"]
    edit_requests = parsed_edit_requests.copy()
    for field in ENTITY_FIELDS:
        edit_requests[f"{field}_uri"] = edit_requests[field].map(uri_of)
    return EDIT_REQUESTS.validate(edit_requests)


def query_neighbourhood(
    entity_links: pd.DataFrame, sparql_endpoint: SparqlEndpoint, params: dict[str, Any]
) -> pd.DataFrame:
    """``kg_triples``: the neighbourhood of every linked entity, both directions."""
    settings = params["neighbourhood"]
    return fetch_neighbourhood(
        entity_links["uri"].dropna().tolist(),
        sparql_endpoint,
        excluded_predicates=settings["excluded_predicates"],
        limit_per_entity=settings["limit_per_entity"],
        batch_size=settings["batch_size"],
        lang=params["lang"],
        hops=settings["hops"],
    )


def fetch_entity_aliases(
    edit_requests: pd.DataFrame,
    kg_triples: pd.DataFrame,
    sparql_endpoint: SparqlEndpoint,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``entity_aliases``: the KG's other names of every entity that can be an
    answer and of every edited subject."""
    return fetch_aliases(
        aliased_entities(kg_triples, edit_requests),
        sparql_endpoint,
        AliasSettings.from_params(params["aliases"], params["lang"]),
    )


def fetch_kg_vocabulary(sparql_endpoint: SparqlEndpoint) -> pd.DataFrame:
    """``kg_axioms``: the OWL and RDFS statements the KG makes about its own
    vocabulary (inverse, symmetric, sub-properties, domains, ...)."""
    return fetch_kg_axioms(sparql_endpoint)


def fetch_types(
    kg_triples: pd.DataFrame, sparql_endpoint: SparqlEndpoint, params: dict[str, Any]
) -> pd.DataFrame:
    """``entity_types``: the rdf:type classes of the KG's entities (domain and range
    checks of the deductive tier)."""
    return fetch_entity_types(
        kg_entities(kg_triples), sparql_endpoint, params["neighbourhood"]["batch_size"]
    )


def export_amie_triples(
    kg_triples: pd.DataFrame, params: dict[str, Any]
) -> pd.DataFrame:
    """The KG in AMIE's input form: local names, literals only if configured."""
    return to_amie_frame(kg_triples, params["amie_export"]["include_literals"])


def select_rdf_columns(kg_triples: pd.DataFrame) -> pd.DataFrame:
    """The columns that make up the RDF triples, for the N-Triples export."""
    return kg_triples[["s", "p", "o", "o_is_literal", "o_lang"]]


def report_kg_coverage(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    edit_requests: pd.DataFrame,
    entity_links: pd.DataFrame,
    kg_triples: pd.DataFrame,
    entity_aliases: pd.DataFrame,
    entity_types: pd.DataFrame,
    kg_axioms: pd.DataFrame,
    sparql_endpoint: SparqlEndpoint,
    params: dict[str, Any],
) -> dict[str, Any]:
    """Coverage of the built KG: linked subjects, triples per entity, the aliases of
    answers and edited subjects, typed entities and the KG's own axioms, and the
    queries sent (building the KG, fetching the aliases, the types and axioms)."""
    linked = entity_links.dropna(subset=["uri"])
    n_entities = linked["uri"].nunique()
    subjects = edit_requests["subject"].drop_duplicates()
    subjects_linked = edit_requests.drop_duplicates("subject")["subject_uri"].notna()
    aliased = aliased_entities(kg_triples, edit_requests)
    alias_queries = math.ceil(len(aliased) / params["aliases"]["batch_size"])
    subject_uris = set(edit_requests["subject_uri"].dropna())
    # names other than the entity's own labels: redirects' and sameAs resources'
    other_names = set(entity_aliases.loc[entity_aliases["via"] != "label", "uri"])
    entities = kg_entities(kg_triples)
    type_and_axiom_queries = vocabulary_queries(
        len(entities), params["neighbourhood"]["batch_size"]
    )
    build_queries = (
        sparql_endpoint.queries_sent - alias_queries - type_and_axiom_queries
    )
    report = {
        "endpoint": sparql_endpoint.name,
        "edit_requests": len(edit_requests),
        "distinct_subjects": len(subjects),
        "subjects_linked_pct": round(100.0 * float(subjects_linked.mean()), 2),
        "cases_with_linked_subject_pct": round(
            100.0 * float(edit_requests["subject_uri"].notna().mean()), 2
        ),
        "mentions": len(entity_links),
        "mentions_by_link_method": entity_links["method"].value_counts().to_dict(),
        "linked_entities": int(n_entities),
        "triples": len(kg_triples),
        "triples_per_entity": round(len(kg_triples) / n_entities, 2),
        "relations": int(kg_triples["p"].nunique()),
        "aliased_entities": len(aliased),
        "aliased_entities_with_aliases": int(entity_aliases["uri"].nunique()),
        "edited_subjects_with_other_names": len(subject_uris & other_names),
        "aliases_by_kind": entity_aliases["via"].value_counts().to_dict(),
        "typed_entities_pct": round(
            100.0 * len(entities & set(entity_types["uri"])) / len(entities), 2
        ),
        "kg_axioms": len(kg_axioms),
        "sparql_queries": sparql_endpoint.queries_sent,
        "alias_queries": alias_queries,
        "type_and_axiom_queries": type_and_axiom_queries,
        # the KG's own queries (linking, neighbourhood) per linked entity
        "queries_per_linked_entity": round(build_queries / n_entities, 4),
    }
    logger.info("KG coverage: %s", report)
    return report
