"""ROME (Meng et al., 2022) and R-ROME (Gupta et al., 2024): a rank-one update of one
MLP output projection W.

Both take a target value v* = v + δ, with v the projection's output at the subject's
last token and δ from the value optimisation (``kebench.editing.rewrite``), and a
direction u = C⁻¹k / ‖C⁻¹k‖ (C the keys' second moment with ``mom2_adjustment``, else
the identity). The update is ΔW = (v* − W k_s) uᵀ / (k_s · u): it maps the solve key
k_s exactly to v*. They differ in their keys:

ROME (kmeng01/rome; EasyEdit's ``rome``)
    u comes from the key averaged over the context templates, k_s is the bare prompt's
    key. Gupta et al. showed that this mismatch is what makes ROME's edits collapse
    the model now and then.
R-ROME (EasyEdit's ``r_rome``, with its keys)
    the same key on both sides: the template average (``enable_random_prefix_keys``,
    the default; W k_s is then the average of the templates' outputs), or the bare
    prompt's (``enable_prompt_keys``). ``original_implementation`` is ROME.

The delta is stored as its two factors, (v* − W k_s) and u / (k_s · u).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kebench.editing.delta import Delta
from kebench.editing.forward import capture, get_module, outer_change
from kebench.editing.interface import EditContext, HparamsError
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.editing.rewrite import (
    RewriteHyperParams,
    context_templates,
    flatten,
    in_templates,
    optimise_values,
)
from kebench.models.loading import LoadedModel


@dataclass
class ROMEHyperParams(RewriteHyperParams):
    """ROME's hparams: EasyEdit's keys; ``layers`` holds the one edited layer."""


@dataclass
class RROMEHyperParams(RewriteHyperParams):
    """R-ROME's hparams: ROME's, plus EasyEdit's choice of keys (the module docstring)."""

    enable_prompt_keys: bool = False
    enable_random_prefix_keys: bool = True
    original_implementation: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.original_implementation and (
            self.enable_prompt_keys == self.enable_random_prefix_keys
        ):
            raise HparamsError(
                "R-ROME: set exactly one of enable_prompt_keys and "
                "enable_random_prefix_keys (or original_implementation)"
            )


@dataclass(frozen=True)
class Keys:
    """Where the update's direction and its solve come from (the module docstring)."""

    direction_from_templates: bool
    solve_from_templates: bool


def _keys_of(hparams: RewriteHyperParams) -> Keys:
    if isinstance(hparams, RROMEHyperParams) and not hparams.original_implementation:
        return Keys(
            hparams.enable_random_prefix_keys, hparams.enable_random_prefix_keys
        )
    return Keys(direction_from_templates=True, solve_from_templates=False)


def _at_subject(
    lm: LoadedModel, requests: list[EditRequest], templates: list[str], path: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's inputs and outputs at the subject token after each template:
    (n_requests, n_templates, d_in) and (n_requests, n_templates, d_out). One forward
    pass, to the module's input: its output there is the module applied to that
    input."""
    lookup = in_templates(lm, requests, templates)
    batch, rows, cols = lookup.batch(lm), lookup.rows, lookup.cols.to(lm.device)
    inputs = capture(lm.model, batch, [path], rows, cols)[path]
    with torch.no_grad():
        outputs = get_module(lm.model, path)(inputs)
    shape = (len(requests), len(templates), -1)
    return inputs.float().reshape(shape), outputs.float().reshape(shape)


def rank_one_each(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: RewriteHyperParams,
    context: EditContext,
) -> list[Delta]:
    """Each request's own rank-one delta into layer ``hparams.layers[0]``, as
    ``rank_one`` computes it alone; their value optimisations share one batch."""
    keys = _keys_of(hparams)
    layer = hparams.layers[0]
    path = hparams.rewrite_module_tmp.format(layer)
    module = get_module(lm.model, path)
    templates = flatten(
        context_templates(lm, hparams.context_template_length_params, context)
    )
    # the bare prompt is the first template ("{}"): its row gives k₀ and v
    keys_in, values_out = _at_subject(lm, requests, templates, path)
    results = optimise_values(
        lm,
        requests,
        templates,
        layer_tmp=hparams.layer_module_tmp,
        layer=layer,
        init_norms=[float(v.norm()) for v in values_out[:, 0]],
        settings=hparams.value_settings(),
        per_batch=context.value_batch,
    )
    mom2 = hparams.mom2(lm, [path], context)
    deltas = []
    for keys_of, values_of, result in zip(keys_in, values_out, results, strict=True):
        bare_key, bare_value = keys_of[0], values_of[0]
        target = bare_value + result.delta
        averaged = keys_of.mean(0), values_of.mean(0)
        direction_key = averaged[0] if keys.direction_from_templates else bare_key
        solve_key, current = (
            averaged if keys.solve_from_templates else (bare_key, bare_value)
        )
        direction = (
            torch.linalg.solve(mom2[path].float(), direction_key)
            if mom2
            else direction_key
        )
        direction = direction / direction.norm()
        right = direction / (solve_key @ direction)
        deltas.append(
            Delta(
                params={
                    f"{path}.weight": outer_change(
                        module, (target - current)[:, None], right[:, None]
                    )
                },
                meta={"v_steps": str(result.steps), "v_nll": f"{result.nll:.6g}"},
            )
        )
    return deltas


def rank_one(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: RewriteHyperParams,
    context: EditContext,
) -> Delta:
    """The rank-one delta that writes ``requests[0]`` into layer ``hparams.layers[0]``."""
    (request,) = requests
    (delta,) = rank_one_each(lm, [request], hparams, context)
    return delta


register("ROME", ROMEHyperParams, each=rank_one_each)(rank_one)
register("R-ROME", RROMEHyperParams, each=rank_one_each)(rank_one)
