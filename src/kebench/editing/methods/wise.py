"""WISE (Wang et al., NeurIPS 2024): a side copy of one FFN projection that edits train,
routed by activation margin, EasyEdit's ``WISE.py`` in its WISE-Retrieve form (every
text model's file there). No weight changes; the delta is the side memory's shards its
edit trained, saved or merged (``kebench.editing.sidememory``, which routes them).

An edit trains the current shard, a full copy of the module's weight, on EasyEdit's
batch: the edit as ``prompt target_new`` after each context template (``{}`` and ten
greedy continuations of "I", "You", "Because", "Yes", "Q: " by the model, 5 and 10
tokens long), and one out-of-scope sentence last. The module answers every row of that
batch with the shard. The loss is the target's NLL over the template rows plus the
activation margin, with d the mean over a row's tokens of ‖act(shard's output) −
act(original output)‖ (``act`` the model's hidden activation), d_in on the template rows
and d_out on the out-of-scope row:
    mean⁺(d_out − d_in + γ) + mean⁺(d_out − α) + mean⁺(β − d_in)
(mean⁺: the mean of the positive terms, 0 when there are none; (α, β, γ) =
``act_margin``). ``n_iter`` SGD steps (``edit_lr``, weight decay 1e-5) update only the
shard's masked entries (a random ``mask_ratio`` of them, drawn once per shard), each
step clamped to within ``norm_constraint`` of the original weight, stopping early when
the loss settles below 0.02. The mean d_in of the last forward lowers the shard's
smallest activation; its threshold is that times ``act_ratio``.

Sequential mode is WISE's purpose: an edit continues the shard the model holds (the
stream's earlier deltas applied) and its count, mask and smallest activation (the
delta's ``state``). Every ``save_freq`` edits the shard is saved and the next edit
starts a new one from the original weight; every ``merge_freq`` edits the last
``merge_freq / save_freq`` saved shards merge into one by TIES (peft's ``ties``: top
``densities`` of each shard's change by magnitude, the majority sign, the mean of the
agreeing changes), whose smallest activation is theirs. In single mode each edit trains
a fresh shard.

The out-of-scope sentence is ``loc_prompts`` of the hparams when given (EasyEdit's
``loc_prompts``), else another request of the run that does not share the subject,
``prompt target_true``; either is picked by the case and the seed.

Deliberate differences from EasyEdit, none of which changes a single edit on a model
whose projection has no bias:
    - routing is per row on its kept tokens (``kebench.editing.sidememory``);
    - a projection's bias stays in the shard's output (EasyEdit drops a Linear's bias
      in training and routing, GPT-J's ``fc_out``);
    - the mask is drawn from the run's seed and the shard, with numpy's legacy
      generator as EasyEdit's global one.
kebench refuses what it does not implement: WISE-Merge (``retrieve: false``), the
replay of Appendix B.3 (``replay: true``), merge algorithms other than TIES, and
EasyEdit's checkpoint files (``save_path``, ``load_path``: pickles).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from peft.utils.merge_utils import ties
from torch import nn
from torch.nn import functional
from transformers.activations import ACT2FN

from kebench.editing import module_hooks
from kebench.editing.delta import Delta
from kebench.editing.forward import Batch, frozen_below, get_module
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.methods.grace import one_module, stable_id
from kebench.editing.methods.lora import IGNORED, left_padding
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.editing.sidememory import (
    CURRENT,
    RETIRED,
    SAVED,
    SideMemory,
    side_output,
)
from kebench.models.loading import LoadedModel

# EasyEdit's context templates: greedy continuations of these words, (tokens, count).
TEMPLATE_WORDS = ("I", "You", "Because", "Yes", "Q: ")
TEMPLATE_LENGTHS = ((5, 5), (10, 5))
WEIGHT_DECAY = 1e-5
# The early stop: the loss moved by at most this, and is at most the next.
SETTLED, LOW_LOSS = 1e-4, 0.02
# A fresh shard's smallest activation (EasyEdit's EditingMeanAct).
NO_ACTIVATION = 1e9
STATE_KEYS = ("count", "next_id", "mask_seed", "min_act", "saved_ids", "saved_acts")


@dataclass
class WISEHyperParams(HyperParams):
    """EasyEdit's WISE keys. The module is ``rewrite_module_tmp`` at the one layer of
    ``layers`` or EasyEdit's ``inner_params``; ``act_margin`` is (α, β, γ).
    ``weights`` scales TIES' inputs equally, which its normalisation cancels."""

    layers: list[int] = field(default_factory=list)
    rewrite_module_tmp: str = ""
    inner_params: list[str] = field(default_factory=list)
    edit_lr: float = 1.0
    n_iter: int = 70
    objective_optimization: str = "only_label"
    mask_ratio: float = 0.2
    act_margin: list[float] = field(default_factory=lambda: [5.0, 20.0, 10.0])
    act_ratio: float = 0.88
    norm_constraint: float = 1.0
    save_freq: int = 500
    merge_freq: int = 1000
    merge_alg: str = "ties"
    densities: float = 0.53
    weights: float = 1.0
    retrieve: bool = True
    replay: bool = False
    use_chat_template: bool = False
    loc_prompts: list[str] = field(default_factory=list)
    batch_size: int = 1
    max_length: int = 30
    save_path: str | None = None
    load_path: str | None = None

    def __post_init__(self) -> None:
        self.layers, self.rewrite_module_tmp = one_module(
            "WISE", self.layers, self.rewrite_module_tmp, self.inner_params
        )
        refused = {
            "retrieve": (self.retrieve, True),
            "replay": (self.replay, False),
            "merge_alg": (self.merge_alg, "ties"),
            "objective_optimization": (self.objective_optimization, "only_label"),
            "save_path": (self.save_path, None),
            "load_path": (self.load_path, None),
        }
        for key, (value, implemented) in refused.items():
            if value != implemented:
                raise HparamsError(
                    f"WISE {key} {value!r}: kebench implements {implemented!r} only "
                    "(kebench.editing.methods.wise)"
                )
        if len(self.act_margin) != 3:  # noqa: PLR2004 - (alpha, beta, gamma)
            raise HparamsError(f"WISE act_margin {self.act_margin}: needs 3 values")
        if self.save_freq < 1 or self.merge_freq % self.save_freq:
            raise HparamsError(
                f"WISE merge_freq {self.merge_freq} must be a multiple of save_freq "
                f"{self.save_freq}"
            )

    @property
    def module_path(self) -> str:
        return self.rewrite_module_tmp.format(self.layers[0])

    @property
    def layer_tmp(self) -> str:
        """The decoder layer's path template (what precedes ``{}``)."""
        return self.rewrite_module_tmp.split("{}")[0] + "{}"


def context_templates(lm: LoadedModel, context: EditContext) -> list[str]:
    """EasyEdit's WISE templates: ``{}`` then each greedy continuation + `` {}``,
    computed once per run with every side memory off (the base model's)."""
    if context.context_templates is not None:
        return [t for group in context.context_templates for t in group]
    key = ("WISE context templates", id(lm.model))
    if key not in context.cache:
        texts = []
        with left_padding(lm.tokenizer), module_hooks.suspended(lm.model):
            words = lm.tokenizer(
                list(TEMPLATE_WORDS), padding=True, return_tensors="pt"
            )
            for length, count in TEMPLATE_LENGTHS:
                beams = count // len(TEMPLATE_WORDS)
                with torch.no_grad():
                    out = lm.model.generate(
                        input_ids=words["input_ids"].to(lm.device),
                        attention_mask=words["attention_mask"].to(lm.device),
                        max_new_tokens=length,
                        num_beams=beams,
                        num_return_sequences=beams,
                        pad_token_id=lm.tokenizer.eos_token_id,
                    )
                texts += lm.tokenizer.batch_decode(out, skip_special_tokens=True)
        context.cache[key] = ["{}"] + [f"{text} {{}}" for text in texts]
    return context.cache[key]


def out_of_scope_prompt(
    request: EditRequest, hparams: WISEHyperParams, context: EditContext
) -> str:
    """The sentence whose activation the shard must leave alone (module docstring)."""
    candidates = list(hparams.loc_prompts) or [
        f"{other.text} {other.target_true}"
        for other in context.pool
        if other.subject != request.subject and other.target_true is not None
    ]
    candidates = [c for c in candidates if c not in request.text]
    if not candidates:
        raise ValueError(
            f"WISE edit {request.case_id}: no out-of-scope sentence; give loc_prompts "
            "in the hparams or edit more than one subject"
        )
    return candidates[stable_id(request.case_id, context.seed) % len(candidates)]


def edit_batch(
    lm: LoadedModel,
    request: EditRequest,
    templates: list[str],
    out_of_scope: str,
    hparams: WISEHyperParams,
) -> dict[str, torch.Tensor]:
    """EasyEdit's WISE inputs: a row per template, then the out-of-scope row, left-
    padded; labels mask the first (padded prompt width) columns of the template rows
    and every padding token, as EasyEdit's ``tokenize`` does."""
    tokenizer, prompt, target = lm.tokenizer, request.text, request.target_new
    if hparams.use_chat_template:
        prompts = [
            tokenizer.apply_chat_template(
                [{"role": "user", "content": t.format(prompt)}],
                add_generation_prompt=True,
                tokenize=False,
            )
            for t in templates
        ]
        texts = [f"{p} {target}" for p in prompts]
    else:
        prompts = [t.format(prompt) for t in templates]
        texts = [t.format(f"{prompt} {target}") for t in templates]
    with left_padding(tokenizer):
        width = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True)[
            "input_ids"
        ].shape[1]
        tokens = tokenizer(
            [*texts, out_of_scope], return_tensors="pt", padding=True, truncation=True
        )
    labels = tokens["input_ids"].clone()
    labels[: len(templates), :width] = IGNORED
    labels[tokens["input_ids"] == tokenizer.pad_token_id] = IGNORED
    return {
        "input_ids": tokens["input_ids"].to(lm.device),
        "attention_mask": tokens["attention_mask"].to(lm.device),
        "labels": labels.to(lm.device),
    }


def target_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """EasyEdit's ``_cal_ft_loss``: per template row, the target tokens' summed NLL
    over the positions from the one before its last masked label on, averaged."""
    start = (labels == IGNORED).sum(dim=-1) - 1
    shifted = logits[:-1, :-1].float()
    nll = functional.cross_entropy(
        shifted.reshape(-1, shifted.shape[-1]),
        labels[:-1, 1:].reshape(-1),
        ignore_index=IGNORED,
        reduction="none",
    ).view(shifted.shape[:2])
    counted = torch.zeros_like(nll, dtype=torch.bool)
    for row, first in enumerate(start[:-1].tolist()):
        counted[row, first - 1 :] = True  # EasyEdit's slice, -1 included
    return ((nll * counted).sum(1) / counted.sum(1)).mean()


def activation_distance(
    original: torch.Tensor, shard: torch.Tensor, activation: nn.Module
) -> torch.Tensor:
    """Per row, the mean over every column of ‖act(original) − act(shard)‖."""
    return torch.linalg.vector_norm(
        activation(original) - activation(shard), dim=-1
    ).mean(dim=-1)


def positive_mean(terms: torch.Tensor) -> torch.Tensor:
    positive = terms[terms > 0]
    return positive.mean() if positive.numel() else terms.new_zeros(())


def margin_loss(
    original: torch.Tensor,
    shard: torch.Tensor,
    activation: nn.Module,
    hparams: WISEHyperParams,
) -> torch.Tensor:
    """The activation margin (module docstring), the last row out of scope."""
    alpha, beta, gamma = hparams.act_margin
    inside = activation_distance(original[:-1], shard[:-1], activation)
    outside = activation_distance(original[-1:], shard[-1:], activation)
    return (
        positive_mean(outside.view(-1, 1) - inside + gamma)
        + positive_mean(outside - alpha)
        + positive_mean(beta - inside)
    )


def shard_mask(seed: torch.Tensor, numel: int, ratio: float) -> torch.Tensor:
    """The entries a shard trains: each with probability ``ratio``, drawn as EasyEdit
    draws them (numpy's legacy generator) from the run's seed and the shard's id."""
    draw = np.random.RandomState(seed.tolist()).choice(
        [1, 0], size=numel, p=[ratio, 1 - ratio]
    )
    return torch.from_numpy(draw)


@dataclass(frozen=True)
class ShardStart:
    """A shard before an edit's steps: its weight, and the entries it trains."""

    weight: torch.Tensor
    mask: torch.Tensor


def train_shard(
    lm: LoadedModel,
    module: nn.Module,
    batch: dict[str, torch.Tensor],
    start: ShardStart,
    hparams: WISEHyperParams,
) -> tuple[torch.Tensor, float]:
    """The shard after this edit's steps from ``start``, and the mean in-scope distance
    of the last forward (module docstring)."""
    activation = ACT2FN[activation_name(lm.model)]
    original = module.weight.detach()
    shard = nn.Parameter(start.weight.detach().clone().to(original))
    mask = start.mask.view(shard.shape).to(original.device)
    optimiser = torch.optim.SGD([shard], hparams.edit_lr, weight_decay=WEIGHT_DECAY)
    seen: dict[str, torch.Tensor] = {}

    def answer(module: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
        seen["original"] = output.detach()
        seen["shard"] = side_output(module, args[0], shard)
        return seen["shard"]

    ids = batch["input_ids"]
    # EasyEdit's forward: positions count every column, padding included
    frozen = Batch(
        ids, batch["attention_mask"], torch.arange(ids.shape[1]).expand_as(ids).to(ids)
    )
    previous, last, reached = 0.0, math.inf, math.nan
    handle = module.register_forward_hook(answer)
    try:
        # the layers below the shard's compute the same every step: once
        with (
            frozen_below(lm.model, hparams.layer_tmp, hparams.layers[0] - 1, frozen),
            torch.enable_grad(),
        ):
            for step in range(hparams.n_iter):
                logits = lm.model(
                    input_ids=frozen.ids,
                    attention_mask=frozen.mask,
                    position_ids=frozen.positions,
                ).logits
                loss = target_loss(logits, batch["labels"]) + margin_loss(
                    seen["original"], seen["shard"], activation, hparams
                )
                settled = abs(last - previous) <= SETTLED and last <= LOW_LOSS
                if settled or step == hparams.n_iter - 1:
                    reached = float(
                        activation_distance(
                            seen["original"][:-1],
                            seen["shard"][:-1].detach(),
                            activation,
                        ).mean()
                    )
                if settled:
                    break
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"WISE's loss is {float(loss)}")
                optimiser.zero_grad()
                loss.backward()
                shard.grad = (shard.grad.view(-1) * mask.view(-1)).view(shard.shape)
                optimiser.step()
                previous, last = last, loss.item()
                with torch.no_grad():
                    shard.copy_(
                        shard.clamp(
                            min=original - hparams.norm_constraint,
                            max=original + hparams.norm_constraint,
                        )
                    )
    finally:
        handle.remove()
    return shard.detach().cpu().float(), reached


def activation_name(model: nn.Module) -> str:
    """The model's hidden activation, as WISE reads it from the config (under the
    names the families give it)."""
    config = model.config
    # Llama and most: hidden_act; GPT-2, GPT-J, OPT: activation_function; Gemma 2
    names = ("hidden_act", "activation_function", "hidden_activation")
    name = next((getattr(config, n) for n in names if getattr(config, n, None)), None)
    if name is None:
        raise HparamsError(
            f"WISE: {type(model).__name__}'s config names no hidden activation"
        )
    return name


@dataclass
class StreamState:
    """Where the side memory's stream stands after an edit (the delta's ``state``)."""

    count: int = 0
    next_id: int = 0
    mask_seed: tuple[int, int] = (0, 0)
    min_act: float = NO_ACTIVATION
    saved_ids: list[int] = field(default_factory=list)
    saved_acts: list[float] = field(default_factory=list)

    @classmethod
    def last(cls, context: EditContext, path: str) -> StreamState:
        for state in reversed(context.earlier):
            if f"{path}/count" in state:
                values = {k: state[f"{path}/{k}"].tolist() for k in STATE_KEYS}
                values["mask_seed"] = tuple(values["mask_seed"])
                return cls(**values)
        return cls()

    def tensors(self, path: str) -> dict[str, torch.Tensor]:
        return {
            f"{path}/count": torch.tensor(self.count),
            f"{path}/next_id": torch.tensor(self.next_id),
            f"{path}/mask_seed": torch.tensor(self.mask_seed),
            f"{path}/min_act": torch.tensor(self.min_act, dtype=torch.float64),
            f"{path}/saved_ids": torch.tensor(self.saved_ids, dtype=torch.long),
            f"{path}/saved_acts": torch.tensor(self.saved_acts, dtype=torch.float64),
        }


def merge_shards(
    original: torch.Tensor, shards: torch.Tensor, hparams: WISEHyperParams
) -> torch.Tensor:
    """One shard of ``shards`` by TIES (module docstring); their weights are equal,
    as EasyEdit's are, so peft's normalisation by the agreeing count is WISE's."""
    changes = [shard.double() - original.double() for shard in shards]
    merged = ties(changes, torch.ones(len(changes)), hparams.densities)
    return (original.double() + merged).float()


@register("WISE", WISEHyperParams, carry="last")
def wise(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: WISEHyperParams,
    context: EditContext,
) -> Delta:
    """The shards this edit trained, saved or merged at ``hparams.module_path``."""
    (request,) = requests
    path = hparams.module_path
    module = get_module(lm.model, path)
    original = module.weight.detach().float().cpu()
    stream = StreamState.last(context, path)
    held = module_hooks.active(lm.model, path)
    held = held.to(torch.device("cpu")) if held is not None else None
    if stream.count % hparams.save_freq == 0:
        shard_id, start = stream.next_id, original
        stream.next_id += 1
        stream.mask_seed = (context.seed, shard_id)
        stream.min_act = NO_ACTIVATION
    else:
        (row,) = held.shard(CURRENT)
        shard_id, start = int(held.ids[row]), held.weights[row]
    templates = context_templates(lm, context)
    batch = edit_batch(
        lm, request, templates, out_of_scope_prompt(request, hparams, context), hparams
    )
    with module_hooks.suspended(lm.model):
        mask = shard_mask(
            torch.tensor(stream.mask_seed), original.numel(), hparams.mask_ratio
        )
        weight, reached = train_shard(
            lm, module, batch, ShardStart(start, mask), hparams
        )
    stream.min_act = min(stream.min_act, reached)
    stream.count += 1
    entries = [(shard_id, weight, stream.min_act, CURRENT)]
    if stream.count % hparams.save_freq == 0:
        entries = [(shard_id, weight, stream.min_act, SAVED)]
        stream.saved_ids.append(shard_id)
        stream.saved_acts.append(stream.min_act)
        stream.min_act = NO_ACTIVATION
    if stream.count % hparams.merge_freq == 0:
        entries += merge_entries(held, weight, original, stream, hparams)
    memory = SideMemory(
        ids=torch.tensor([e[0] for e in entries]),
        weights=torch.stack([e[1] for e in entries]),
        thresholds=torch.tensor(
            [e[2] * hparams.act_ratio for e in entries], dtype=torch.float32
        ),
        roles=torch.tensor([e[3] for e in entries]),
        activation=activation_name(lm.model),
    )
    return Delta(
        side_memories={path: memory},
        state=stream.tensors(path),
        meta={"module": path, "shard": str(shard_id), "edits": str(stream.count)},
    )


def merge_entries(
    held: SideMemory | None,
    saved_now: torch.Tensor,
    original: torch.Tensor,
    stream: StreamState,
    hparams: WISEHyperParams,
) -> list[tuple[int, torch.Tensor, float, int]]:
    """The entries that fold the last ``merge_freq / save_freq`` saved shards into one
    (the one just saved among them): theirs retired, the merged one saved."""
    count = hparams.merge_freq // hparams.save_freq
    ids, acts = stream.saved_ids[-count:], stream.saved_acts[-count:]
    weight_of = {stream.saved_ids[-1]: saved_now}
    if held is not None:
        weight_of |= {
            int(i): w for i, w in zip(held.ids.tolist(), held.weights, strict=True)
        } | weight_of
    merged = merge_shards(original, torch.stack([weight_of[i] for i in ids]), hparams)
    merged_id = stream.next_id
    stream.next_id += 1
    del stream.saved_ids[-count:], stream.saved_acts[-count:]
    stream.saved_ids.append(merged_id)
    stream.saved_acts.append(min(acts))
    zeros = torch.zeros_like(original)
    return [(i, zeros, 0.0, RETIRED) for i in ids] + [
        (merged_id, merged, min(acts), SAVED)
    ]
