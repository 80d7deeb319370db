"""EasyEdit as a backend: run EasyEdit's own implementation of a method on the same requests.

Select it as ``easyedit:<METHOD>`` (``--params method=easyedit:ROME``). It reads the
same hparams file as kebench's method (``conf/base/hparams/<METHOD>/<model>.yaml``:
the keys are EasyEdit's), hands kebench's loaded model and tokenizer to
``easyeditor.BaseEditor``, lets it edit in place, stores the weight change as a dense
delta and restores the weights. EasyEdit is not a dependency: a user's clone must be
importable (``pip install -e`` it, or put it on ``PYTHONPATH``).
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Self

import torch

from kebench.editing.delta import Delta, ParamDelta
from kebench.editing.interface import EditContext, EditMethod, HyperParams
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel

PREFIX = "easyedit:"
INSTALL_HINT = (
    "EasyEdit is not importable. Clone https://github.com/zjunlp/EasyEdit, install its "
    "requirements, and `pip install -e` the clone or add it to PYTHONPATH; then select "
    "e.g. --params method=easyedit:ROME"
)
# kebench's method names -> EasyEdit's alg_name and hparams class.
ALGORITHMS = {
    "ROME": ("ROME", "ROMEHyperParams"),
    "MEMIT": ("MEMIT", "MEMITHyperParams"),
    "FT-L": ("FT", "FTHyperParams"),
    "FT-M": ("FT", "FTHyperParams"),
    "KN": ("KN", "KNHyperParams"),
}


class EasyEditUnavailableError(ImportError):
    """EasyEdit cannot be imported here."""


def import_easyeditor() -> ModuleType:
    """The ``easyeditor`` package, or an error that says how to install it."""
    try:
        return importlib.import_module("easyeditor")
    except ImportError as err:
        raise EasyEditUnavailableError(INSTALL_HINT) from err


@dataclass
class EasyEditHyperParams(HyperParams):
    """EasyEdit's hparams as read from the YAML; EasyEdit itself checks them."""

    values: dict[str, Any]

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "hparams") -> Self:
        return cls(values=dict(values))


def _easyedit_hparams(
    easyeditor: ModuleType, method: str, values: dict, lm: LoadedModel
) -> Any:
    alg_name, class_name = ALGORITHMS[method]
    params_class = getattr(easyeditor, class_name)
    names = {f.name for f in dataclasses.fields(params_class)}
    device = lm.device
    chosen = {key: value for key, value in values.items() if key in names}
    chosen.update(
        alg_name=alg_name,
        model_name=(lm.model, lm.tokenizer),
        device=(device.index or 0) if device.type == "cuda" else "cpu",
    )
    return params_class(**chosen)


def _watched(lm: LoadedModel, values: dict) -> dict[str, torch.nn.Parameter]:
    """The parameters EasyEdit may change: the hparams' rewritten layers, else all."""
    template = values.get("rewrite_module_tmp")
    params = dict(lm.model.named_parameters())
    if template and values.get("layers"):
        names = [template.format(layer) for layer in values["layers"]]
        names = [n if n.endswith(".weight") else f"{n}.weight" for n in names]
        return {name: params[name] for name in names}
    return params


def easyedit_method(name: str) -> EditMethod:
    """The registry entry for ``easyedit:<METHOD>``."""
    method = name.removeprefix(PREFIX)
    if method not in ALGORITHMS:
        raise KeyError(
            f"no EasyEdit backend for {method!r}; available: {sorted(ALGORITHMS)}"
        )

    def compute(
        lm: LoadedModel,
        requests: list[EditRequest],
        hparams: EasyEditHyperParams,
        context: EditContext,
    ) -> Delta:
        easyeditor = import_easyeditor()
        editor = easyeditor.BaseEditor.from_hparams(
            _easyedit_hparams(easyeditor, method, hparams.values, lm)
        )
        watched = _watched(lm, hparams.values)
        before = {n: p.detach().to("cpu", copy=True) for n, p in watched.items()}
        try:
            editor.edit(
                prompts=[r.text for r in requests],
                # EasyEdit's own placeholder when a ground truth is unknown
                ground_truth=[r.target_true or "<|endoftext|>" for r in requests],
                target_new=[r.target_new for r in requests],
                subject=[r.subject for r in requests],
                sequential_edit=True,
                verbose=False,
            )
            changes = {
                n: ParamDelta(
                    "dense", {"values": (p.detach().cpu().float() - before[n].float())}
                )
                for n, p in watched.items()
                if not torch.equal(p.detach().cpu(), before[n])
            }
        finally:
            with torch.no_grad():
                for n, p in watched.items():
                    p.copy_(before[n].to(p.device))
        return Delta(
            params=changes,
            meta={"backend": "easyedit", "alg_name": ALGORITHMS[method][0]},
        )

    return EditMethod(name=name, hparams=EasyEditHyperParams, compute=compute)
