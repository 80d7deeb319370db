"""qa_generation pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines import namespaced
from kebench.pipelines.qa_generation.nodes import (
    derive_consequences,
    merge_axioms,
    merge_qa_reports,
    write_questions,
)


def create_pipeline(**kwargs) -> Pipeline:
    """edit_requests + rules_for_qa + kg_triples + the vocabulary's axioms ->
    entailed_facts (deductive and inductive tiers) -> entailed_questions."""
    return namespaced(
        "qa_generation",
        [
            Node(
                func=merge_axioms,
                inputs=["vocabulary_axioms", "kg_axioms"],
                outputs="axioms",
                name="merge_axioms",
            ),
            Node(
                func=derive_consequences,
                inputs=[
                    "edit_requests",
                    "rules_for_qa",
                    "kg_triples",
                    "axioms",
                    "entity_aliases",
                    "entity_types",
                    "params:relations",
                    "params:qa_generation",
                ],
                outputs=["entailed_facts", "consequence_report"],
                name="derive_consequences",
            ),
            Node(
                func=write_questions,
                inputs=[
                    "entailed_facts",
                    "edit_requests",
                    "rules_for_qa",
                    "question_llm",
                    "params:relations",
                    "params:qa_generation",
                ],
                outputs=["entailed_questions", "question_report"],
                name="write_questions",
            ),
            Node(
                func=merge_qa_reports,
                inputs=["consequence_report", "question_report"],
                outputs="qa_report",
                name="merge_qa_reports",
            ),
        ],
    )
