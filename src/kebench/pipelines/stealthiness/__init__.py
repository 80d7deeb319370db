"""stealthiness: how far each edit moves general capability, and whether harmful
edits can be told apart from benign ones by it."""

from kebench.pipelines.stealthiness.pipeline import create_pipeline

__all__ = ["create_pipeline"]
