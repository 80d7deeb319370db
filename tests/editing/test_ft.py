"""FT-L and FT-M compute what EasyEdit's ``execute_ft`` computes, on the real SmolLM2.

The oracle is a plain fine-tuning loop written here from EasyEdit's description: the
whole model run on the whole sequence, Adam on the named parameters, a step only while
the loss is at least 1e-2, then the L∞ clamp around the base values.
"""

from __future__ import annotations

import pytest
import torch

from kebench.editing.delta import apply_delta, revert_delta
from kebench.editing.interface import EditContext, HparamsError
from kebench.editing.methods.ft import FTHyperParams, finetune
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel
from tests.editing.cases import demo_requests, project_hparams, tiny_gpt2

STEPS = 4


def reference_finetune(  # noqa: PLR0913 - the loop and its settings
    lm: LoadedModel,
    request: EditRequest,
    names: list[str],
    *,
    objective: str,
    lr: float,
    bound: float | None,
) -> dict[str, torch.Tensor]:
    model, tokenizer = lm.model, lm.tokenizer
    params = [model.get_parameter(name) for name in names]
    base = [p.detach().clone() for p in params]
    target = " " + request.target_new
    prompt = tokenizer(request.text)["input_ids"]
    if objective == "prompt_last":
        ids = prompt
        labels = tokenizer(target)["input_ids"]
    else:
        ids = tokenizer(request.text + target)["input_ids"]
        labels = ids[len(prompt) :]
    optimiser = torch.optim.Adam(params, lr=lr)
    for p in params:
        p.requires_grad_(True)
    try:
        for _ in range(STEPS):
            with torch.enable_grad():
                logits = model(input_ids=torch.tensor([ids])).logits[0].float()
                logprobs = torch.log_softmax(logits, dim=-1)
                if objective == "prompt_last":  # every target token at the last one
                    picked = logprobs[len(prompt) - 1][labels]
                else:  # each target token after the ones before it
                    picked = logprobs[range(len(prompt) - 1, len(ids) - 1), labels]
                loss = -picked.sum() / len(labels)
                if loss.item() < 1e-2:  # noqa: PLR2004 - EasyEdit's fixed bound
                    break
                optimiser.zero_grad()
                loss.backward()
            optimiser.step()
            if bound is not None:
                with torch.no_grad():
                    for p, b in zip(params, base, strict=True):
                        p.copy_(torch.minimum(torch.maximum(p, b - bound), b + bound))
        return {
            name: (p.detach() - b).clone()
            for name, p, b in zip(names, params, base, strict=True)
        }
    finally:
        with torch.no_grad():
            for p, b in zip(params, base, strict=True):
                p.requires_grad_(False)
                p.copy_(b)


def hparams_of(method: str, profile: str, **changes) -> FTHyperParams:
    values = {**project_hparams(profile)[method], "num_steps": STEPS, **changes}
    return FTHyperParams.from_dict(values)


@pytest.mark.model
@pytest.mark.parametrize(
    ("method", "profile"),
    [("FT-L", "fast"), ("FT-L", "faithful"), ("FT-M", "faithful")],
)
def test_the_delta_is_the_plain_fine_tuning_loops(lm, stats_dir, method, profile):
    hparams = hparams_of(method, profile)
    (layer,) = hparams.layers
    name = f"model.layers.{layer}.mlp.down_proj.weight"
    context = EditContext(stats_dir=stats_dir)
    for request in demo_requests()[:2]:  # one- and two-token targets
        delta = finetune(lm, [request], hparams, context)
        assert list(delta.params) == [name]
        expected = reference_finetune(
            lm,
            request,
            [name],
            objective=hparams.objective_optimization,
            lr=hparams.lr,
            bound=hparams.bound,
        )[name]
        ours = delta.params[name].tensors["values"]
        # Adam normalises each gradient entry: entries whose gradient is at rounding
        # level may step ±lr either way, so most, not all, entries agree exactly
        close = (ours - expected).abs() <= 1e-7  # noqa: PLR2004
        assert float(close.float().mean()) > 0.999  # noqa: PLR2004
        cosine = torch.nn.functional.cosine_similarity(
            ours.flatten().double(), expected.flatten().double(), dim=0
        )
        assert float(cosine) > 1 - 1e-6


@pytest.mark.model
def test_the_bound_clamps_every_change_and_no_bound_does_not(lm, stats_dir):
    context = EditContext(stats_dir=stats_dir)
    request = demo_requests()[0]
    bounded = hparams_of("FT-L", "fast")
    assert bounded.bound == pytest.approx(5e-4)
    (change,) = finetune(lm, [request], bounded, context).params.values()
    largest = float(change.tensors["values"].abs().max())
    # at the bound (float32 rounding of base ± bound), never past it
    assert largest == pytest.approx(5e-4, rel=1e-3)
    unbounded = hparams_of("FT-L", "fast", norm_constraint=False)
    assert unbounded.bound is None
    (change,) = finetune(lm, [request], unbounded, context).params.values()
    assert float(change.tensors["values"].abs().max()) > 2 * 5e-4


@pytest.mark.model
def test_no_step_is_taken_once_the_loss_is_below_stop_loss(lm, stats_dir):
    hparams = hparams_of("FT-M", "faithful", stop_loss=1e9)
    delta = finetune(lm, [demo_requests()[0]], hparams, EditContext(stats_dir))
    (change,) = delta.params.values()
    assert not change.tensors["values"].any()


@pytest.mark.model
def test_a_template_without_weight_trains_the_projections_bias_too(lm, stats_dir):
    gpt2 = tiny_gpt2(lm)
    values = {
        **project_hparams("faithful")["FT-L"],
        "layers": [1],
        "num_steps": STEPS,
        "norm_constraint": 5e-4,
        "rewrite_module_tmp": "transformer.h.{}.mlp.c_proj",
        "layer_module_tmp": "transformer.h.{}",
    }
    hparams = FTHyperParams.from_dict(values)
    request = demo_requests()[0]
    model = gpt2.model
    base = {n: t.clone() for n, t in model.state_dict().items()}
    delta = finetune(gpt2, [request], hparams, EditContext(stats_dir))
    names = ["transformer.h.1.mlp.c_proj.weight", "transformer.h.1.mlp.c_proj.bias"]
    assert list(delta.params) == names
    expected = reference_finetune(
        gpt2, request, names, objective="prompt_last", lr=5e-4, bound=5e-4
    )
    for name in names:
        ours = delta.params[name].tensors["values"]
        assert float(((ours - expected[name]).abs() <= 1e-7).float().mean()) > 0.999  # noqa: PLR2004
    applied = apply_delta(model, delta)
    revert_delta(model, applied)
    assert all(torch.equal(t, base[n]) for n, t in model.state_dict().items())


@pytest.mark.model
def test_a_template_naming_no_parameter_and_a_kl_term_are_refused(lm):
    values = {**project_hparams("faithful")["FT-L"], "rewrite_module_tmp": "nowhere.{}"}
    with pytest.raises(HparamsError, match="names no parameter"):
        finetune(lm, [demo_requests()[0]], FTHyperParams.from_dict(values), None)
    with pytest.raises(HparamsError, match="kl_factor"):
        FTHyperParams.from_dict({**values, "kl_factor": 0.1})
