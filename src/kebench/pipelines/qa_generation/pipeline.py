"""qa_generation pipeline definition."""

from kedro.pipeline import Node, Pipeline

from kebench.pipelines.qa_generation.nodes import (
    derive_consequences,
    merge_qa_reports,
    write_questions,
)


def create_pipeline(**kwargs) -> Pipeline:
    """edit_requests + rules_for_qa + kg_triples -> entailed_facts -> entailed_questions."""
    return Pipeline(
        [
            Node(
                func=derive_consequences,
                inputs=[
                    "edit_requests",
                    "rules_for_qa",
                    "kg_triples",
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
        ]
    )
