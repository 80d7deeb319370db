"""Mitigation: rule-guided propagation of edits, and the tamper audit."""

from kebench.pipelines.mitigation.pipeline import create_pipeline

__all__ = ["create_pipeline"]
