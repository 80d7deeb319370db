"""kebench pipelines; each sub-package is discovered by ``find_pipelines``."""
