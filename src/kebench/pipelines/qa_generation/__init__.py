"""qa_generation: the consequences of each edit under the mined rules, as questions."""

from kebench.pipelines.qa_generation.pipeline import create_pipeline

__all__ = ["create_pipeline"]
