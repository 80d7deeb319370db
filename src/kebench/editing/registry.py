"""The method registry: each editing method is one module plus one hparams YAML per model.

A method module in ``kebench.editing.methods`` defines a dataclass of its hparams
(EasyEdit's key names) and a function decorated with ``@register``:

    @dataclass
    class MyHyperParams(HyperParams):
        layers: list[int]
        lr: float

    @register("MY-METHOD", MyHyperParams)
    def my_method(lm, requests, hparams, context) -> Delta: ...

Its hparams live in ``conf/base/hparams/MY-METHOD/<model>.yaml``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Self

from kebench.editing.delta import Delta
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel
from kebench.qa.probes import CaseFacts

# EasyEdit keys about EasyEdit's own runtime (its model loading, devices, result
# folders): accepted so that an EasyEdit YAML carries over, and not used by kebench.
RUNTIME_KEYS = frozenset(
    {
        "alg_name",
        "model_name",
        "device",
        "model_parallel",
        "fp16",
        "stats_dir",
        "results_dir",
        "sentence_model_name",
        "v_loss_layer",
    }
)


class HparamsError(ValueError):
    """An hparams file is missing, or has unknown or missing keys."""


@dataclass
class HyperParams:
    """Base of every method's hparams; field names are EasyEdit's YAML keys."""

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "hparams") -> Self:
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names - RUNTIME_KEYS
        if unknown:
            raise HparamsError(
                f"{where}: unknown keys {sorted(unknown)} for {cls.__name__}"
            )
        kinds = {f.name: str(f.type) for f in fields(cls)}
        try:
            # YAML reads 5e-4 (no dot) as a string; a float field takes it as a number.
            chosen = {
                key: float(value)
                if "float" in kinds[key] and isinstance(value, str)
                else value
                for key, value in values.items()
                if key in names
            }
            return cls(**chosen)
        except (TypeError, ValueError) as err:
            raise HparamsError(f"{where}: {err}") from err


@dataclass
class EditContext:
    """What a method may need beyond the model, the requests and its hparams.

    Attributes:
        stats_dir: where covariance statistics are cached (``data/06_models/stats``).
        pool: every request of the run (in-context demonstrations come from it).
        seed: the seed of every random choice, so reruns give identical deltas.
        facts: case_id -> the KG facts its edit changes and its probes ask (IKE
            keeps its demonstrations off them).
        cache: per-run memo (context templates, statistics), keyed by the caller.
        context_templates: context templates to use instead of sampling them, as
            groups whose first is ``["{}"]`` (the conformance harness gives both
            implementations the same ones); None samples them from the model.
    """

    stats_dir: Path
    pool: Sequence[EditRequest] = ()
    seed: int = 0
    facts: Mapping[str, CaseFacts] = field(default_factory=dict)
    cache: dict[Any, Any] = field(default_factory=dict)
    context_templates: Sequence[Sequence[str]] | None = None


Compute = Callable[[LoadedModel, list[EditRequest], Any, EditContext], Delta]


@dataclass(frozen=True)
class EditMethod:
    """A registered method: its name, hparams class, and delta computation.

    ``batchable`` methods compute one delta for several requests at once (MEMIT);
    the others get exactly one request per call.
    """

    name: str
    hparams: type[HyperParams]
    compute: Compute
    batchable: bool = False


METHODS: dict[str, EditMethod] = {}


def register(
    name: str, hparams: type[HyperParams], *, batchable: bool = False
) -> Callable[[Compute], Compute]:
    """Register ``compute`` as the method ``name`` with hparams class ``hparams``."""

    def decorate(compute: Compute) -> Compute:
        if name in METHODS:
            raise ValueError(f"method {name!r} is registered twice")
        METHODS[name] = EditMethod(name, hparams, compute, batchable)
        return compute

    return decorate


def _discover() -> None:
    """Import every method module (again is a no-op): one may already be imported on
    its own (scoring imports IKE's prefix composition), so an empty registry is not
    the only sign that discovery is due."""
    package = importlib.import_module("kebench.editing.methods")
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{module.name}")


def hparams_name(method: str) -> str:
    """The hparams folder of a method: ``easyedit:ROME`` reads ROME's file."""
    return method.removeprefix("easyedit:")


def get_method(name: str) -> EditMethod:
    """The registered method ``name`` (built-in modules are imported on first use).

    ``easyedit:<METHOD>`` is EasyEdit's implementation of ``<METHOD>``.
    """
    if name.startswith("easyedit:"):
        from kebench.editing.easyedit import easyedit_method  # noqa: PLC0415 - optional backend

        return easyedit_method(name)
    if name not in METHODS:
        _discover()
    if name not in METHODS:
        raise KeyError(
            f"unknown editing method {name!r}; registered: {sorted(METHODS)}"
        )
    return METHODS[name]


def method_names() -> list[str]:
    """Every registered method name."""
    _discover()
    return sorted(METHODS)
