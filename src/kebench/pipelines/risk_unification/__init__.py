"""risk_unification: every test of every edit in one typed ``probes`` table."""

from kebench.pipelines.risk_unification.pipeline import create_pipeline

__all__ = ["create_pipeline"]
