"""lifelong: a stream of sequential edits, measured at checkpoints."""

from .pipeline import create_pipeline

__all__ = ["create_pipeline"]
