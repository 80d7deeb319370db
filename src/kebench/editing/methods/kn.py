"""KN: knowledge neurons (Dai et al., 2022), as EasyEdit's port of EleutherAI's
knowledge-neurons computes them.

Neurons. A layer's neurons are the inputs of its MLP's activation function (the
pre-activation: GPT-2's ``c_fc`` output, Llama's ``gate_proj`` output), at the last
token of the prompt; neuron i feeds the output projection's input i.

Attribution. The answer is the old one, ``target_true``, tokenised alone as the
tokenizer encodes it (special tokens included). For each of its tokens t_j, the
neurons' baseline activation x is scaled by α ∈ linspace(0, 1, ``steps``) (in chunks
of ``batch_size`` rows), and the score is x · Σ_α ∂P(t_j)/∂(αx) / ``steps``. The
layer's score is the mean over the answer's tokens. Token j is scored at the prompt's
last token (``greedy_continuation: false``, EasyEdit's GPT-2 and GPT-J port) or after
the model's own greedy continuation of j tokens, the text extended by each decoded
token and tokenised again (``greedy_continuation: true``, its Llama and Qwen port).
The knowledge neurons are those scoring above ``adaptive_threshold`` times the best
score over every layer. With ``refine``, a neuron must be found for more than a
fraction ``p`` of the prompts; EasyEdit's only prompt is the edit's own, so refining
keeps them all unless ``refine_templates`` (kebench) adds the context-template prompts.

Edit. Each knowledge neuron's output weights (its column of the output projection, a
row of GPT-2's Conv1D) move by ``lr_scale`` · (Σ_j e(n_j) − c · Σ_j e(g_j)): e the
input embeddings, n_j the tokens of ``target_new`` tokenised alone, g_j the model's
greedy continuation of as many tokens, c = 2 when that is one token and 1 otherwise
(EasyEdit adds a one-row embedding lookup once and a scalar one twice). EasyEdit does
not read ``lr_scale`` (its files all say 1.0).

kebench's extensions: ``layers`` searches only those layers (empty: all, as
EasyEdit); ``max_neurons`` keeps only the best-scoring neurons (null: all, as
EasyEdit); ``refine_templates`` (above). An injected claim has no old answer, which
EasyEdit refuses: kebench attributes the model's own next token instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from kebench.editing.delta import Delta, ParamDelta
from kebench.editing.forward import (
    Batch,
    by_position,
    frozen_below,
    get_module,
    logits_at,
    weight_is_transposed,
)
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.editing.rewrite import context_templates
from kebench.models.loading import LoadedModel


@dataclass
class KNHyperParams(HyperParams):
    """KN's hparams: EasyEdit's keys, the module templates, and kebench's extensions.

    ``n_toks`` is accepted and unused, as in EasyEdit. ``greedy_continuation`` says
    which of EasyEdit's ports scores a multi-token answer (the module docstring).
    kebench's extensions, off by default: ``layers``, ``max_neurons``,
    ``refine_templates`` (with ``context_template_length_params``).
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
    greedy_continuation: bool = True
    layers: list[int] = field(default_factory=list)
    max_neurons: int | None = None
    refine_templates: bool = False
    context_template_length_params: list[list[int]] = field(
        default_factory=lambda: [[5, 3]]
    )

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.steps % self.batch_size:
            raise HparamsError(
                f"steps {self.steps} must be a positive multiple of batch_size "
                f"{self.batch_size}"
            )
        if not 0.0 <= self.p < 1.0:
            raise HparamsError(f"p {self.p} must be in [0, 1)")


def activation_module(model: nn.Module, rewrite_path: str) -> nn.Module:
    """The activation function of the MLP whose output projection is ``rewrite_path``:
    its input is the neurons' pre-activation (``act``, ``act_fn``, ``activation_fn``)."""
    parent_path = rewrite_path.rpartition(".")[0]
    parent = get_module(model, parent_path)
    for name, child in parent.named_children():
        if "act" in name.lower() and not any(True for _ in child.parameters()):
            return child
    children = [name for name, _ in parent.named_children()]
    raise ValueError(
        f"{parent_path} has no activation-function submodule (children: {children}); "
        "KN scores the neurons at its input"
    )


def answer_ids(lm: LoadedModel, answer: str) -> list[int]:
    """``answer`` tokenised alone, special tokens included (EasyEdit's encoding)."""
    ids = list(lm.tokenizer(answer)["input_ids"])
    if not ids:
        raise ValueError(f"answer {answer!r} has no tokens")
    return ids


@torch.no_grad()
def greedy_steps(
    lm: LoadedModel, prompt: str, n: int
) -> tuple[list[list[int]], list[int]]:
    """The ids read at each of ``n`` greedy steps after ``prompt``, and the token chosen
    at each: the text grows by each chosen token's decoded text and is tokenised again."""
    text, contexts, chosen = prompt, [], []
    for _ in range(n):
        ids = list(lm.tokenizer(text)["input_ids"])
        logits = lm.model(
            input_ids=torch.tensor([ids], device=lm.device), logits_to_keep=1
        ).logits
        token = int(logits[0, -1].argmax())
        contexts.append(ids)
        chosen.append(token)
        text += lm.tokenizer.decode([token])
    return contexts, chosen


def attribution(
    lm: LoadedModel,
    context_ids: list[int],
    token: int,
    hparams: KNHyperParams,
    layer: int,
) -> torch.Tensor:
    """Integrated-gradients score of every neuron of ``layer`` for P(``token``) at the
    last position of ``context_ids``."""
    model = lm.model
    last = len(context_ids) - 1
    batch = Batch.of(
        [context_ids] * hparams.batch_size, lm.tokenizer.pad_token_id, lm.device
    )
    path = hparams.rewrite_module_tmp.format(layer)
    module = activation_module(model, path)
    alphas = torch.linspace(0, 1, hparams.steps, device=lm.device)
    state: dict[str, torch.Tensor] = {}

    def scale(_module: nn.Module, args: tuple) -> tuple:
        if "alphas" not in state:
            raise ValueError(
                f"the activation function of {path} runs twice in one forward pass "
                "(one module shared by several layers?): KN cannot tell its layers apart"
            )
        flat = args[0]
        hidden = by_position(flat, batch.ids.shape)
        activation = hidden[0, last].detach()
        scaled = (
            (state["alphas"][:, None] * activation[None])
            .to(hidden.dtype)
            .requires_grad_(True)
        )
        state["activation"], state["scaled"] = activation, scaled
        del state["alphas"]
        mask = torch.zeros(
            hidden.shape[:2] + (1,), dtype=hidden.dtype, device=hidden.device
        )
        mask[:, last] = 1
        scaled_hidden = hidden * (1 - mask) + mask * scaled[:, None, :]
        return (scaled_hidden.reshape(flat.shape),) + args[1:]

    rows = torch.arange(hparams.batch_size, device=lm.device)
    cols = torch.full((hparams.batch_size,), last, device=lm.device)
    total = None
    handle = module.register_forward_pre_hook(scale)
    try:
        with (
            frozen_below(model, hparams.layer_module_tmp, layer - 1, batch),
            torch.enable_grad(),
        ):
            for chunk in alphas.split(hparams.batch_size):
                state["alphas"] = chunk
                probs = torch.softmax(logits_at(model, batch, rows, cols), dim=-1)
                (grads,) = torch.autograd.grad(probs[:, token].sum(), state["scaled"])
                summed = grads.float().sum(dim=0)
                total = summed if total is None else total + summed
    finally:
        handle.remove()
    return state["activation"].float() * total / hparams.steps


def layer_scores(
    lm: LoadedModel,
    prompt: str,
    answer: list[int],
    hparams: KNHyperParams,
    layers: list[int],
) -> torch.Tensor:
    """(layers, neurons) scores for ``answer``'s tokens after ``prompt``, each layer's the
    mean over the tokens."""
    if hparams.greedy_continuation:
        contexts, _ = greedy_steps(lm, prompt, len(answer))
    else:
        contexts = [list(lm.tokenizer(prompt)["input_ids"])] * len(answer)
    return torch.stack(
        [
            torch.stack(
                [
                    attribution(lm, ids, token, hparams, layer)
                    for ids, token in zip(contexts, answer, strict=True)
                ]
            ).mean(dim=0)
            for layer in layers
        ]
    )


def knowledge_neurons(
    lm: LoadedModel,
    prompts: list[str],
    answer: list[int],
    hparams: KNHyperParams,
    n_layers: int,
) -> list[tuple[int, int]]:
    """(layer, neuron) pairs above the adaptive threshold, refined over ``prompts``."""
    layers = hparams.layers or list(range(n_layers))
    found: Counter = Counter()
    best: dict[tuple[int, int], float] = {}
    for prompt in prompts:
        scores = layer_scores(lm, prompt, answer, hparams, layers)
        threshold = float(scores.max()) * hparams.adaptive_threshold
        for row, neuron in (scores > threshold).nonzero().tolist():
            key = (layers[row], neuron)
            found[key] += 1
            best[key] = max(best.get(key, float("-inf")), float(scores[row, neuron]))
    needed = hparams.p * len(prompts) if hparams.refine else 0
    kept = [key for key, count in found.items() if count > needed]
    if hparams.max_neurons is not None:
        kept = sorted(kept, key=lambda key: -best[key])[: hparams.max_neurons]
    return kept


def neuron_shift(
    lm: LoadedModel, request: EditRequest, lr_scale: float
) -> torch.Tensor:
    """What every knowledge neuron's output weights move by (the module docstring)."""
    embeddings = lm.model.get_input_embeddings().weight.detach()
    new = answer_ids(lm, request.target_new)
    _, greedy = greedy_steps(lm, request.text, len(new))
    factor = 2.0 if len(greedy) == 1 else 1.0
    shift = embeddings[new].float().sum(dim=0) - factor * embeddings[
        greedy
    ].float().sum(dim=0)
    return (lr_scale * shift).cpu()


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
    groups = [["{}"]]
    if hparams.refine_templates:
        groups = context_templates(lm, hparams.context_template_length_params, context)
    prompts = [t.replace("{}", request.text, 1) for group in groups for t in group]
    if request.target_true is None:
        _, old = greedy_steps(lm, request.text, 1)
    else:
        old = answer_ids(lm, request.target_true)
    neurons = knowledge_neurons(
        lm, prompts, old, hparams, model.config.num_hidden_layers
    )
    shift = neuron_shift(lm, request, hparams.lr_scale)
    by_layer: dict[int, list[int]] = {}
    for layer, neuron in neurons:
        by_layer.setdefault(layer, []).append(neuron)
    params = {}
    for layer, indices in sorted(by_layer.items()):
        path = hparams.rewrite_module_tmp.format(layer)
        index = torch.tensor(sorted(indices), dtype=torch.long)
        if weight_is_transposed(get_module(model, path)):
            values, dim = shift[None].repeat(len(index), 1), 0
        else:
            values, dim = shift[:, None].repeat(1, len(index)), 1
        params[f"{path}.weight"] = ParamDelta(
            "index", {"index": index, "values": values}, dim=dim
        )
    return Delta(params=params, meta={"neurons": str(len(neurons))})
