"""UltraEdit (Gu et al., 2025): a closed-form, training-free lifelong update from
normalised features, EasyEdit's ``ULTRAEDIT.py`` with the lifelong normaliser its
paper describes.

For each module of ``inner_params``, an edit traces the module's input k and the
gradient g of the edit's loss with respect to its output, at every token its attention
mask keeps (``token: mask``) or at the answer's tokens (``ans``). The text is ``prompt``
+ " " + ``target_new``, in chunks of ``batch_size_once`` requests, left-padded; the loss
is the mean cross-entropy of the target's tokens, which end the text. A running mean
and variance of the features [k, g] (one per module shape, shared by the modules of
that shape, as in EasyEdit) is updated with every chunk, then normalises them:
[k̂, ĝ]. Each token's target change is v = −``lr``·‖k̂‖²·ĝ, and the update solves the
ridge problem on the raw keys: ΔW = (KᵀK + I)⁻¹ Kᵀ V (input × output layout). kebench
stores it as exact low-rank factors through the push-through identity
ΔW = Kᵀ (KKᵀ + I)⁻¹ V: rank = traced tokens, computed in float64.

Lifelong: in sequential mode the normaliser's state (count, mean, summed variance,
standard deviation per shape) is the delta's ``state`` and the next edit continues
from it, as the UltraEdit paper's lifelong normalisation does. EasyEdit's executor
means to keep it across calls (``is_init``) but never sets the flag, so each of its
calls starts a new normaliser; ``carry_normaliser: false`` reproduces that. In single
mode every edit starts from an empty normaliser either way.

Deliberate differences from EasyEdit, none of which changes an edit of one request or
of requests whose targets are the same length, on a tokenizer without BOS (SmolLM2,
GPT-2): EasyEdit's labels are the targets tokenised alone and padded, so a padded
chunk trains its shorter targets' padding as labels, and a BOS tokenizer (Llama 3)
shifts them by one; kebench's labels are the target's tokens at the end of the text,
the rest masked. EasyEdit's ``token: ans`` indexes the first columns of the text with
the labels' mask; kebench's takes the answer's tokens. EasyEdit's ``half`` casts its
model to float16; kebench leaves the model's precision to the run (a runtime key).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from kebench.editing.delta import Delta
from kebench.editing.forward import get_module, outer_change
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.methods.lora import IGNORED, left_padding
from kebench.editing.module_hooks import by_token
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel

TOKENS = ("mask", "ans")
MOMENTS = ("n", "mean", "var", "std")
STATE_KEY = "normaliser/{}x{}/{}"


@dataclass
class UltraEditHyperParams(HyperParams):
    """EasyEdit's UltraEdit keys, and kebench's ``carry_normaliser``. ``batch_size``
    is the requests per delta in batch mode (EasyEdit's requests per call).
    ``editor_batch_size``, ``dropout`` and ``no_grad_layers`` are read and not used
    by EasyEdit's UltraEdit (its normalisation is row by row whatever the chunk), and
    accepted likewise."""

    inner_params: list[str]
    lr: float = 1e-6
    token: str = "mask"
    batch_size: int = 100
    batch_size_once: int = 10
    editor_batch_size: int = 1024
    carry_normaliser: bool = True
    dropout: float = 0.0
    no_grad_layers: Any = None
    max_length: int = 40

    def __post_init__(self) -> None:
        if self.token not in TOKENS:
            raise HparamsError(f"UltraEdit token {self.token!r}: use one of {TOKENS}")
        if not self.inner_params or self.batch_size_once < 1:
            raise HparamsError(
                "UltraEdit needs inner_params and batch_size_once >= 1; got "
                f"{self.inner_params}, {self.batch_size_once}"
            )

    @property
    def modules(self) -> list[str]:
        return [name.removesuffix(".weight") for name in self.inner_params]


class RunningMoments:
    """EasyEdit's (MALMEN's) ``RunningMeanStd``, float32: a running mean and summed
    variance of feature rows, and the standard deviation that normalises them. A
    chunk of one row (``token: ans`` on a one-token answer) adds no variance, where
    EasyEdit's sum turns NaN."""

    def __init__(self, size: int, state: Mapping[str, torch.Tensor] | None = None):
        state = state or {
            "n": torch.zeros(1),
            "mean": torch.zeros(size),
            "var": torch.zeros(size),
            "std": torch.zeros(size),
        }
        self.moments = {k: state[k].detach().float().clone() for k in MOMENTS}

    def update(self, rows: torch.Tensor) -> None:
        m = self.moments
        count = rows.shape[0]
        n = m["n"] + count
        shift = rows.mean(0) - m["mean"]
        m["mean"] = m["mean"] + count * shift / n
        # one row has no sample variance: EasyEdit's is NaN there, kebench's zero
        spread = rows.var(0) if count > 1 else torch.zeros_like(shift)
        m["var"] = m["var"] + count * spread + m["n"] * count * shift.pow(2) / n
        m["std"] = (m["var"] / (n - 1 + torch.finfo(rows.dtype).eps)).sqrt()
        m["n"] = n

    def normalise(self, rows: torch.Tensor) -> torch.Tensor:
        m = self.moments
        return (rows - m["mean"]) / (m["std"] + torch.finfo(rows.dtype).eps)


def module_shape(module: nn.Module) -> tuple[int, int]:
    """(d_in, d_out) of a Linear or Conv1D (EasyEdit's ``get_shape``)."""
    shape = tuple(module.weight.shape)
    return shape[::-1] if isinstance(module, nn.Linear) else shape


def chunk_inputs(
    tokenizer: object, requests: list[EditRequest], device: torch.device
) -> dict[str, torch.Tensor]:
    """``prompt target`` left-padded, and labels: the target's tokens at the end."""
    targets = [
        ("" if r.target_new.startswith(" ") else " ") + r.target_new for r in requests
    ]
    with left_padding(tokenizer):
        tokens = tokenizer(
            [r.text + t for r, t in zip(requests, targets, strict=True)],
            padding=True,
            return_tensors="pt",
        )
    labels = torch.full_like(tokens["input_ids"], IGNORED)
    for row, target in enumerate(targets):
        n = len(tokenizer(target, add_special_tokens=False)["input_ids"])
        labels[row, -n:] = tokens["input_ids"][row, -n:]
    return {
        "input_ids": tokens["input_ids"].to(device),
        "attention_mask": tokens["attention_mask"].to(device),
        "labels": labels.to(device),
    }


def trace(
    lm: LoadedModel, modules: dict[str, nn.Module], inputs: dict, token: str
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per module: its inputs K and the loss's gradients G at its outputs, at the
    traced tokens (rows in row-major order), float32."""
    chosen = (
        inputs["attention_mask"] if token == "mask" else inputs["labels"] != IGNORED
    )
    where = torch.where(chosen.bool())
    rows = chosen.shape[0]
    seen: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}

    def keep(name: str):
        def hook(_module: nn.Module, args: tuple, output: torch.Tensor) -> None:
            seen[name] = (by_token(args[0], rows)[where].detach(), output)

        return hook

    handles = [m.register_forward_hook(keep(n)) for n, m in modules.items()]
    flags = {n: m.weight.requires_grad for n, m in modules.items()}
    try:
        for module in modules.values():
            # the outputs must carry gradients; the weights' own are never read
            module.weight.requires_grad_(True)
        with torch.enable_grad():
            logits = lm.model(
                input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]
            ).logits
            # the prediction at each position is of the next token
            labels = inputs["labels"][:, 1:]
            answer = labels != IGNORED
            loss = nn.functional.cross_entropy(
                logits[:, :-1][answer].float(), labels[answer]
            )
            grads = torch.autograd.grad(loss, [seen[n][1] for n in modules])
    finally:
        for handle in handles:
            handle.remove()
        for name, module in modules.items():
            module.weight.requires_grad_(flags[name])
    return {
        name: (seen[name][0].float(), by_token(grad, rows)[where].float())
        for name, grad in zip(modules, grads, strict=True)
    }


def earlier_moments(context: EditContext) -> dict[tuple[int, int], dict]:
    """(d_in, d_out) -> the normaliser state of the stream's last edit (none outside
    sequential mode)."""
    for state in reversed(context.earlier):
        found: dict[tuple[int, int], dict] = {}
        for key, tensor in state.items():
            kind, _, rest = key.partition("/")
            if kind == "normaliser":
                shape, _, moment = rest.partition("/")
                d_in, d_out = (int(x) for x in shape.split("x"))
                found.setdefault((d_in, d_out), {})[moment] = tensor
        if found:
            return found
    return {}


@register("UltraEdit", UltraEditHyperParams, batchable=True, carry="last")
def ultraedit(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: UltraEditHyperParams,
    context: EditContext,
) -> Delta:
    """Each module's ridge update as exact low-rank factors; the normaliser in
    ``state``."""
    modules = {name: get_module(lm.model, name) for name in hparams.modules}
    shapes = {name: module_shape(module) for name, module in modules.items()}
    earlier = earlier_moments(context) if hparams.carry_normaliser else {}
    moments = {
        shape: RunningMoments(sum(shape), earlier.get(shape))
        for shape in dict.fromkeys(shapes.values())
    }
    chunks = [
        chunk_inputs(lm.tokenizer, requests[i : i + hparams.batch_size_once], lm.device)
        for i in range(0, len(requests), hparams.batch_size_once)
    ]
    # EasyEdit's order: the longest chunks first (by kept tokens)
    chunks.sort(key=lambda c: int(c["attention_mask"].sum()), reverse=True)
    traced: dict[str, list[tuple[torch.Tensor, torch.Tensor]]] = {
        n: [] for n in modules
    }
    for chunk in chunks:
        for name, (keys, grads) in trace(lm, modules, chunk, hparams.token).items():
            moments[shapes[name]].update(torch.cat([keys, grads], dim=-1).cpu())
            traced[name].append((keys, grads))
    params = {}
    for name, found in traced.items():
        keys = torch.cat([k for k, _ in found]).cpu()
        grads = torch.cat([g for _, g in found]).cpu()
        normalised = moments[shapes[name]].normalise(torch.cat([keys, grads], dim=-1))
        keys_hat, grads_hat = normalised.split(list(shapes[name]), dim=-1)
        targets = -hparams.lr * keys_hat.pow(2).sum(-1, keepdim=True) * grads_hat
        keys64 = keys.double()
        gram = keys64 @ keys64.T + torch.eye(len(keys64), dtype=torch.double)
        solved = torch.linalg.solve(gram, targets.double())
        # ΔW (input × output) = Kᵀ solved: out_vecs = solvedᵀ, in_vecs = Kᵀ
        params[f"{name}.weight"] = outer_change(modules[name], solved.T, keys64.T)
    state = {
        STATE_KEY.format(d_in, d_out, k): t
        for (d_in, d_out), found in moments.items()
        for k, t in found.moments.items()
    }
    return Delta(params=params, state=state, meta={"tokens": str(len(keys))})
