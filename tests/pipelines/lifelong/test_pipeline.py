"""lifelong on the demo with the real SmolLM2: checkpoint measures against a plain
computation on the stored deltas, and a run killed with SIGKILL that resumes to the
results of an uninterrupted one."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kebench.editing.delta import delta_applied
from kebench.editing.store import DeltaStore
from kebench.pipelines.lifelong.nodes import plan_lifelong_stream
from kebench.project import PROJECT_ROOT, project_catalog, run_in_catalog
from kebench.schemas import LIFELONG_COLLAPSE, LIFELONG_CURVES, LIFELONG_OUTCOMES
from tests.pipelines.conftest import DEMO_EDITS
from tests.scoring.test_logprobs import plain_logprob

EDITS = 3
CHECKPOINTS = [1, 2]
SIZES = {"general": 6, "boolq": 2, "nq": 2, "neutral_texts": 2, "unrelated_prompts": 2}
# what differs between two runs of the same stream: the clock
TIMES = ["edit_s", "measure_s"]


def lifelong_catalog(root: Path):
    """The project's catalog under ``root``: ROME (fast) on the demo's first
    ``EDITS`` edits, small general sets."""
    params = DEMO_EDITS | {
        "method": "ROME",
        "lifelong_edits": EDITS,
        "lifelong_top_up": "none",
    }
    catalog = project_catalog(params, root)
    lifelong = catalog.load("params:lifelong")
    catalog["params:lifelong"] = lifelong | {"checkpoints": CHECKPOINTS}
    stealth = catalog.load("params:stealthiness")
    catalog["params:stealthiness"] = stealth | {"sizes": SIZES}
    return catalog


def fresh_copy(evaluated_root: Path, target: Path) -> Path:
    """The shared demo run's outputs (kg_build to evaluation), without any lifelong."""
    shutil.copytree(evaluated_root, target)
    for folder in target.rglob("lifelong"):
        shutil.rmtree(folder)
    return target


@pytest.fixture(scope="module")
def streamed(evaluated_root, tmp_path_factory):
    """An uninterrupted stream."""
    root = fresh_copy(evaluated_root, tmp_path_factory.mktemp("lifelong") / "run")
    catalog = lifelong_catalog(root)
    run_in_catalog("lifelong", catalog)
    return catalog


@pytest.mark.model
def test_checkpoints_measure_every_edit_so_far(streamed):
    outcomes = LIFELONG_OUTCOMES.validate(streamed.load("lifelong_outcomes"))
    checkpoints = streamed.load("lifelong_checkpoints")
    assert list(checkpoints["checkpoint"]) == [0, 1, 2, 3]
    stream = streamed.load("lifelong_stream")
    for done in (1, 2, 3):
        direct = outcomes[
            (outcomes["checkpoint"] == done) & (outcomes["probe_type"] == "direct")
        ]
        expected = stream.loc[
            (stream["probe_type"] == "direct") & (stream["position"] <= done),
            "case_id",
        ]
        assert sorted(direct["case_id"]) == sorted(expected)
    curves = LIFELONG_CURVES.validate(streamed.load("lifelong_curves"))
    assert {"retention", "locality", "perplexity", "norm_growth"} <= set(
        curves["measure"]
    )
    LIFELONG_COLLAPSE.validate(streamed.load("lifelong_collapse"))
    report = streamed.load("lifelong_report")
    assert "## ROME" in report and "## Collapse" in report


@pytest.mark.model
def test_retention_and_norm_growth_match_a_plain_computation(streamed, lm):
    """Apply the stored deltas of the first k edits to the model by hand; retention
    is 1[log P_k(new | prompt) > log P_0(old | prompt)], norm growth the norm of
    their summed change over the unedited weight's."""
    stream = streamed.load("lifelong_stream")
    direct = stream[stream["probe_type"] == "direct"].sort_values("position")
    outcomes = streamed.load("lifelong_outcomes")
    measures = streamed.load("lifelong_checkpoints").set_index("checkpoint")
    store = streamed.load("lifelong_deltas_stored")
    rows = store.rows("ROME", "sequential")
    deltas = [store.load(rows[case]["delta_file"]) for case in direct["case_id"]]
    assert direct["answer_old"].notna().all()  # the demo's first edits: counterfacts
    base_old = {
        row.case_id: plain_logprob(lm, row.prompt, row.answer_old)[0]
        for row in direct.itertuples()
    }
    for done in (1, 3):
        with ExitStack() as stack:
            for delta in deltas[:done]:
                stack.enter_context(delta_applied(lm.model, delta))
            expected = {
                row.case_id: float(
                    plain_logprob(lm, row.prompt, row.answer_new)[0]
                    > base_old[row.case_id]
                )
                for row in direct.head(done).itertuples()
            }
        got = outcomes[
            (outcomes["checkpoint"] == done) & (outcomes["probe_type"] == "direct")
        ].set_index("case_id")["outcome"]
        assert got.to_dict() == expected
        change, base = {}, {}
        for delta in deltas[:done]:
            for name, part in delta.params.items():
                weight = lm.model.get_parameter(name).detach().double()
                base.setdefault(name, weight)
                change[name] = change.get(name, 0) + part.full(weight).double()
        growth = np.sqrt(sum(float(c.norm()) ** 2 for c in change.values()))
        growth /= np.sqrt(sum(float(w.norm()) ** 2 for w in base.values()))
        assert measures.loc[done, "norm_growth"] == pytest.approx(growth, rel=1e-4)


KILLED_RUN = """
import sys
from pathlib import Path
from kebench.project import run_in_catalog
from tests.pipelines.lifelong.test_pipeline import lifelong_catalog
run_in_catalog("lifelong", lifelong_catalog(Path(sys.argv[1])))
"""


@pytest.mark.model
def test_a_run_killed_mid_stream_resumes_to_the_same_results(
    streamed, evaluated_root, tmp_path
):
    root = fresh_copy(evaluated_root, tmp_path / "killed")
    catalog = lifelong_catalog(root)
    first = Path(catalog.load("lifelong_checkpoints_stored")) / "ROME"
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_RUN, str(root)],
        cwd=PROJECT_ROOT,
        env=os.environ | {"PYTHONPATH": str(PROJECT_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        while not (first / "checkpoint-00001.json").exists():
            assert process.poll() is None, "the run ended before its first checkpoint"
            time.sleep(0.2)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    store = DeltaStore(Path(catalog.load("lifelong_deltas_stored").root))

    def written() -> dict[str, int]:
        rows = store.rows("ROME", "sequential").values()
        return {
            row["case_id"]: (store.root / row["delta_file"]).stat().st_mtime_ns
            for row in rows
        }

    before = written()
    assert 1 <= len(before) < EDITS
    assert not (first / f"checkpoint-{EDITS:05d}.json").exists()

    run_in_catalog("lifelong", catalog)
    pd.testing.assert_frame_equal(
        catalog.load("lifelong_outcomes"), streamed.load("lifelong_outcomes")
    )
    pd.testing.assert_frame_equal(
        catalog.load("lifelong_checkpoints").drop(columns=TIMES),
        streamed.load("lifelong_checkpoints").drop(columns=TIMES),
    )
    # the edits made before the kill were replayed, not made again
    after = written()
    assert len(after) == EDITS
    assert {case: after[case] for case in before} == before


def test_an_unknown_top_up_source_is_named(evaluated_root):
    catalog = lifelong_catalog(evaluated_root)
    params = catalog.load("params:lifelong") | {"edits": 10_000, "top_up": "nowhere"}
    with pytest.raises(ValueError, match=r"lifelong\.top_up: unknown source 'nowhere'"):
        plan_lifelong_stream(
            catalog.load("probes"),
            catalog.load("entailed_facts"),
            catalog.load("params:relations"),
            catalog.load("params:rippleedits_relations"),
            catalog.load("params:risk_unification"),
            params,
        )
