"""rule_mining: AMIE 3 rules over the KG, and the subset used to make questions."""

from kebench.pipelines.rule_mining.pipeline import create_pipeline

__all__ = ["create_pipeline"]
