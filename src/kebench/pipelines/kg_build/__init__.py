"""kg_build: edit cases to a linked, 1-hop knowledge graph (the paper's Algorithm 1)."""

from kebench.pipelines.kg_build.pipeline import create_pipeline

__all__ = ["create_pipeline"]
