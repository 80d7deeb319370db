"""Project pipelines."""

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline

from kebench.pipelines import NOT_IN_DEFAULT


def register_pipelines() -> dict[str, Pipeline]:
    """Register every pipeline under ``kebench.pipelines``; ``__default__`` runs them
    all but those in ``NOT_IN_DEFAULT``."""
    pipelines = find_pipelines(raise_errors=True)
    pipelines["__default__"] = sum(
        (p for name, p in pipelines.items() if name not in NOT_IN_DEFAULT),
        Pipeline([]),
    )
    return pipelines
