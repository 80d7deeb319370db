"""risk_unification pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines import namespaced
from kebench.pipelines.risk_unification.nodes import (
    collect_counterfact_prompts,
    collect_dataset_probes,
    collect_edit_probes,
    collect_entailed_probes,
    collect_injection_probes,
    collect_premise_probes,
    read_dataset_probes,
    sample_locality_probes,
    sample_relation_specificity_probes,
    summarise_probes,
    unify_probe_table,
)


def create_pipeline(**kwargs) -> Pipeline:
    """All test sources -> probes (+ a summary of counts)."""
    return namespaced(
        "risk_unification",
        [
            Node(
                func=collect_edit_probes,
                inputs=[
                    "edit_requests",
                    "params:relations",
                    "params:risk_unification",
                ],
                outputs="edit_probes",
                name="collect_edit_probes",
            ),
            Node(
                func=collect_entailed_probes,
                inputs=["entailed_questions", "edit_requests", "entailed_facts"],
                outputs="entailed_probes",
                name="collect_entailed_probes",
            ),
            Node(
                func=read_dataset_probes,
                inputs=[
                    "raw_edit_cases",
                    "params:relations",
                    "params:rippleedits_relations",
                ],
                outputs="raw_dataset_probes",
                name="read_dataset_probes",
            ),
            Node(
                func=collect_dataset_probes,
                inputs=[
                    "raw_dataset_probes",
                    "edit_requests",
                    "params:risk_unification",
                ],
                outputs="dataset_probes",
                name="collect_dataset_probes",
            ),
            Node(
                func=collect_counterfact_prompts,
                inputs=["raw_edit_cases", "edit_requests"],
                outputs="counterfact_prompts",
                name="collect_counterfact_prompts",
            ),
            Node(
                func=sample_locality_probes,
                inputs=[
                    "edit_requests",
                    "kg_triples",
                    "params:qa_generation.relation_templates",
                    "params:risk_unification",
                ],
                outputs="locality_probes",
                name="sample_locality_probes",
            ),
            Node(
                func=sample_relation_specificity_probes,
                inputs=[
                    "edit_requests",
                    "kg_triples",
                    "rules_for_qa",
                    "axioms",
                    "params:relations",
                    "params:qa_generation.relation_templates",
                    "params:risk_unification",
                ],
                outputs="relation_specificity_probes",
                name="sample_relation_specificity_probes",
            ),
            Node(
                func=collect_injection_probes,
                inputs=["injection_sets", "params:risk_unification"],
                outputs="injection_probes",
                name="collect_injection_probes",
            ),
            Node(
                func=unify_probe_table,
                inputs=[
                    "edit_probes",
                    "entailed_probes",
                    "dataset_probes",
                    "locality_probes",
                    "relation_specificity_probes",
                    "injection_probes",
                    "entity_aliases",
                    "kg_triples",
                    "edit_requests",
                ],
                outputs="probes",
                name="unify_probe_table",
            ),
            Node(
                func=collect_premise_probes,
                inputs=[
                    "probes",
                    "raw_dataset_probes",
                    "entailed_questions",
                    "entailed_facts",
                    "edit_requests",
                    "kg_triples",
                    "entity_aliases",
                    "params:relations",
                    "params:qa_generation",
                ],
                outputs="premise_probes",
                name="collect_premise_probes",
            ),
            Node(
                func=summarise_probes,
                inputs="probes",
                outputs="probe_summary",
                name="summarise_probes",
            ),
        ],
    )
