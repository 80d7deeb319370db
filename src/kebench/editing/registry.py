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
from collections.abc import Callable

from kebench.editing.easyedit import PREFIX, easyedit_method
from kebench.editing.interface import Compute, ComputeEach, EditMethod, HyperParams

METHODS: dict[str, EditMethod] = {}


def register(  # noqa: PLR0913 - the EditMethod fields
    name: str,
    hparams: type[HyperParams],
    *,
    batchable: bool = False,
    version: int = 1,
    each: ComputeEach | None = None,
    carry: str = "all",
) -> Callable[[Compute], Compute]:
    """Register ``compute`` as the method ``name`` with hparams class ``hparams``
    (``version``, ``each``, ``carry``: ``EditMethod.version``, ``compute_each`` and
    ``carry``)."""

    def decorate(compute: Compute) -> Compute:
        if name in METHODS:
            raise ValueError(f"method {name!r} is registered twice")
        METHODS[name] = EditMethod(
            name, hparams, compute, batchable, version, each, carry
        )
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
    return method.removeprefix(PREFIX)


def get_method(name: str) -> EditMethod:
    """The registered method ``name`` (built-in modules are imported on first use).

    ``easyedit:<METHOD>`` is EasyEdit's implementation of ``<METHOD>``.
    """
    if name.startswith(PREFIX):
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
