"""The real SmolLM2 model (``lm``) and its statistics cache, shared by the session."""

from tests.models.shared import lm, stats_dir  # noqa: F401 - fixtures
