"""Fine-tuning one layer's parameters on the new fact: FT-L and FT-M, as EasyEdit's
``ft_main.execute_ft`` computes them.

Trained: every parameter whose name contains ``rewrite_module_tmp`` formatted with one
of ``layers`` (EasyEdit's substring rule: ``transformer.h.{}.mlp.c_proj`` trains the
projection's weight and bias, ``model.layers.{}.mlp.down_proj.weight`` the weight).

The new target gets a leading space (``" " + target_new``, always, as EasyEdit adds
it), and ``objective_optimization`` (EasyEdit's key) picks the loss:
    prompt_last (FT-L, the ROME paper's baseline): at the prompt's last token, the mean
        NLL of the target's tokens, the target tokenised alone (the tokenizer's special
        tokens included, its unknown token left out of the mean);
    target_new (FT-M): the prompt and the target tokenised together and teacher-forced,
        the mean NLL of every token after the prompt's own token count.
Adam (``lr``, ``weight_decay``) runs up to ``num_steps`` steps; a step is taken only
while the loss is at least ``stop_loss`` (EasyEdit's fixed 1e-2), and the loop ends
once it is below. After every step each parameter is clamped to within
``norm_constraint`` (L∞) of its value before the edit, when that is a number (false:
no bound). The delta is the whole change of each trained parameter.

kebench edits one request per call: ``batch_size`` (EasyEdit's batch of requests)
does not change the result. ``kl_factor`` must be 0: EasyEdit reads it and never uses
it. The other module templates are accepted for EasyEdit's files and unused.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kebench.editing.delta import Delta, ParamDelta
from kebench.editing.forward import Batch, frozen_below
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel

OBJECTIVES = ("prompt_last", "target_new")


@dataclass
class FTHyperParams(HyperParams):
    """FT's hparams (EasyEdit's keys); ``stop_loss`` is kebench's name for EasyEdit's
    fixed early-stopping bound."""

    layers: list[int]
    rewrite_module_tmp: str
    layer_module_tmp: str
    num_steps: int = 25
    lr: float = 5e-4
    weight_decay: float = 0.0
    kl_factor: float = 0.0
    norm_constraint: float | bool = False
    objective_optimization: str = "prompt_last"
    batch_size: int = 1
    max_length: int = 40
    mlp_module_tmp: str = ""
    attn_module_tmp: str = ""
    ln_f_module: str = ""
    lm_head_module: str = ""
    stop_loss: float = 1e-2

    def __post_init__(self) -> None:
        if self.objective_optimization not in OBJECTIVES:
            raise HparamsError(
                f"objective_optimization {self.objective_optimization!r}: use one of {OBJECTIVES}"
            )
        if self.kl_factor:
            raise HparamsError(
                "kl_factor: FT's KL term is not implemented (EasyEdit's is not either); "
                "set it to 0"
            )

    @property
    def bound(self) -> float | None:
        """The L∞ bound on each parameter's change, or None for none."""
        value = self.norm_constraint
        if isinstance(value, bool) or value is None:
            return None
        return float(value)


def trained_parameters(model: torch.nn.Module, hparams: FTHyperParams) -> dict:
    """name -> parameter of every parameter the edit trains, in the model's order."""
    patterns = [hparams.rewrite_module_tmp.format(layer) for layer in hparams.layers]
    found = {
        name: param
        for name, param in model.named_parameters()
        if any(pattern in name for pattern in patterns)
    }
    if not found:
        raise HparamsError(
            f"rewrite_module_tmp {hparams.rewrite_module_tmp!r} with layers "
            f"{hparams.layers} names no parameter of {type(model).__name__}"
        )
    return found


def last_frozen_layer(names: list[str], hparams: FTHyperParams) -> int:
    """The highest layer below every trained parameter (-1: none can be replayed)."""
    lowest = min(hparams.layers)
    inside = [
        any(
            name.startswith(hparams.layer_module_tmp.format(layer) + ".")
            for layer in hparams.layers
        )
        for name in names
    ]
    return lowest - 1 if all(inside) else -1


def sequence_logits(model: torch.nn.Module, batch: Batch) -> torch.Tensor:
    """Logits at every position, in float. The output head runs on the whole sequence,
    as in EasyEdit: run on the scored positions alone, its matrix products round
    differently, and Adam turns that noise into ±lr steps of near-zero gradients."""
    return model(
        input_ids=batch.ids,
        attention_mask=batch.mask,
        position_ids=batch.positions,
        use_cache=False,
    ).logits.float()


@dataclass(frozen=True)
class Objective:
    """What FT trains on: the token sequence, the positions whose next-token
    log-probs are scored, and the labels scored there (one row per position)."""

    sequence: list[int]
    positions: list[int]
    labels: list[list[int]]

    def loss(self, model: torch.nn.Module, batch: Batch) -> torch.Tensor:
        """The mean NLL of the labels (EasyEdit's reduction, in its order)."""
        device = batch.ids.device
        scored = sequence_logits(model, batch)[
            0, torch.tensor(self.positions, device=device)
        ]
        picked = torch.log_softmax(scored, dim=-1).gather(
            1, torch.tensor(self.labels, device=device)
        )
        return -picked.sum() / picked.numel()


def objective(lm: LoadedModel, request: EditRequest, name: str) -> Objective:
    """The ``objective_optimization`` loss's inputs for ``request`` (module docstring)."""
    tokenizer = lm.tokenizer
    target = (
        request.target_new if request.target_new == " " else " " + request.target_new
    )
    prompt_ids = list(tokenizer(request.text)["input_ids"])
    if name == "prompt_last":
        unknown = tokenizer.unk_token_id
        labels = [t for t in tokenizer(target)["input_ids"] if t != unknown]
        found = Objective(prompt_ids, [len(prompt_ids) - 1], [labels])
    else:
        joint = list(tokenizer(request.text + target)["input_ids"])
        pad = tokenizer.pad_token_id
        start = sum(t != pad for t in prompt_ids) + sum(t == pad for t in joint)
        found = Objective(
            joint, list(range(start - 1, len(joint) - 1)), [[t] for t in joint[start:]]
        )
    if not found.positions or not found.labels[0]:
        raise ValueError(
            f"{request.case_id}: the target {request.target_new!r} leaves no token "
            "to train on"
        )
    return found


def finetune(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: FTHyperParams,
    context: EditContext,
) -> Delta:
    """The change of the trained parameters after fine-tuning on ``requests[0]``."""
    (request,) = requests
    model = lm.model
    weights = trained_parameters(model, hparams)
    originals = {name: w.detach().clone() for name, w in weights.items()}
    goal = objective(lm, request, hparams.objective_optimization)
    batch = Batch.of([goal.sequence], lm.tokenizer.pad_token_id, lm.device)
    bound = hparams.bound
    optimiser = torch.optim.Adam(
        list(weights.values()), lr=hparams.lr, weight_decay=hparams.weight_decay
    )
    try:
        for weight in weights.values():
            weight.requires_grad_(True)
        last_frozen = last_frozen_layer(list(weights), hparams)
        with (
            frozen_below(model, hparams.layer_module_tmp, last_frozen, batch),
            torch.enable_grad(),
        ):
            for _ in range(hparams.num_steps):
                loss = goal.loss(model, batch)
                if not torch.isfinite(loss) or float(loss.detach()) < hparams.stop_loss:
                    break
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                if bound is not None:
                    with torch.no_grad():
                        for name, weight in weights.items():
                            original = originals[name]
                            weight.copy_(
                                torch.clamp(
                                    weight, min=original - bound, max=original + bound
                                )
                            )
        changes = {
            name: ParamDelta(
                "dense", {"values": (w.detach() - originals[name]).float().cpu()}
            )
            for name, w in weights.items()
        }
    finally:
        with torch.no_grad():
            for name, weight in weights.items():
                weight.requires_grad_(False)
                weight.copy_(originals[name])
    return Delta(params=changes, meta={"objective": hparams.objective_optimization})


register("FT-L", FTHyperParams)(finetune)
register("FT-M", FTHyperParams)(finetune)
