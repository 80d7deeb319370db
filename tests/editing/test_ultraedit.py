"""UltraEdit: the running normaliser and the layer derivation on hand-worked cases, and
edits of the real SmolLM2: what it traces, and a lifelong stream that resumes from its
files with the normaliser it had."""

from __future__ import annotations

import math

import pytest
import torch

from kebench.editing.hparams import scale_inner_params
from kebench.editing.interface import EditContext
from kebench.editing.methods.ultraedit import RunningMoments
from kebench.editing.registry import get_method
from kebench.editing.runner import make_job
from tests.editing.cases import demo_requests, project_hparams, stream_deltas

# two of the file's modules, one of each kind (they share a normaliser)
CHEAP = {
    "inner_params": ["model.layers.12.mlp.gate_proj", "model.layers.20.mlp.up_proj"]
}


def test_the_running_normaliser_follows_easyedits_update():
    """Rows (0, 2) then (4, 6), by hand: after the first, n 2, mean 1, summed
    variance 2·var = 4, std √(4/1) = 2; after the second, shift 5 − 1 = 4, mean
    1 + 2·4/4 = 3, summed variance 4 + 2·2 + 2·2·16/4 = 24, std √(24/3)."""
    moments = RunningMoments(1)
    moments.update(torch.tensor([[0.0], [2.0]]))
    assert moments.moments["n"].item() == 2
    assert moments.moments["std"].item() == pytest.approx(2.0)
    moments.update(torch.tensor([[4.0], [6.0]]))
    found = {k: t.item() for k, t in moments.moments.items()}
    assert found == pytest.approx(
        {"n": 4.0, "mean": 3.0, "var": 24.0, "std": math.sqrt(8.0)}
    )
    assert moments.normalise(torch.tensor([[3.0 + math.sqrt(8.0)]])).item() == (
        pytest.approx(1.0)
    )


def test_inner_params_move_by_the_depth_rule_per_kind_of_module():
    llama = [f"model.layers.{i}.mlp.gate_proj" for i in range(11, 16)] + [
        f"model.layers.{i}.mlp.up_proj" for i in range(18, 25)
    ]
    # round(l · 29/31): 11 -> 10, 15 -> 14; 18 -> 17, 24 -> 22 (windows stay whole)
    assert scale_inner_params(llama, 32, 30) == [
        f"model.layers.{i}.mlp.gate_proj" for i in range(10, 15)
    ] + [f"model.layers.{i}.mlp.up_proj" for i in range(17, 23)]
    # not a window: each layer alone, 3 · 19/9 = 6.3 -> 6, 9 -> 19
    assert scale_inner_params(["h.3.fc", "h.9.fc"], 10, 20) == ["h.6.fc", "h.19.fc"]


@pytest.fixture(scope="module")
def ultraedit(stats_dir):
    entry = get_method("UltraEdit")
    values = {**project_hparams("faithful")["UltraEdit"], **CHEAP}
    return entry, values, EditContext(stats_dir)


def token_count(lm, request) -> tuple[int, int]:
    """Tokens of ``prompt target`` and of `` target`` alone."""
    text = lm.tokenizer(request.text + " " + request.target_new)["input_ids"]
    answer = lm.tokenizer(" " + request.target_new, add_special_tokens=False)
    return len(text), len(answer["input_ids"])


@pytest.mark.model
def test_an_edit_traces_every_kept_token_or_the_answers(lm, ultraedit):
    """``mask`` traces every token of the text, ``ans`` those of the answer: the
    update's rank in each module; a batch of two traces both texts. The weights come
    back as they were."""
    entry, values, context = ultraedit
    first, second = demo_requests()[:2]
    base = {name: t.clone() for name, t in lm.model.state_dict().items()}
    for token, expected in (("mask", 0), ("ans", 1)):
        hparams = entry.hparams.from_dict({**values, "token": token})
        delta = entry.compute(lm, [first], hparams, context)
        ranks = {c.tensors["left"].shape[1] for c in delta.params.values()}
        assert ranks == {token_count(lm, first)[expected]}, token
        assert delta.is_finite(), token  # a one-token answer is one traced row
    hparams = entry.hparams.from_dict({**values, "batch_size_once": 1})
    delta = entry.compute(lm, [first, second], hparams, context)
    ranks = {c.tensors["left"].shape[1] for c in delta.params.values()}
    assert ranks == {token_count(lm, first)[0] + token_count(lm, second)[0]}
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name


@pytest.mark.model
def test_a_stream_carries_its_normaliser_and_resumes_from_files(
    lm, ultraedit, tmp_path
):
    """Three edits in sequence: the third delta of a stream killed after two and run
    again (its normaliser read back from the stored files) is the uninterrupted
    stream's; it is not the third edit with a new normaliser (``carry_normaliser:
    false``, EasyEdit's executor as it runs)."""
    _, values, context = ultraedit
    requests = demo_requests()[:3]

    def stream(edits, folder, **changes) -> list:
        job = make_job("UltraEdit", {**values, **changes}, "sequential", "UltraEdit")
        return stream_deltas(lm, edits, job, folder, context)

    whole = stream(requests, tmp_path / "whole")
    stream(requests[:2], tmp_path / "resumed")
    # the rerun replays the two stored edits and makes only the third
    (third,) = stream(requests, tmp_path / "resumed")
    fresh = stream(requests, tmp_path / "fresh", carry_normaliser=False)
    for name, change in whole[2].params.items():
        assert torch.equal(change.tensors["left"], third.params[name].tensors["left"])
        assert not torch.allclose(
            change.tensors["left"], fresh[2].params[name].tensors["left"]
        )
    counts = {k: t for k, t in whole[2].state.items() if k.endswith("/n")}
    assert [float(t) for t in counts.values()] == [
        2 * sum(token_count(lm, r)[0] for r in requests)
    ]
