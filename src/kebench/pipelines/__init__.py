"""kebench pipelines; each sub-package is discovered by ``find_pipelines``."""

# Registered, but not part of a plain `kedro run`: a lifelong stream is hours of
# editing on a CPU (`kedro run --pipelines=lifelong`, docs/lifelong.md).
NOT_IN_DEFAULT = ("lifelong",)
