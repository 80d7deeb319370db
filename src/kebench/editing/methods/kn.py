"""KN: knowledge neurons (Dai et al., 2022), the method the paper also evaluated.

Attribution: for each layer, the MLP's intermediate activation x at the prompt's last
token (the input of the output projection) is scaled by α from 0 to 1 in ``steps``
points; integrated gradients of P(first token of target_true) give each neuron's
score x_i · mean_α ∂P/∂x_i. Neurons scoring above ``adaptive_threshold`` times the
best score are the fact's knowledge neurons (with ``refine``, only those found for at
least a fraction ``p`` of the context-template prompts are kept).

Edit: each knowledge neuron's output weights (its column of the output projection)
move by ``lr_scale`` · (e_new − e_true), with e the output embeddings of the targets'
first tokens. The delta holds just those columns. An injected claim has no stated old
answer: the model's own next token after the prompt stands in for it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch

from kebench.editing.delta import Delta, ParamDelta
from kebench.editing.forward import (
    Batch,
    by_position,
    frozen_below,
    get_module,
    logits_at,
    weight_is_transposed,
)
from kebench.editing.interface import EditContext, HyperParams
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.editing.rewrite import context_templates
from kebench.models.loading import LoadedModel
from kebench.scoring.logprobs import encode_pair


@dataclass
class KNHyperParams(HyperParams):
    """KN's hparams: EasyEdit's keys, plus the module templates kebench needs.

    ``layers`` (kebench): the layers searched (default: all); ``max_neurons`` caps the
    neurons edited, best first (null: no cap, as in EasyEdit).
    """

    rewrite_module_tmp: str
    layer_module_tmp: str
    lr_scale: float = 1.0
    n_toks: int = 10
    refine: bool = False
    batch_size: int = 20
    steps: int = 20
    adaptive_threshold: float = 0.2
    p: float = 0.4
    layers: list[int] = field(default_factory=list)
    max_neurons: int | None = 20
    context_template_length_params: list[list[int]] = field(
        default_factory=lambda: [[5, 3]]
    )


def attribution(
    lm: LoadedModel, prompt: str, answer: str, hparams: KNHyperParams, layer: int
) -> torch.Tensor:
    """Integrated-gradients score of every neuron of ``layer`` for ``answer``'s first token."""
    model = lm.model
    prompt_ids, answer_ids = encode_pair(lm.tokenizer, prompt, answer)
    last = len(prompt_ids) - 1
    steps = hparams.steps
    batch = Batch.of([prompt_ids] * steps, lm.tokenizer.pad_token_id, lm.device)
    module = get_module(model, hparams.rewrite_module_tmp.format(layer))
    alphas = (torch.arange(steps, device=lm.device, dtype=torch.float32) + 0.5) / steps
    state: dict[str, torch.Tensor] = {}

    def scale(_module: torch.nn.Module, args: tuple) -> tuple:
        flat = args[0]
        hidden = by_position(flat, batch.ids.shape)
        activation = hidden[0, last].detach()
        scaled = (
            (alphas[:, None] * activation[None]).to(hidden.dtype).requires_grad_(True)
        )
        state["activation"], state["scaled"] = activation, scaled
        mask = torch.zeros(
            hidden.shape[:2] + (1,), dtype=hidden.dtype, device=hidden.device
        )
        mask[:, last] = 1
        scaled_hidden = hidden * (1 - mask) + mask * scaled[:, None, :]
        return (scaled_hidden.reshape(flat.shape),) + args[1:]

    handle = module.register_forward_pre_hook(scale)
    rows = torch.arange(steps, device=lm.device)
    cols = torch.full((steps,), last, device=lm.device)
    try:
        with (
            frozen_below(model, hparams.layer_module_tmp, layer - 1, batch),
            torch.enable_grad(),
        ):
            probs = torch.softmax(logits_at(model, batch, rows, cols), dim=-1)[
                :, answer_ids[0]
            ]
            (grads,) = torch.autograd.grad(probs.sum(), state["scaled"])
    finally:
        handle.remove()
    return state["activation"].float() * grads.float().mean(dim=0)


def knowledge_neurons(
    lm: LoadedModel,
    prompts: list[str],
    answer: str,
    hparams: KNHyperParams,
    n_layers: int,
) -> list[tuple[int, int]]:
    """(layer, neuron) pairs above the adaptive threshold, refined over ``prompts``."""
    layers = hparams.layers or list(range(n_layers))
    found: Counter = Counter()
    best: dict[tuple[int, int], float] = {}
    for prompt in prompts:
        scores = torch.stack(
            [attribution(lm, prompt, answer, hparams, layer) for layer in layers]
        )
        threshold = hparams.adaptive_threshold * scores.max()
        for row, neuron in (scores > threshold).nonzero().tolist():
            key = (layers[row], neuron)
            found[key] += 1
            best[key] = max(best.get(key, 0.0), float(scores[row, neuron]))
    needed = hparams.p * len(prompts) if hparams.refine else 1
    kept = [key for key, count in found.items() if count >= needed]
    return sorted(kept, key=lambda key: -best[key])[: hparams.max_neurons]


@torch.no_grad()
def greedy_next_token(lm: LoadedModel, text: str) -> str:
    """The model's most likely next token after ``text``, as text."""
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]
    logits = lm.model(input_ids=ids.to(lm.model.device), logits_to_keep=1).logits
    return lm.tokenizer.decode(int(logits[0, -1].argmax()))


@register("KN", KNHyperParams)
def kn(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: KNHyperParams,
    context: EditContext,
) -> Delta:
    """Move the knowledge neurons of ``requests[0]``'s old answer towards its new one."""
    (request,) = requests
    model = lm.model
    prompts = [request.text]
    if hparams.refine:
        templates = context_templates(
            lm, hparams.context_template_length_params, context
        )
        prompts = [t.replace("{}", request.text, 1) for t in templates]
    old = request.target_true
    if old is None:
        old = greedy_next_token(lm, request.text)
    neurons = knowledge_neurons(
        lm, prompts, old, hparams, model.config.num_hidden_layers
    )
    embeddings = model.get_output_embeddings().weight
    first = [
        encode_pair(lm.tokenizer, request.text, t)[1][0]
        for t in (request.target_new, old)
    ]
    shift = (
        (hparams.lr_scale * (embeddings[first[0]] - embeddings[first[1]])).float().cpu()
    )
    by_layer: dict[int, list[int]] = {}
    for layer, neuron in neurons:
        by_layer.setdefault(layer, []).append(neuron)
    params = {}
    for layer, indices in sorted(by_layer.items()):
        path = hparams.rewrite_module_tmp.format(layer)
        index = torch.tensor(sorted(indices), dtype=torch.long)
        if weight_is_transposed(get_module(model, path)):
            params[f"{path}.weight"] = ParamDelta(
                "index",
                {"index": index, "values": shift[None].repeat(len(index), 1)},
                dim=0,
            )
        else:
            params[f"{path}.weight"] = ParamDelta(
                "index",
                {"index": index, "values": shift[:, None].repeat(1, len(index))},
                dim=1,
            )
    return Delta(params=params, meta={"neurons": str(len(neurons))})
