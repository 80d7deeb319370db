"""Project pipelines."""

from kedro.framework.project import find_pipelines
from kedro.pipeline import Pipeline

# Not part of a plain `kedro run`: a lifelong stream is hours of editing on a CPU
# (`kedro run --pipelines=lifelong`, docs/lifelong.md).
NOT_IN_DEFAULT = ("lifelong",)


def register_pipelines() -> dict[str, Pipeline]:
    """Register every pipeline under ``kebench.pipelines``; ``__default__`` runs them
    all but those in ``NOT_IN_DEFAULT``."""
    pipelines = find_pipelines(raise_errors=True)
    pipelines["__default__"] = sum(
        (p for name, p in pipelines.items() if name not in NOT_IN_DEFAULT),
        Pipeline([]),
    )
    return pipelines
