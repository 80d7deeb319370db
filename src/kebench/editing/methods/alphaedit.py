"""AlphaEdit: MEMIT's update projected onto the null space of preserved knowledge
(Fang et al., ICLR 2025).

The target values and keys are MEMIT's (``kebench.editing.methods.memit``), and so is
the spreading of the residual over the layers. What changes is each layer's solve.
P projects onto the span of the eigenvectors of C = E[k kᵀ] (the second moment of
ordinary text's keys) whose eigenvalues are below ``nullspace_threshold``. Keys of
ordinary text barely reach that span, so ΔW P leaves them nearly unchanged. With
K_p the keys that earlier edits of a sequential stream wrote, each layer solves

    (P (K Kᵀ + K_p K_pᵀ) + L2 I) X = P K,   ΔW = R Xᵀ,

where R is the layer's share of the residual. So ΔW = R Kᵀ P (…)⁻ᵀ, the paper's
ΔW = R Kᵀ P (K_p K_pᵀ P + K Kᵀ P + L2 I)⁻¹ (P is symmetric). This is EasyEdit's
``execute_AlphaEdit``.

The K_p K_pᵀ term is why AlphaEdit exists for sequential editing: each delta keeps
the keys it wrote in its ``state``, and a sequential run hands earlier deltas' states
to the next edit (``EditContext.earlier``). A resumed stream reads them from the stored
files. In single and batch mode every edit starts from the base model, so K_p is empty.

Deliberate difference: EasyEdit keeps K_p in a module global that no mode resets. Its
single-mode edits therefore also preserve the keys of every earlier edit of the
process, and their deltas depend on the edits' order. kebench's single mode is the
reference's with the global reset before each edit (``reset_cache=True``).

P is computed from the covariance statistics kebench uses for MEMIT. EasyEdit reads a
``P_loc`` file of ``torch.save`` format, or writes one; kebench unpickles no file, so
it computes P from the statistics and keeps it for the run. Each delta's ``projector``
metadata is a hash of the P it was made with.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import torch

from kebench.editing.delta import Delta
from kebench.editing.interface import EditContext
from kebench.editing.methods.memit import MEMITHyperParams, spread_update
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel

# A delta's state key for the keys it wrote into a module (d_in × n).
KEYS = "keys/{}"


@dataclass
class AlphaEditHyperParams(MEMITHyperParams):
    """AlphaEdit's hparams: MEMIT's keys (EasyEdit's), plus the null-space threshold on
    C's singular values and the ridge L2. ``mom2_update_weight`` is accepted, as
    EasyEdit's class does, and not used."""

    nullspace_threshold: float = 2e-2
    L2: float = 10.0  # noqa: N815 - EasyEdit's key


@dataclass(frozen=True)
class Projector:
    """The null-space projector of each rewritten module, and its id."""

    matrices: dict[str, torch.Tensor]
    digest: str


def null_space_projector(moment: torch.Tensor, threshold: float) -> torch.Tensor:
    """U₀ U₀ᵀ, U₀ the left singular vectors of ``moment`` whose singular values are
    below ``threshold`` (in float32 as the reference; C is symmetric PSD)."""
    left, singular, _ = torch.linalg.svd(moment.float().cpu(), full_matrices=False)
    null = left[:, singular < threshold]
    return null @ null.T


def projector(
    lm: LoadedModel, hparams: AlphaEditHyperParams, context: EditContext
) -> Projector:
    """Every rewritten module's projector, computed once per run and statistics."""
    paths = [hparams.rewrite_module_tmp.format(layer) for layer in hparams.layers]
    settings = (
        hparams.mom2_dataset,
        hparams.mom2_n_samples,
        hparams.mom2_dtype,
        hparams.nullspace_threshold,
    )
    key = ("AlphaEdit projector", lm.name, tuple(paths), settings)
    if key not in context.cache:
        # always: the projector needs C whatever mom2_adjustment says, as in EasyEdit
        moments = hparams.second_moments(lm, paths, context)
        matrices = {
            path: null_space_projector(moments[path], hparams.nullspace_threshold)
            for path in paths
        }
        digest = hashlib.sha256()
        for path in paths:
            digest.update(path.encode())
            digest.update(matrices[path].numpy().tobytes())
        context.cache[key] = Projector(matrices, digest.hexdigest()[:16])
    return context.cache[key]


def preserved_keys(context: EditContext, path: str, like: torch.Tensor) -> torch.Tensor:
    """K_p K_pᵀ of the keys earlier edits of the stream wrote into ``path``."""
    earlier = [state[KEYS.format(path)] for state in context.earlier if state]
    if not earlier:
        return torch.zeros_like(like)
    keys = torch.cat(earlier, dim=1).to(like)
    return keys @ keys.T


@register("AlphaEdit", AlphaEditHyperParams, batchable=True)
def alphaedit(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: AlphaEditHyperParams,
    context: EditContext,
) -> Delta:
    """One delta that writes every request into ``hparams.layers``, in the null space
    of ordinary text's keys and of the keys earlier edits of the stream wrote."""
    found = projector(lm, hparams, context)

    def solve(path: str, keys: torch.Tensor) -> torch.Tensor:
        project = found.matrices[path].to(keys)
        kept = keys @ keys.T + preserved_keys(context, path, project)
        system = project @ kept + hparams.L2 * torch.eye(
            keys.shape[0], dtype=keys.dtype, device=keys.device
        )
        return torch.linalg.solve(system, project @ keys)

    delta, written = spread_update(lm, requests, hparams, context, solve)
    delta.state = {KEYS.format(path): keys for path, keys in written.items()}
    delta.meta["projector"] = found.digest
    return delta
