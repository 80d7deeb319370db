"""WISE: the side memory's routing, merging and losses on hand-worked cases, and edits
of the real SmolLM2 that answer the new target through the side memory, leave every
weight alone, read back from their files, and go on, save and merge over a stream."""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
import torch
from torch import nn

from kebench.editing import module_hooks
from kebench.editing.delta import (
    FORMAT_SIDE_MEMORIES,
    delta_applied,
    load_delta,
    save_delta,
)
from kebench.editing.interface import EditContext, HparamsError
from kebench.editing.methods.lora import IGNORED
from kebench.editing.methods.wise import (
    WISEHyperParams,
    edit_batch,
    margin_loss,
    merge_shards,
    shard_mask,
    target_loss,
)
from kebench.editing.module_hooks import Forward
from kebench.editing.registry import get_method
from kebench.editing.runner import make_job
from kebench.editing.sidememory import CURRENT, RETIRED, SAVED, SideMemory
from kebench.models.logprobs import score_answers
from tests.editing.cases import demo_requests, project_hparams, stream_deltas

IDENTITY = nn.Linear(2, 2, bias=False)
with torch.no_grad():
    IDENTITY.weight.copy_(torch.eye(2))


def memory(changes: list[list[list[float]]], thresholds, roles, ids=None):
    """Shards of IDENTITY's weight plus ``changes``, measured with no activation."""
    n = len(changes)
    return SideMemory(
        ids=torch.arange(n) if ids is None else torch.tensor(ids),
        weights=torch.eye(2) + torch.tensor(changes),
        thresholds=torch.tensor(thresholds, dtype=torch.float32),
        roles=torch.tensor(roles),
        activation="linear",
    )


def routed(book: SideMemory, x: torch.Tensor, kept=None) -> torch.Tensor:
    with torch.no_grad():
        out = book.output(IDENTITY, (x,), IDENTITY(x), Forward(None, kept))
    return IDENTITY(x) if out is None else out


FIRST = [[1.0, 0.0], [0.0, 0.0]]  # adds x₀ to output 0
SECOND = [[0.0, 0.0], [0.0, 4.0]]  # adds 4·x₁ to output 1


def test_each_row_takes_the_shard_that_claims_it_else_the_original():
    # row a: x = (3, 0): distances 3 (first) and 0 (second); row b: x = (0, 0.5):
    # distances 0 and 2; thresholds 1: a takes the first, b the second
    x = torch.tensor([[[3.0, 0.0]], [[0.0, 0.5]]])
    book = memory([FIRST, SECOND], [1.0, 1.0], [CURRENT, SAVED])
    assert routed(book, x).tolist() == [[[6.0, 0.0]], [[0.0, 2.5]]]


def test_a_saved_shard_must_beat_the_current_shards_distance_even_unclaimed():
    # x = (0.5, 0.25): the current shard's distance 0.5 is below its threshold 1 (it
    # answers nothing) but is the one to beat: the saved shard's 1.0 beats it and its
    # own threshold 0.75; with the saved threshold at 1.0 (not beaten) nobody answers
    x = torch.tensor([[[0.5, 0.25]]])
    book = memory([FIRST, SECOND], [1.0, 0.75], [CURRENT, SAVED])
    assert routed(book, x).tolist() == [[[0.5, 1.25]]]
    assert routed(
        memory([FIRST, SECOND], [1.0, 1.0], [CURRENT, SAVED]), x
    ).tolist() == [[[0.5, 0.25]]]
    # a saved shard closer than the current one's distance loses to it: (3, 0.25)
    # gives the current 3 (claimed) and the saved 1
    x = torch.tensor([[[3.0, 0.25]]])
    assert routed(book, x).tolist() == [[[6.0, 0.25]]]


def test_distance_is_the_mean_over_kept_tokens():
    # tokens (2, 0) and (0, 0): the first shard's distances 2 and 0, mean 1 with both
    # kept (not above threshold 1.5), 2 with the padding token dropped
    x = torch.tensor([[[2.0, 0.0], [0.0, 0.0]]])
    book = memory([FIRST], [1.5], [CURRENT])
    assert routed(book, x).tolist() == x.tolist()
    kept = torch.tensor([[True, False]])
    assert routed(book, x, kept).tolist() == [[[4.0, 0.0], [0.0, 0.0]]]


def test_past_a_hundred_tokens_the_largest_token_decides():
    x = torch.zeros(1, 101, 2)
    x[0, 0, 0] = 2.0  # mean 2/101, largest 2
    book = memory([FIRST], [1.5], [CURRENT])
    assert routed(book, x)[0, 0].tolist() == [4.0, 0.0]
    assert routed(book, x[:, :100]).tolist() == x[:, :100].tolist()


def test_side_memories_merge_by_shard_id_and_a_retired_shard_goes():
    early = memory([FIRST, SECOND], [1.0, 2.0], [SAVED, CURRENT], ids=[0, 1])
    later = memory([SECOND, FIRST, FIRST], [3.0, 0.0, 5.0], [SAVED, RETIRED, SAVED])
    later = SideMemory(
        **{**later.tensors(), "ids": torch.tensor([1, 0, 7])}, activation="linear"
    )
    merged = SideMemory.merged([early, later])
    assert merged.ids.tolist() == [1, 7]
    assert merged.thresholds.tolist() == [3.0, 5.0]
    assert merged.roles.tolist() == [SAVED, SAVED]


def test_the_target_loss_is_easyedits_on_a_hand_worked_batch():
    # one template row, labels masked up to column 1: label 1 at column 2; the out-of-
    # scope row last. EasyEdit counts positions from (#masked − 1) − 1 = 0 on: the
    # target's NLL at position 1 (predicting column 2) over 2 positions.
    logits = torch.tensor(
        [
            [[0.0, 0.0], [math.log(3.0), 0.0], [0.0, 0.0]],
            [[5.0, 5.0], [5.0, 5.0], [5.0, 5.0]],
        ]
    )
    labels = torch.tensor([[IGNORED, IGNORED, 1], [7, 7, 7]])
    # position 1 gives P(1) = 1/(3 + 1)
    assert float(target_loss(logits, labels)) == pytest.approx(math.log(4.0) / 2)


def hparams(**changes) -> WISEHyperParams:
    values = {"layers": [0], "rewrite_module_tmp": "m.{}", **changes}
    return WISEHyperParams.from_dict(values)


def test_the_margin_loss_is_easyedits_on_a_hand_worked_batch():
    # two template rows (distances 3 and 30) and the out-of-scope row (distance 1),
    # one token each; (alpha, beta, gamma) = (0.5, 20, 10):
    # mean⁺(1 − 3 + 10, 1 − 30 + 10) = 8; mean⁺(1 − 0.5) = 0.5; mean⁺(20 − 3) = 17
    original = torch.zeros(3, 1, 2)
    shard = torch.tensor([[[3.0, 0.0]], [[0.0, 30.0]], [[1.0, 0.0]]])
    loss = margin_loss(
        original, shard, nn.Identity(), hparams(act_margin=[0.5, 20, 10])
    )
    assert float(loss) == pytest.approx(8.0 + 0.5 + 17.0)


def test_ties_merges_the_top_changes_that_agree_in_sign():
    # changes (4, -1, 2, 0) and (-3, 1, 1, 5), density 0.5: top two of each by size,
    # (4, 0, 2, 0) and (-3, 0, 0, 5); summed signs (+, 0, +, +): entry 0 keeps 4 only
    original = torch.zeros(2, 2)
    shards = torch.tensor([[[4.0, -1.0], [2.0, 0.0]], [[-3.0, 1.0], [1.0, 5.0]]])
    merged = merge_shards(original, shards, hparams(densities=0.5))
    assert merged.tolist() == [[4.0, 0.0], [2.0, 5.0]]


def test_the_mask_is_the_draw_of_easyedits_global_generator():
    np.random.seed([3, 1])
    theirs = np.random.choice([1, 0], size=1000, p=[0.2, 0.8])
    mine = shard_mask(torch.tensor([3, 1]), 1000, 0.2)
    assert mine.tolist() == theirs.tolist()
    assert 150 < int(mine.sum()) < 250


def test_what_kebench_does_not_implement_is_refused():
    for refused in ({"retrieve": False}, {"replay": True}, {"merge_alg": "slerp"}):
        with pytest.raises(HparamsError, match=next(iter(refused))):
            hparams(**refused)
    with pytest.raises(HparamsError, match="multiple"):
        hparams(save_freq=3, merge_freq=4)
    with pytest.raises(HparamsError, match="load_path"):
        hparams(load_path="wise.pt")


# --- the real model ----------------------------------------------------------------

# the faithful file's settings, fewer steps: these tests check what the side memory does
CHEAP = {"n_iter": 6}


@pytest.fixture(scope="module")
def wise_setup(stats_dir):
    entry = get_method("WISE")
    values = {**project_hparams("faithful")["WISE"], **CHEAP}
    context = EditContext(stats_dir, pool=demo_requests()[:20])
    return entry, values, context


def scores(lm, prompts, answers):
    return [s.logprob for s in score_answers(lm.model, lm.tokenizer, prompts, answers)]


@pytest.mark.model
def test_the_batch_labels_only_the_target_of_each_template_row(lm, wise_setup):
    """EasyEdit's rule on the real tokenizer: a row per template then the out-of-scope
    sentence, left-padded; each template row's labels are its target's tokens."""
    _, values, _ = wise_setup
    request = demo_requests()[0]
    templates = ["{}", "Note: {}"]
    batch = edit_batch(lm, request, templates, "Paris is in France", hparams(**values))
    assert batch["input_ids"].shape[0] == 3
    target = lm.tokenizer(" " + request.target_new, add_special_tokens=False)
    for row in range(2):
        labelled = batch["labels"][row][batch["labels"][row] != IGNORED]
        assert labelled.tolist() == target["input_ids"]


@pytest.mark.model
def test_an_edit_answers_through_the_side_memory_alone(lm, wise_setup, tmp_path):
    """The edit prompt answers the new target more likely than before; no weight
    changes; the model scores exactly as before once it is reverted; the delta reads
    back from its file (format 3) and scores the same."""
    entry, values, context = wise_setup
    request = demo_requests()[0]
    base = {name: t.clone() for name, t in lm.model.state_dict().items()}
    delta = entry.compute(lm, [request], entry.hparams.from_dict(values), context)
    (side,) = delta.side_memories.values()
    assert not delta.params and side.roles.tolist() == [CURRENT] and len(side) == 1
    before = scores(lm, [request.text], [request.target_new])
    with delta_applied(lm.model, delta):
        after = scores(lm, [request.text], [request.target_new])
        for name, tensor in lm.model.state_dict().items():
            assert torch.equal(tensor, base[name]), name
    assert after[0] > before[0] + 1.0
    assert scores(lm, [request.text], [request.target_new]) == before
    save_delta(delta, tmp_path / "wise.safetensors")
    read = load_delta(tmp_path / "wise.safetensors")
    assert read.side_memories[next(iter(delta.side_memories))].activation == "silu"
    with open(tmp_path / "wise.safetensors", "rb") as handle:
        assert FORMAT_SIDE_MEMORIES.encode() in handle.read(4096)
    with delta_applied(lm.model, read):
        assert scores(lm, [request.text], [request.target_new]) == after


@pytest.mark.model
def test_a_stream_goes_on_saves_merges_and_resumes(lm, wise_setup, tmp_path):
    """Four edits in sequence with a shard saved every two edits and merged every
    four: the second edit goes on with the first's shard; the third starts a new one;
    the fourth saves it and folds both saved shards into one (TIES), whose threshold
    is the lower of theirs. A stream killed after three edits resumes to the same
    fourth delta."""
    _, values, context = wise_setup
    requests = demo_requests()[:4]
    stream = {**values, "n_iter": 3, "save_freq": 2, "merge_freq": 4}
    job = make_job("WISE", stream, "sequential", "WISE")
    deltas = stream_deltas(lm, requests, job, tmp_path / "whole", context)
    (path,) = deltas[0].side_memories
    sides = [d.side_memories[path] for d in deltas]
    assert [s.ids.tolist() for s in sides] == [[0], [0], [1], [1, 0, 1, 2]]
    assert [s.roles.tolist() for s in sides[:3]] == [[CURRENT], [SAVED], [CURRENT]]
    assert sides[3].roles.tolist() == [SAVED, RETIRED, RETIRED, SAVED]
    with contextlib.ExitStack() as applied:
        for delta in deltas:
            applied.enter_context(delta_applied(lm.model, delta))
        held = module_hooks.active(lm.model, path)
    assert held.ids.tolist() == [2] and held.roles.tolist() == [SAVED]
    assert float(held.thresholds[0]) == min(
        float(sides[1].thresholds[0]), float(sides[3].thresholds[0])
    )
    stream_deltas(lm, requests[:3], job, tmp_path / "resumed", context)
    (fourth,) = stream_deltas(lm, requests, job, tmp_path / "resumed", context)
    assert torch.equal(fourth.side_memories[path].weights, sides[3].weights)
