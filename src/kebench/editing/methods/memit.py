"""MEMIT: many edits at once, spread over several MLP layers (Meng et al., 2023).

For every edit, a target hidden state z at the last edited layer's output (subject's
last token) is optimised as in ROME, over every context template. Then, layer by layer from the lowest, the
remaining gap R between z and the current hidden state is divided among the layers
still to edit, and the layer takes the least-squares update that maps its keys K to
that share while preserving the keys of ordinary text (second moment C):

    ΔW = R Kᵀ (λ C + K Kᵀ)⁻¹,  λ = mom2_update_weight.

The keys K are MEMIT's (kmeng01/memit's ``compute_ks``): averaged within each template
group, then over the groups, so the bare prompt weighs as much as all samples together.
Its templates are its own: five samples of ten tokens (``context_template_length_params``
``[[10, 5]]``, which the reference fixes in code).

ΔW has rank at most the number of edits, so each layer's delta is stored as its two
factors, R and (λ C + K Kᵀ)⁻¹ K.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kebench.editing.delta import Delta, apply_delta, revert_delta
from kebench.editing.forward import capture, get_module, outer_change
from kebench.editing.interface import EditContext
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.editing.rewrite import (
    RewriteHyperParams,
    average_keys,
    context_templates,
    flatten,
    in_templates,
    optimise_values,
)
from kebench.models.loading import LoadedModel


@dataclass
class MEMITHyperParams(RewriteHyperParams):
    """MEMIT's hparams: EasyEdit's keys; ``batch_size`` edits share one delta in batch mode."""

    mom2_update_weight: float = 15000.0
    layer_selection: str = "all"
    batch_size: int = 1
    context_template_length_params: list[list[int]] = field(
        default_factory=lambda: [[10, 5]]
    )


# A layer's least-squares solve: its module path and keys K (d_in × n, float64) -> the
# right factor of its change, ΔW = share @ rightᵀ.
LayerSolve = Callable[[str, torch.Tensor], torch.Tensor]


def spread_update(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: MEMITHyperParams,
    context: EditContext,
    solve: LayerSolve,
) -> tuple[Delta, dict[str, torch.Tensor]]:
    """MEMIT's update of ``hparams.layers`` with each layer's ``solve`` (MEMIT's, or
    AlphaEdit's projected one): the delta, and each layer's keys K as written (the
    layers below already changed)."""
    model = lm.model
    groups = context_templates(lm, hparams.context_template_length_params, context)
    templates = flatten(groups)
    last = hparams.layers[-1]
    z_path = hparams.layer_module_tmp.format(last)
    bare = in_templates(lm, requests, ["{}"])

    def hidden_at_subject() -> torch.Tensor:
        return capture(
            model,
            bare.batch(lm),
            [z_path],
            bare.rows,
            bare.cols.to(lm.device),
            outputs=True,
        )[z_path].float()

    start = hidden_at_subject()
    values = optimise_values(
        lm,
        requests,
        templates,
        layer_tmp=hparams.layer_module_tmp,
        layer=last,
        init_norms=[float(z.norm()) for z in start],
        settings=hparams.value_settings(),
        per_batch=context.value_batch,
    )
    targets = start + torch.stack([value.delta for value in values])
    paths = [hparams.rewrite_module_tmp.format(layer) for layer in hparams.layers]
    delta = Delta()
    written = {}
    applied = []
    try:
        for done, path in enumerate(paths):
            keys = average_keys(lm, requests, groups, [path])[path].T.double()
            share = (targets - hidden_at_subject()) / (len(paths) - done)
            right = solve(path, keys).float()
            layer_delta = Delta(
                {
                    f"{path}.weight": outer_change(
                        get_module(model, path), share.T, right
                    )
                }
            )
            applied.append(apply_delta(model, layer_delta))
            delta.params.update(layer_delta.params)
            written[path] = keys.float()
    finally:
        for done in reversed(applied):
            revert_delta(model, done)
    return delta, written


@register("MEMIT", MEMITHyperParams, batchable=True)
def memit(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: MEMITHyperParams,
    context: EditContext,
) -> Delta:
    """One delta that writes every request into ``hparams.layers``."""
    paths = [hparams.rewrite_module_tmp.format(layer) for layer in hparams.layers]
    mom2 = hparams.mom2(lm, paths, context)

    def solve(path: str, keys: torch.Tensor) -> torch.Tensor:
        preserve = (
            mom2[path].double()
            if mom2
            else torch.eye(keys.shape[0], dtype=torch.double, device=keys.device)
        )
        system = hparams.mom2_update_weight * preserve + keys @ keys.T
        return torch.linalg.solve(system, keys)

    delta, _keys = spread_update(lm, requests, hparams, context, solve)
    return delta
