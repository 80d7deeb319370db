"""LoRA fine-tuning on the new fact, through ``peft``: EasyEdit's ``lora_main.execute_lora``.

Adapters (``rank``, ``lora_alpha``, ``lora_dropout``) go on every module whose name
ends with one of ``target_modules``, at ``layers`` (empty: every layer). ``lora_type``
picks peft's ``LoraConfig`` (``lora``) or ``AdaLoraConfig`` (``adalora``: SVD-form
adapters P Λ Q). The text is ``prompt + " " + target_new``. The labels are its tokens
with the prompt's own token count masked, so the loss is the causal LM's mean NLL of
the target, as peft's model computes it (AdaLoRA's adds its orthogonality term). Adam
(``lr``, ``weight_decay``) takes ``num_steps`` steps over the requests in chunks of
``batch_size``, with no early stop.

The model's own modules stay in eval mode, as in EasyEdit, where nothing switches
them to training; peft's new adapter modules are made in training mode, so
``lora_dropout`` drops adapter inputs while training, in EasyEdit as here. The adapters'
initialisation (peft's: LoRA's A Kaiming-uniform and B zero, AdaLoRA's A, B and Λ
normal) and the dropout draw from the run's seed, so a rerun makes the same delta.

The delta is each adapter's product in its exact low-rank form (``W += left @
rightᵀ``), with the scale peft's layer applies: s·B and Aᵀ, s = lora_alpha / rank, for
LoRA; s·B and (Λ ⊙ A)ᵀ, s = lora_alpha / (r + 1e-5), for AdaLoRA. AdaLoRA's adapters
have peft's ``init_r`` (12), not ``rank``: AdaLoRA ignores ``r`` (its ``target_r``, 8, is
the rank reallocation would prune to), in EasyEdit as here. So apply and revert stay
exact, and a delta file holds about 2·r·(d_in + d_out) floats per adapted module, twice
that with the adapters kept for a sequential stream (``state``).

Sequential mode is EasyEdit's too: there the next edit goes on training the same
adapters with a new optimiser. So each delta keeps its adapters in its ``state``. The
next edit takes them from ``EditContext.earlier``, trains them on the model without
their product, and returns the change of the product, new minus old (rank 2r).

AdaLoRA's rank reallocation (``update_and_allocate``) is never called in EasyEdit's
loop, so its adapters keep their rank. Current peft refuses an AdaLoRA config without
``total_step``, which EasyEdit does not pass; kebench passes ``num_steps``, the
schedule's length, which nothing reads without reallocation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from torch import nn

from kebench.editing.delta import Delta, ParamDelta, delta_applied
from kebench.editing.forward import get_module, outer_change
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel

LORA_TYPES = ("lora", "adalora")
# peft's name of the one adapter kebench trains.
ADAPTER = "default"
# Labels peft's loss ignores.
IGNORED = -100
# AdaLoRA divides its product by (rank + this), as peft's get_delta_weight does.
ADALORA_EPS = 1e-5
# A state key: an adapted module's adapter tensor (A, B, and AdaLoRA's E) or the scale
# of its product.
STATE_KEY = "adapter/{}/{}"
SCALE = "scale"


@dataclass
class LoRAHyperParams(HyperParams):
    """EasyEdit's LoRA keys. ``kl_factor``, ``norm_constraint`` and ``max_length``
    are read by EasyEdit's class and used by none of its LoRA code; kebench accepts
    them likewise. kebench edits one request per call, so ``batch_size`` (EasyEdit's
    chunk of requests per Adam step) does not change the result."""

    target_modules: list[str]
    lora_type: str = "lora"
    layers: list[int] = field(default_factory=list)
    num_steps: int = 70
    lr: float = 5e-3
    weight_decay: float = 0.0
    rank: int = 8
    lora_alpha: float = 32
    lora_dropout: float = 0.1
    batch_size: int = 1
    max_length: int = 40
    kl_factor: float = 0.0
    norm_constraint: float | bool = False

    def __post_init__(self) -> None:
        if self.lora_type not in LORA_TYPES:
            raise HparamsError(
                f"lora_type {self.lora_type!r}: use one of {list(LORA_TYPES)}"
            )

    def peft_config(self) -> object:
        from peft import AdaLoraConfig, LoraConfig, TaskType  # noqa: PLC0415 - heavy

        common = {
            "task_type": TaskType.CAUSAL_LM,
            "inference_mode": False,
            "r": self.rank,
            "lora_alpha": self.lora_alpha,
            "lora_dropout": self.lora_dropout,
            "layers_to_transform": self.layers or None,
            "target_modules": self.target_modules,
        }
        if self.lora_type == "adalora":
            return AdaLoraConfig(total_step=self.num_steps, **common)
        return LoraConfig(**common)


def adapted_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Module path -> peft's adapter layer, for every module peft adapted."""
    from peft.tuners.tuners_utils import BaseTunerLayer  # noqa: PLC0415 - heavy

    return {
        name: module
        for name, module in model.named_modules()
        if isinstance(module, BaseTunerLayer)
    }


def adapter_tensors(layer: nn.Module, lora_type: str) -> dict[str, torch.Tensor]:
    """An adapter layer's trained tensors, by its parameter names, and the scale of
    its product as peft's layer has it (``scale``, a 0-d tensor)."""
    if lora_type == "adalora":
        parts = {"A": layer.lora_A, "B": layer.lora_B, "E": layer.lora_E}
        found = {key: part[ADAPTER].detach().clone() for key, part in parts.items()}
        rank = float(layer.ranknum[ADAPTER])
        scale = layer.scaling[ADAPTER] / (rank + ADALORA_EPS)
    else:
        found = {
            "A": layer.lora_A[ADAPTER].weight.detach().clone(),
            "B": layer.lora_B[ADAPTER].weight.detach().clone(),
        }
        scale = layer.scaling[ADAPTER]
    found[SCALE] = torch.tensor(float(scale))
    return found


def load_adapter(layer: nn.Module, tensors: Mapping[str, torch.Tensor]) -> None:
    """Set an adapter layer's tensors (the previous edit's, to go on training)."""
    with torch.no_grad():
        for key, tensor in tensors.items():
            if key == SCALE:
                continue  # the layer's own, from the same hparams
            part = getattr(layer, f"lora_{key}")[ADAPTER]
            target = part.weight if isinstance(part, nn.Module) else part
            target.copy_(tensor.to(target))


def product_factors(
    tensors: Mapping[str, torch.Tensor],
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out_vecs, in_vecs) with the adapter's ΔW = out_vecs @ in_vecsᵀ (module docstring)."""
    scale = float(tensors[SCALE])
    if "E" in tensors:
        return tensors["B"] * scale, (tensors["A"] * tensors["E"]).T
    return tensors["B"] * scale, tensors["A"].T


def target_labels(
    tokenizer: object, prompts: list[str], targets: list[str], device: torch.device
) -> dict[str, torch.Tensor]:
    """EasyEdit's inputs and labels: ``prompt target`` left-padded, with the prompt's
    token count and the padding masked."""
    prompt_ids = tokenizer(prompts, return_tensors="pt", padding=True, truncation=True)
    prompt_lengths = [
        int((row != tokenizer.pad_token_id).sum()) for row in prompt_ids["input_ids"]
    ]
    texts = [
        f"{prompt} {target}" for prompt, target in zip(prompts, targets, strict=True)
    ]
    tokens = tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
    labels = tokens["input_ids"].clone()
    for row, prompt_length in enumerate(prompt_lengths):
        padding = int((labels[row] == tokenizer.pad_token_id).sum())
        labels[row, padding : padding + prompt_length] = IGNORED
    labels[tokens["input_ids"] == tokenizer.pad_token_id] = IGNORED
    return {
        "input_ids": tokens["input_ids"].to(device),
        "attention_mask": tokens["attention_mask"].to(device),
        "labels": labels.to(device),
    }


@contextmanager
def left_padding(tokenizer: object) -> Iterator[None]:
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        yield
    finally:
        tokenizer.padding_side = side


def previous_adapters(context: EditContext) -> dict[str, dict[str, torch.Tensor]]:
    """Module path -> the adapter tensors of the stream's last applied edit (none
    outside sequential mode)."""
    for state in reversed(context.earlier):
        found: dict[str, dict[str, torch.Tensor]] = {}
        for key, tensor in state.items():
            kind, _, rest = key.partition("/")
            if kind == "adapter":
                path, _, part = rest.rpartition("/")
                found.setdefault(path, {})[part] = tensor
        if found:
            return found
    return {}


def without_previous(
    lm: LoadedModel, previous: Mapping[str, Mapping[str, torch.Tensor]]
) -> Delta:
    """The change that takes the previous adapters' product off the weights."""
    params = {}
    for path, tensors in previous.items():
        out_vecs, in_vecs = product_factors(tensors)
        params[f"{path}.weight"] = outer_change(
            get_module(lm.model, path), -out_vecs, in_vecs
        )
    return Delta(params)


def train_adapters(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: LoRAHyperParams,
    context: EditContext,
    previous: Mapping[str, Mapping[str, torch.Tensor]],
) -> dict[str, dict[str, torch.Tensor]]:
    """Attach peft's adapters (seeded, or the previous ones), train them, detach them:
    each adapted module's trained tensors. The model comes back as it was; so does the
    global random state (the seeded one is forked)."""
    from peft import get_peft_model  # noqa: PLC0415 - heavy

    model = lm.model
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    cuda = [lm.device.index or 0] if lm.device.type == "cuda" else []
    with torch.random.fork_rng(devices=cuda):
        torch.manual_seed(context.seed)
        peft_model = get_peft_model(model, hparams.peft_config())
        try:
            layers = adapted_modules(model)
            for path, tensors in previous.items():
                load_adapter(layers[path], tensors)
            train(lm, peft_model, requests, hparams)
            return {
                path: {
                    k: t.cpu()
                    for k, t in adapter_tensors(layer, hparams.lora_type).items()
                }
                for path, layer in layers.items()
            }
        finally:
            peft_model.unload()
            for name, param in model.named_parameters():
                param.requires_grad_(flags[name])


def train(
    lm: LoadedModel,
    peft_model: nn.Module,
    requests: list[EditRequest],
    hparams: LoRAHyperParams,
) -> None:
    """EasyEdit's loop: ``num_steps`` passes over the requests in chunks of
    ``batch_size``, one Adam step per chunk."""
    trained = [p for p in peft_model.parameters() if p.requires_grad]
    optimiser = torch.optim.Adam(
        trained, lr=hparams.lr, weight_decay=hparams.weight_decay
    )
    prompts = [r.text for r in requests]
    targets = [r.target_new for r in requests]
    size = max(hparams.batch_size, 1)
    with left_padding(lm.tokenizer), torch.enable_grad():
        for _ in range(hparams.num_steps):
            for start in range(0, len(requests), size):
                optimiser.zero_grad()
                inputs = target_labels(
                    lm.tokenizer,
                    prompts[start : start + size],
                    targets[start : start + size],
                    lm.device,
                )
                loss = peft_model(**inputs).loss
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"LoRA's loss is {float(loss)}")
                loss.backward()
                optimiser.step()


@register("LoRA", LoRAHyperParams, carry="last")
def lora(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: LoRAHyperParams,
    context: EditContext,
) -> Delta:
    """The adapters' product (in sequential mode, its change) as low-rank factors."""
    previous = previous_adapters(context)
    with delta_applied(lm.model, without_previous(lm, previous)):
        adapters = train_adapters(lm, requests, hparams, context, previous)
    params: dict[str, ParamDelta] = {}
    state = {}
    for path, tensors in adapters.items():
        out_vecs, in_vecs = product_factors(tensors)
        if path in previous:
            old_out, old_in = product_factors(previous[path])
            out_vecs = torch.cat([out_vecs, -old_out.to(out_vecs)], dim=1)
            in_vecs = torch.cat([in_vecs, old_in.to(in_vecs)], dim=1)
        params[f"{path}.weight"] = outer_change(
            get_module(lm.model, path), out_vecs, in_vecs
        )
        state.update({STATE_KEY.format(path, k): t for k, t in tensors.items()})
    return Delta(params=params, state=state, meta={"lora_type": hparams.lora_type})
