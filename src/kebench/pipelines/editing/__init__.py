"""The editing pipeline: edit requests -> weight deltas plus a manifest."""

from kebench.pipelines.editing.pipeline import create_pipeline

__all__ = ["create_pipeline"]
