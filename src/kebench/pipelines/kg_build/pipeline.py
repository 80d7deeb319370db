"""kg_build pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines import namespaced
from kebench.pipelines.kg_build.nodes import (
    attach_entity_uris,
    export_amie_triples,
    fetch_entity_aliases,
    fetch_kg_vocabulary,
    fetch_types,
    find_mentions,
    link_entities,
    parse_edit_requests,
    query_neighbourhood,
    report_kg_coverage,
    select_rdf_columns,
)


def create_pipeline(**kwargs) -> Pipeline:
    """Edit cases -> edit_requests, entity_links, kg_triples (+ AMIE TSV,
    N-Triples), entity_aliases, entity_types and the KG's own axioms."""
    return namespaced(
        "kg_build",
        [
            Node(
                func=parse_edit_requests,
                inputs=[
                    "raw_edit_cases",
                    "params:relations",
                    "params:rippleedits_relations",
                ],
                outputs="parsed_edit_requests",
                name="parse_edit_requests",
            ),
            Node(
                func=find_mentions,
                inputs=["parsed_edit_requests", "sparql_endpoint", "params:kg_build"],
                outputs="entity_mentions",
                name="find_mentions",
            ),
            Node(
                func=link_entities,
                inputs=["entity_mentions", "sparql_endpoint", "params:kg_build"],
                outputs="entity_links",
                name="link_entities",
            ),
            Node(
                func=attach_entity_uris,
                inputs=["parsed_edit_requests", "entity_links"],
                outputs="edit_requests",
                name="attach_entity_uris",
            ),
            Node(
                func=query_neighbourhood,
                inputs=["entity_links", "sparql_endpoint", "params:kg_build"],
                outputs="kg_triples",
                name="query_neighbourhood",
            ),
            Node(
                func=fetch_entity_aliases,
                inputs=[
                    "edit_requests",
                    "kg_triples",
                    "sparql_endpoint",
                    "params:kg_build",
                ],
                outputs="entity_aliases",
                name="fetch_entity_aliases",
            ),
            Node(
                func=fetch_kg_vocabulary,
                inputs="sparql_endpoint",
                outputs="kg_axioms",
                name="fetch_kg_vocabulary",
            ),
            Node(
                func=fetch_types,
                inputs=["kg_triples", "sparql_endpoint", "params:kg_build"],
                outputs="entity_types",
                name="fetch_types",
            ),
            Node(
                func=export_amie_triples,
                inputs=["kg_triples", "params:kg_build"],
                outputs="kg_triples_amie",
                name="export_amie_triples",
            ),
            Node(
                func=select_rdf_columns,
                inputs="kg_triples",
                outputs="kg_triples_rdf",
                name="select_rdf_columns",
            ),
            Node(
                func=report_kg_coverage,
                inputs=[
                    "edit_requests",
                    "entity_links",
                    "kg_triples",
                    "entity_aliases",
                    "entity_types",
                    "kg_axioms",
                    "sparql_endpoint",
                    "params:kg_build",
                ],
                outputs="kg_coverage",
                name="report_kg_coverage",
            ),
        ],
    )
