"""The real SmolLM2 model (fixture ``lm``), shared by the whole test session."""

from tests.models.shared import lm  # noqa: F401 - a fixture
