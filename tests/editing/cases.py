"""Real edit requests and the project's hparams, for tests that edit the real model."""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from kebench.editing.datasets import EditHparamsDataset
from kebench.editing.delta import Delta, apply_delta, revert_delta
from kebench.editing.forward import get_module
from kebench.editing.interface import EditContext
from kebench.editing.requests import EditRequest, requests_from_frame
from kebench.editing.rewrite import average_keys
from kebench.editing.runner import EditJob, run_job
from kebench.editing.store import DeltaStore
from kebench.kg.edit_cases import (
    RawEditCases,
    RelationCatalog,
    load_edit_case_file,
    parse_edit_cases,
)
from kebench.models.loading import LoadedModel
from kebench.project import PROJECT_ROOT, load_config
from tests.models.shared import MODEL

DEMO = PROJECT_ROOT / "data" / "01_raw" / "demo" / "edit_cases.json"


def read_requests(path: Path, source: str, fmt: str) -> list[EditRequest]:
    """The edit requests kg_build would derive from an edit-case file (deduplicated)."""
    raw = RawEditCases(
        source, fmt, "counterfactual", str(path), load_edit_case_file(path)
    )
    relations = RelationCatalog.from_config(load_config({})["parameters"]["relations"])
    return requests_from_frame(parse_edit_cases(raw, relations))


def demo_requests() -> list[EditRequest]:
    """The demo's edit requests: the first 20 are edited, the others are locality probes."""
    return read_requests(DEMO, "demo", "mquake")


def mquake_requests(data_dir: Path) -> list[EditRequest]:
    """The paper's MQuAKE-T edits, distinct, in file order."""
    path = data_dir / "benchmarking_ke" / "mquake_t_edits.json"
    return read_requests(path, "mquake_t", "flat_mquake")


def project_hparams(profile: str = "fast") -> dict[str, dict]:
    """Every method's hparams for the default model, from conf/base/hparams, in
    ``profile`` (tests edit with the CPU-tuned ``fast`` one unless they say)."""
    files = EditHparamsDataset(
        str(PROJECT_ROOT / "conf" / "base" / "hparams"), MODEL, profile=profile
    ).load()
    return {
        method: {**values, **files.overlay(method)}
        for method, values in files.own.items()
    }


# each method's optimisation steps (KN: integration points) by its hparams key
STEP_KEYS = ("v_num_grad_steps", "num_steps", "n_iter", "steps")


def few_steps(hparams: dict[str, dict]) -> dict[str, dict]:
    """Every method with at most 2 optimisation steps (KN: 2 integration points, not
    10): for tests of what an edit changes, not how well."""
    return {
        method: {
            key: min(value, 2) if key in STEP_KEYS else value
            for key, value in values.items()
        }
        for method, values in hparams.items()
    }


def output_change_at_key(
    lm: LoadedModel, delta: Delta, request: EditRequest, templates: list[str]
) -> torch.Tensor:
    """How a one-module delta changes that module's output for the request's key: the
    module's input at the subject token, averaged over ``templates``."""
    ((name, _change),) = delta.params.items()
    path = name.removesuffix(".weight")
    key = average_keys(lm, [request], [templates], [path])[path]
    module = get_module(lm.model, path)
    with torch.no_grad():
        before = module(key)
        applied = apply_delta(lm.model, delta)
        after = module(key)
        revert_delta(lm.model, applied)
    return after - before


def tiny_gpt2(
    lm: LoadedModel, n_embd: int = 32, n_layer: int = 2, n_positions: int = 128
) -> LoadedModel:
    """A randomly initialised GPT-2 (Conv1D projections, biases) with SmolLM2's
    tokenizer: no GPT-2 checkpoint is available offline."""
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=len(lm.tokenizer),
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_layer,
    )
    model = GPT2LMHeadModel(config).eval().requires_grad_(False)
    return LoadedModel(
        name="tiny-gpt2", model=model, tokenizer=lm.tokenizer, folder=lm.folder
    )


def stream_deltas(
    lm: LoadedModel,
    requests: list[EditRequest],
    job: EditJob,
    folder: Path,
    context: EditContext,
) -> list[Delta]:
    """A sequential job's deltas, each stored in ``folder`` as a run stores it, so that
    a later call on the same folder resumes from the stored edits."""
    store = DeltaStore(folder)
    deltas = []
    for outcome in run_job(
        lm, requests, job, store=store, context=context, max_relative_norm=math.inf
    ):
        store.write(outcome)
        deltas.append(outcome.delta)
    return deltas
