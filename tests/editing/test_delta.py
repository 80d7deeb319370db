"""Delta files and exact apply/revert on real torch modules."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors import safe_open

from kebench.editing.codebook import Codebook
from kebench.editing.delta import (
    Delta,
    ParamDelta,
    agreement,
    apply_delta,
    delta_applied,
    load_delta,
    revert_delta,
    save_delta,
)
from kebench.editing.sidememory import CURRENT, SideMemory


def small_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Linear(4, 3))


def every_kind() -> Delta:
    generator = torch.Generator().manual_seed(1)
    return Delta(
        params={
            "0.weight": ParamDelta(
                "low_rank",
                {
                    "left": torch.randn(4, 2, generator=generator),
                    "right": torch.randn(6, 2, generator=generator),
                },
            ),
            "0.bias": ParamDelta(
                "dense", {"values": torch.randn(4, generator=generator)}
            ),
            "1.weight": ParamDelta(
                "index",
                {
                    "index": torch.tensor([0, 3]),
                    "values": torch.randn(3, 2, generator=generator),
                },
                dim=1,
            ),
        },
        prefix="New Fact: x\nPrompt: ",
        meta={"method": "test"},
    )


def test_kinds_need_their_tensors():
    with pytest.raises(ValueError, match="unknown delta kind"):
        ParamDelta("sparse", {"values": torch.zeros(1)})
    with pytest.raises(ValueError, match="needs tensors"):
        ParamDelta("low_rank", {"left": torch.zeros(1)})


def test_file_round_trip_is_safetensors(tmp_path):
    delta = every_kind()
    path = tmp_path / "d.safetensors"
    save_delta(delta, path)
    with safe_open(str(path), framework="pt") as handle:
        assert handle.metadata()["format"] == "kebench-delta/1"
        assert sorted(handle.keys()) == [
            "0.bias/values",
            "0.weight/left",
            "0.weight/right",
            "1.weight/index",
            "1.weight/values",
        ]
    loaded = load_delta(path)
    assert loaded.prefix == delta.prefix
    assert loaded.meta == {"method": "test"}
    for name, change in delta.params.items():
        assert loaded.params[name].kind == change.kind
        assert loaded.params[name].dim == change.dim
        for key, tensor in change.tensors.items():
            assert torch.equal(loaded.params[name].tensors[key], tensor)
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temporary file


def test_other_safetensors_files_are_refused(tmp_path):
    from safetensors.torch import save_file  # noqa: PLC0415

    save_file({"w": torch.zeros(2)}, tmp_path / "w.safetensors")
    with pytest.raises(ValueError, match="not a kebench delta"):
        load_delta(tmp_path / "w.safetensors")


def codebook_delta(
    keys: torch.Tensor, radii: tuple[float, float] = (1.0, 0.5)
) -> Delta:
    """A codebook of two entries at the second layer (input 4, output 3)."""
    return Delta(
        codebooks={
            "1": Codebook(
                ids=torch.tensor([5, 9]),
                keys=keys,
                values=torch.arange(6, dtype=torch.float32).reshape(2, 3),
                radii=torch.tensor(radii),
                labels=torch.tensor([1, 2]),
            )
        }
    )


def test_a_codebook_file_needs_a_reader_that_knows_codebooks(tmp_path):
    """A file with a codebook says so in its format (a reader of format 1 alone would
    apply it as no change); it reads back entry for entry, and a file whose entries
    disagree is refused naming the file."""
    delta = codebook_delta(torch.ones(2, 4))
    save_delta(delta, tmp_path / "c.safetensors")
    with safe_open(str(tmp_path / "c.safetensors"), framework="pt") as handle:
        assert handle.metadata()["format"] == "kebench-delta/2"
    loaded = load_delta(tmp_path / "c.safetensors")
    for key, tensor in delta.codebooks["1"].tensors().items():
        assert torch.equal(loaded.codebooks["1"].tensors()[key], tensor)
    broken = codebook_delta(torch.ones(2, 4))
    broken.codebooks["1"].keys = torch.ones(3, 4)  # three keys for two entries
    save_delta(broken, tmp_path / "broken.safetensors")
    with pytest.raises(ValueError, match=r"broken\.safetensors.*disagree in shape"):
        load_delta(tmp_path / "broken.safetensors")


def shifted_copy(model: torch.nn.Module, activation: str) -> SideMemory:
    """One shard at the second layer: its weight + 1, threshold 0.5."""
    return SideMemory(
        ids=torch.tensor([4]),
        weights=(model[1].weight.detach() + 1)[None],
        thresholds=torch.tensor([0.5]),
        roles=torch.tensor([CURRENT]),
        activation=activation,
    )


def test_a_side_memory_file_is_format_3_and_reads_back(tmp_path):
    """A file with a side memory says so in its format (a reader of format 2 would
    apply it as no change); it reads back shard for shard with its activation; a
    shard of another shape is refused naming the module; a file with an unknown role
    is refused naming the file."""
    model = small_model()
    side = shifted_copy(model, "gelu")
    save_delta(Delta(side_memories={"1": side}), tmp_path / "s.safetensors")
    with safe_open(str(tmp_path / "s.safetensors"), framework="pt") as handle:
        assert handle.metadata()["format"] == "kebench-delta/3"
    loaded = load_delta(tmp_path / "s.safetensors").side_memories["1"]
    assert loaded.activation == "gelu"
    for key, tensor in side.tensors().items():
        assert torch.equal(loaded.tensors()[key], tensor)
    wrong = Delta(side_memories={"0": side})  # layer 0's weight is (4, 6), not (3, 4)
    with pytest.raises(ValueError, match=r"do not fit 0"):
        apply_delta(model, wrong)
    side.roles = torch.tensor([7])
    save_delta(Delta(side_memories={"1": side}), tmp_path / "bad.safetensors")
    with pytest.raises(ValueError, match=r"bad\.safetensors.*roles"):
        load_delta(tmp_path / "bad.safetensors")


def test_a_side_memory_answers_through_hooks_and_comes_off():
    """At a Linear(4, 3) with the identity activation, a shard of weight W + 1 with
    threshold 0.5 claims a row whose input sums past 0.5/√3 per token (its output moves
    by that sum in each of 3 outputs), and the module's own output comes back after."""
    model = small_model()
    weight = model[1].weight.detach()
    side = shifted_copy(model, "linear")
    x = torch.tensor([[0.0] * 6, [10.0] * 6])
    before = model(x)
    hidden = model[0](x)
    claimed = hidden.sum(dim=-1).abs() * math.sqrt(3) >= 0.5
    with delta_applied(model, Delta(side_memories={"1": side})):
        after = model(x)
    expected = torch.where(
        claimed[:, None], hidden @ (weight + 1).T + model[1].bias, before
    )
    assert torch.allclose(after, expected, atol=1e-5)
    assert torch.equal(model(x), before)


def test_a_codebook_replaces_the_matching_rows_output_and_comes_off():
    """Each row's query is its last token's input to layer 1. Row 0's is the first key
    (distance 0, radius 1e-6): its output there becomes that entry's value (0, 1, 2).
    Row 1's differs from it (random inputs) and lies about 200 from the second key
    (every input shifted by 100, radius 0.5): it passes. No weight changes; after the
    revert the outputs are the model's own."""
    model = small_model()
    inputs = torch.randn(2, 3, 6, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        query = model[0](inputs)[0, -1]
        before = model(inputs)
    delta = codebook_delta(torch.stack([query, query + 100]), radii=(1e-6, 0.5))
    weights = [p.clone() for p in model.parameters()]
    with delta_applied(model, delta), torch.no_grad():
        after = model(inputs)
        assert all(torch.equal(a, b) for a, b in zip(model.parameters(), weights))
    with torch.no_grad():
        again = model(inputs)
    assert after[0, -1].tolist() == [0.0, 1.0, 2.0]
    assert torch.equal(after[0, :-1], before[0, :-1])
    assert torch.equal(after[1], before[1])
    assert torch.equal(again, before)


def test_apply_changes_exactly_the_delta_and_revert_restores_bits():
    model = small_model()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    delta = every_kind()
    applied = apply_delta(model, delta)
    state = model.state_dict()
    low_rank = delta.params["0.weight"].tensors
    assert torch.allclose(
        state["0.weight"], base["0.weight"] + low_rank["left"] @ low_rank["right"].T
    )
    assert torch.allclose(
        state["0.bias"], base["0.bias"] + delta.params["0.bias"].tensors["values"]
    )
    changed = (state["1.weight"] != base["1.weight"]).any(dim=0)
    assert changed.tolist() == [True, False, False, True]
    assert torch.equal(state["1.bias"], base["1.bias"])
    revert_delta(model, applied)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, base[name]), name


@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("2.weight", ParamDelta("dense", {"values": torch.zeros(3)}), "no parameter"),
        (
            "0.weight",
            ParamDelta(
                "low_rank", {"left": torch.ones(4, 1), "right": torch.ones(5, 1)}
            ),
            r"shape \(4, 6\): a change of shape \(4, 5\)",
        ),
        (
            "1.weight",
            ParamDelta(
                "index",
                {"index": torch.tensor([9]), "values": torch.ones(3, 1)},
                dim=1,
            ),
            "index 9 past size 4",
        ),
    ],
)
def test_a_delta_that_does_not_fit_is_refused_by_name(tmp_path, name, change, message):
    model = small_model()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    path = tmp_path / "case-7.safetensors"
    save_delta(
        Delta(params={"0.bias": every_kind().params["0.bias"], name: change}), path
    )
    with pytest.raises(ValueError, match=f"delta {path}.*{message}"):
        apply_delta(model, load_delta(path))
    for key, tensor in model.state_dict().items():
        assert torch.equal(tensor, base[key]), key


def test_context_manager_restores_after_an_error():
    model = small_model()
    base = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RuntimeError, match="boom"), delta_applied(model, every_kind()):
        raise RuntimeError("boom")
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, base[name]), name


def test_full_change_and_description():
    model = small_model()
    delta = every_kind()
    index_change = delta.params["1.weight"].full(model.get_parameter("1.weight"))
    assert index_change.shape == (3, 4)
    assert torch.equal(index_change[:, 1], torch.zeros(3))
    description = delta.describe(model)
    assert description["param_names"] == ["0.bias", "0.weight", "1.weight"]
    assert description["shapes"] == [[4], [4, 6], [3, 4]]
    assert description["norms"][2] == pytest.approx(float(index_change.norm()))
    assert delta.nbytes() == 4 * (4 * 2 + 6 * 2 + 4 + 3 * 2) + 8 * 2
    assert delta.is_finite()
    delta.params["0.bias"].tensors["values"][0] = float("nan")
    assert not delta.is_finite()


def test_agreement_of_two_deltas_is_the_hand_worked_cosine_and_norm_ratio():
    model = small_model()
    # a: 1 at 1.weight[0, 0] (index kind) and bias 0 of layer 0 set to 2;
    # b: 1 at 1.weight[0, 0] and 1.weight[0, 1] (dense), nothing on layer 0
    a = Delta(
        params={
            "1.weight": ParamDelta(
                "index",
                {"index": torch.tensor([0]), "values": torch.tensor([[1.0], [0], [0]])},
                dim=1,
            ),
            "0.bias": ParamDelta("dense", {"values": torch.tensor([2.0, 0, 0, 0])}),
        }
    )
    dense = torch.zeros(3, 4)
    dense[0, :2] = 1.0
    b = Delta(params={"1.weight": ParamDelta("dense", {"values": dense})})
    total, per_param = agreement(model, a, b)
    # <a, b> = 1; |a|^2 = 1 + 4 = 5; |b|^2 = 2
    assert total.cosine == pytest.approx(1 / (5 * 2) ** 0.5)
    assert total.norm_ratio == pytest.approx((5 / 2) ** 0.5)
    assert (total.norm_a, total.norm_b) == pytest.approx((5**0.5, 2**0.5))
    assert per_param["1.weight"].cosine == pytest.approx(1 / 2**0.5)
    # b does not change the bias: no direction to compare with
    assert per_param["0.bias"].norm_b == 0
    assert math.isnan(per_param["0.bias"].norm_ratio)
