"""One demo run through evaluation, shared by the tests of evaluation and of the
pipelines after it (each would otherwise repeat the same upstream work)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kebench.project import run_pipeline

UPSTREAM = ("kg_build", "rule_mining", "qa_generation", "risk_unification")
# the first edit of each risk: one benign update, one misinformation, one bias claim,
# with the CPU-tuned hparams profile that `make run` uses
DEMO_EDITS = {
    "dataset": "demo",
    "method": "ROME+IKE",
    "n_edits": 1,
    "hparams_profile": "fast",
}


@pytest.fixture(scope="session")
def evaluated_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch folder where the demo ran from kg_build to evaluation (ROME and IKE)."""
    root = tmp_path_factory.mktemp("evaluated_demo")
    for name in (*UPSTREAM, "evaluation"):  # evaluation holds editing's nodes
        run_pipeline(name, DEMO_EDITS, root)
    return root
