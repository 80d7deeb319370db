"""GPT-2-style models: the gpt2-xl hparams templates on a small GPT-2 (Conv1D weights).

No GPT-2 checkpoint is available offline, so this is a randomly initialised GPT2LMHeadModel
(the real transformers architecture, 4 layers) with SmolLM2's tokenizer. It checks
module paths and the transposed Conv1D layout, not edit quality.
"""

from __future__ import annotations

import pytest
import torch

from kebench.editing.datasets import EditHparamsDataset
from kebench.editing.delta import apply_delta, revert_delta
from kebench.editing.forward import get_module, weight_is_transposed
from kebench.editing.interface import EditContext
from kebench.editing.registry import get_method
from kebench.models.loading import LoadedModel
from kebench.project import PROJECT_ROOT
from tests.editing.cases import demo_requests, output_change_at_key, tiny_gpt2

LAYER = 1


@pytest.fixture(scope="module")
def gpt2(lm) -> LoadedModel:
    return tiny_gpt2(lm, n_embd=64, n_layer=4, n_positions=256)


@pytest.fixture(scope="module")
def gpt2_hparams() -> dict[str, dict]:
    """The gpt2-xl files, on layer 1 of the small model, with short runs."""
    found = (
        EditHparamsDataset(str(PROJECT_ROOT / "conf" / "base" / "hparams"), "gpt2-xl")
        .load()
        .own
    )
    found["ROME"].update(
        layers=[LAYER], mom2_adjustment=False, context_template_length_params=[[3, 2]]
    )
    found["MEMIT"].update(
        layers=[1, 2],
        mom2_n_samples=8,
        context_template_length_params=[[3, 2]],
        v_num_grad_steps=3,
    )
    found["AlphaEdit"].update(
        {
            k: found["MEMIT"][k]
            for k in found["MEMIT"]
            if k
            in (
                "layers",
                "mom2_n_samples",
                "context_template_length_params",
                "v_num_grad_steps",
            )
        }
    )
    found["LoRA"].update(num_steps=2)
    found["GRACE"].update(layers=[LAYER], n_iter=3)
    found["FT-M"].update(layers=[LAYER], num_steps=3)
    found["KN"].update(layers=[0, 1], steps=4, batch_size=4)
    return found


def edit(model: LoadedModel, method: str, hparams: dict, stats_dir):
    entry = get_method(method)
    context = EditContext(stats_dir=stats_dir, pool=demo_requests())
    return entry.compute(
        model, [demo_requests()[0]], entry.hparams.from_dict(hparams[method]), context
    ), context


def test_gpt2_projections_are_transposed(gpt2):
    assert weight_is_transposed(
        get_module(gpt2.model, f"transformer.h.{LAYER}.mlp.c_proj")
    )
    assert get_module(gpt2.model, f"transformer.h.{LAYER}.mlp.c_proj").weight.shape == (
        256,
        64,
    )


@pytest.mark.model
@pytest.mark.parametrize("method", ["ROME", "MEMIT", "AlphaEdit", "FT-M", "KN", "LoRA"])
def test_every_weight_method_runs_and_reverts_exactly(
    gpt2, gpt2_hparams, stats_dir, method
):
    base = {n: t.clone() for n, t in gpt2.model.state_dict().items()}
    delta, _ = edit(gpt2, method, gpt2_hparams, stats_dir)
    assert delta.params
    # FT trains every parameter of the module, as EasyEdit does: GPT-2's bias too;
    # LoRA's gpt2-xl file adapts the fused attention projection
    modules = (
        ("attn.c_attn.weight",)
        if method == "LoRA"
        else ("mlp.c_proj.weight", "mlp.c_proj.bias")
    )
    for name in delta.params:
        assert name.startswith("transformer.h.") and name.endswith(modules)
    applied = apply_delta(gpt2.model, delta)
    changed = {
        n for n, t in gpt2.model.state_dict().items() if not torch.equal(t, base[n])
    }
    assert changed == set(delta.params)
    revert_delta(gpt2.model, applied)
    for name, tensor in gpt2.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name


@pytest.mark.model
def test_grace_keys_and_values_take_conv1d_sizes(gpt2, gpt2_hparams, stats_dir):
    """gpt2-xl's GRACE file puts the codebook at the MLP's input projection c_fc, a
    Conv1D of weight (in 64, out 256): keys are its inputs, values its outputs."""
    delta, _ = edit(gpt2, "GRACE", gpt2_hparams, stats_dir)
    (path,) = delta.codebooks
    book = delta.codebooks[path]
    assert path == f"transformer.h.{LAYER}.mlp.c_fc"
    assert book.keys.shape == (1, 64) and book.values.shape == (1, 256)


@pytest.mark.model
def test_rome_rank_one_change_is_laid_out_for_conv1d(gpt2, gpt2_hparams, stats_dir):
    delta, _ = edit(gpt2, "ROME", gpt2_hparams, stats_dir)
    (change,) = delta.params.values()
    assert change.tensors["left"].shape == (256, 1)  # the input side of a Conv1D weight
    assert change.tensors["right"].shape == (64, 1)
    change_at_key = output_change_at_key(gpt2, delta, demo_requests()[0], ["{}"])
    torch.testing.assert_close(
        change_at_key, change.tensors["right"].T, rtol=1e-3, atol=1e-4
    )


@pytest.mark.model
def test_kn_indexes_conv1d_rows(gpt2, gpt2_hparams, stats_dir):
    delta, _ = edit(gpt2, "KN", gpt2_hparams, stats_dir)
    for change in delta.params.values():
        assert change.kind == "index" and change.dim == 0
        assert change.tensors["values"].shape == (len(change.tensors["index"]), 64)
