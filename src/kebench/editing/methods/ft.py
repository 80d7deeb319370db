"""Fine-tuning one layer's weights on the new fact: FT-L and FT-M.

``objective_optimization`` (EasyEdit's key) picks the loss:
    prompt_last (FT-L, the ROME paper's baseline): at the prompt's last position, the
        mean NLL of each of the new target's tokens; usually with an L∞ bound
        ``norm_constraint`` on the change of every weight.
    target_new (FT-M): the new target teacher-forced after the prompt, NLL on the
        target's tokens only.
Adam runs ``num_steps`` steps, or until the loss is below ``stop_loss``. The delta is
the whole change of each trained matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kebench.editing.delta import Delta, ParamDelta
from kebench.editing.forward import Batch, frozen_below, logits_at
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel
from kebench.scoring.logprobs import encode_pair

OBJECTIVES = ("prompt_last", "target_new")


@dataclass
class FTHyperParams(HyperParams):
    """FT's hparams (EasyEdit's keys); ``rewrite_module_tmp`` names a parameter.

    ``stop_loss`` is kebench's name for EasyEdit's fixed early-stopping bound.
    """

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
                "kl_factor: FT's KL term is not implemented; set it to 0"
            )


def _objective(lm: LoadedModel, request: EditRequest, objective: str) -> tuple:
    """The training sequence, the positions whose logits are scored and their labels."""
    prompt_ids, target_ids = encode_pair(lm.tokenizer, request.text, request.target_new)
    last = len(prompt_ids) - 1
    if objective == "prompt_last":
        return prompt_ids, [last] * len(target_ids), target_ids
    cols = [last + j for j in range(len(target_ids))]
    return prompt_ids + target_ids[:-1], cols, target_ids


def finetune(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: FTHyperParams,
    context: EditContext,
) -> Delta:
    """The change of the ``layers``' weights after fine-tuning on ``requests[0]``."""
    (request,) = requests
    model = lm.model
    names = [hparams.rewrite_module_tmp.format(layer) for layer in hparams.layers]
    weights = [model.get_parameter(name) for name in names]
    originals = [w.detach().clone() for w in weights]
    sequence, cols, labels = _objective(lm, request, hparams.objective_optimization)
    batch = Batch.of([sequence], lm.tokenizer.pad_token_id, lm.device)
    rows_t = torch.zeros(len(cols), dtype=torch.long, device=lm.device)
    cols_t = torch.tensor(cols, device=lm.device)
    labels_t = torch.tensor(labels, device=lm.device)
    bound = hparams.norm_constraint
    optimiser = torch.optim.Adam(
        weights, lr=hparams.lr, weight_decay=hparams.weight_decay
    )
    try:
        for weight in weights:
            weight.requires_grad_(True)
        with (
            frozen_below(
                model, hparams.layer_module_tmp, min(hparams.layers) - 1, batch
            ),
            torch.enable_grad(),
        ):
            for _ in range(hparams.num_steps):
                logprobs = torch.log_softmax(
                    logits_at(model, batch, rows_t, cols_t), dim=-1
                )
                loss = -logprobs.gather(1, labels_t[:, None]).mean()
                if not torch.isfinite(loss) or float(loss.detach()) < hparams.stop_loss:
                    break
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                if bound is not False and bound is not None:
                    with torch.no_grad():
                        for weight, original in zip(weights, originals, strict=True):
                            weight.copy_(
                                torch.clamp(
                                    weight, min=original - bound, max=original + bound
                                )
                            )
        changes = {
            name: ParamDelta("dense", {"values": (w.detach() - o).float().cpu()})
            for name, w, o in zip(names, weights, originals, strict=True)
        }
    finally:
        with torch.no_grad():
            for weight, original in zip(weights, originals, strict=True):
                weight.requires_grad_(False)
                weight.copy_(original)
    return Delta(params=changes, meta={"objective": hparams.objective_optimization})


register("FT-L", FTHyperParams)(finetune)
register("FT-M", FTHyperParams)(finetune)
