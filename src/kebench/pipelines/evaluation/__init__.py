"""evaluation: score probes under the base and edited models; the paper's metrics."""

from kebench.pipelines.evaluation.pipeline import create_pipeline

__all__ = ["create_pipeline"]
