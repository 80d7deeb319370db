"""kebench pipelines; each sub-package is discovered by ``find_pipelines``."""

from kedro.pipeline import Node, Pipeline

# Registered, but not part of a plain `kedro run`: a lifelong stream is hours of
# editing on a CPU (`kedro run --pipelines=lifelong`, docs/lifelong.md).
NOT_IN_DEFAULT = ("lifelong",)


def namespaced(name: str, nodes: list[Node]) -> Pipeline:
    """The nodes of pipeline ``name`` as Kedro's modular pipeline ``name``: its nodes
    are ``name.<node>``, kedro-viz draws them as one box, and `kedro run
    --namespaces=name` runs them. Its datasets and parameters keep their names, so every
    catalog entry still matches (a renamed one would silently be a MemoryDataset)."""
    return Pipeline(nodes, namespace=name, prefix_datasets_with_namespace=False)
