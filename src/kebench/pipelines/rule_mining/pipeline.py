"""rule_mining pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines import namespaced
from kebench.pipelines.rule_mining.nodes import (
    filter_rules_for_qa,
    format_amie_rules,
    mine_kg_rules,
)


def create_pipeline(**kwargs) -> Pipeline:
    """kg_triples (AMIE form) -> rules (+ AMIE output) -> rules_for_qa."""
    return namespaced(
        "rule_mining",
        [
            Node(
                func=mine_kg_rules,
                inputs=["kg_triples_amie", "params:rule_mining"],
                outputs="rules",
                name="mine_kg_rules",
            ),
            Node(
                func=format_amie_rules,
                inputs="rules",
                outputs="rules_amie",
                name="format_amie_rules",
            ),
            Node(
                func=filter_rules_for_qa,
                inputs=["rules", "params:rule_mining.filter"],
                outputs=["rules_for_qa", "rule_filter_report"],
                name="filter_rules_for_qa",
            ),
        ],
    )
