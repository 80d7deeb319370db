"""ROME: a rank-one update of one MLP output projection (Meng et al., 2022).

With key k (the projection's input at the subject's last token, averaged over context
templates) and target value v* (the projection's output there, plus the optimised
vector), the update ΔW = (v* − W k) (C⁻¹k)ᵀ / (kᵀ C⁻¹ k) makes W' k = v*. C is the
keys' second moment when ``mom2_adjustment`` is set, else the identity. The delta is
stored as its two factors, u = v* − W k and v = C⁻¹k / (kᵀC⁻¹k).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kebench.editing.delta import Delta
from kebench.editing.forward import capture, get_module, outer_change
from kebench.editing.registry import EditContext, register
from kebench.editing.requests import EditRequest
from kebench.editing.rewrite import (
    RewriteHyperParams,
    average_keys,
    context_templates,
    in_templates,
    optimise_value,
)
from kebench.models.loading import LoadedModel


@dataclass
class ROMEHyperParams(RewriteHyperParams):
    """ROME's hparams: EasyEdit's keys; ``layers`` holds the one edited layer."""


@register("ROME", ROMEHyperParams)
def rome(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: ROMEHyperParams,
    context: EditContext,
) -> Delta:
    """The rank-one delta that writes ``requests[0]`` into layer ``hparams.layers[0]``."""
    (request,) = requests
    layer = hparams.layers[0]
    path = hparams.rewrite_module_tmp.format(layer)
    module = get_module(lm.model, path)
    templates = context_templates(lm, hparams.context_template_length_params, context)
    key = average_keys(lm, [request], templates, [path])[path][0]
    bare = in_templates(lm, [request], ["{}"])
    value = capture(
        lm.model,
        bare.batch(lm),
        [path],
        bare.rows,
        bare.cols.to(lm.device),
        outputs=True,
    )[path][0].float()
    result = optimise_value(
        lm,
        request,
        templates,
        layer_tmp=hparams.layer_module_tmp,
        layer=layer,
        init_norm=float(value.norm()),
        settings=hparams.value_settings(),
    )
    with torch.no_grad():
        weight = module.weight
        current = module(key[None].to(weight.dtype))[0].float()
    residual = value + result.delta - current
    mom2 = hparams.mom2(lm, [path], context)
    direction = torch.linalg.solve(mom2[path].float(), key) if mom2 else key
    right = direction / (direction @ key)
    return Delta(
        params={
            f"{path}.weight": outer_change(module, residual[:, None], right[:, None])
        },
        meta={"v_steps": str(result.steps), "v_nll": f"{result.nll:.6g}"},
    )
