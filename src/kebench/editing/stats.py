"""Second-moment statistics of MLP keys, computed once and cached (design §6).

MEMIT, and ROME with ``mom2_adjustment``, need C = E[k kᵀ] of the rewritten module's
input over ordinary text. The corpus (hparams ``mom2_dataset``) is:
    model_samples: the offline default. ``mom2_n_samples`` texts the model itself
        writes from fixed first words, sampled with the run's seed; no data to ship or
        download, and the statistics describe the keys the model actually produces.
    a path to a UTF-8 text file: its paragraphs (blank-line separated), the first
        ``mom2_n_samples`` of them.

Statistics live in ``<stats_dir>/<model>/<corpus id>/<module path>.safetensors``; the
generated corpus is kept beside them as ``corpus.json``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

from kebench.datasets.atomic import atomic_path
from kebench.editing.forward import (
    Batch,
    StopForward,
    by_position,
    get_module,
    run_until,
)
from kebench.editing.registry import EditContext
from kebench.models.loading import LoadedModel

logger = logging.getLogger(__name__)

# First words of generated texts (context templates, corpus samples): ROME's choice.
STARTERS = ("The", "Therefore", "Because", "I", "You")
MODEL_SAMPLES = "model_samples"
SAMPLE_TOKENS = 64
MAX_TOKENS = 128
BATCH_SIZE = 16
SAMPLE_BATCH = 64


def corpus_id(dataset: str, n_samples: int, seed: int) -> str:
    """A folder name that changes whenever the corpus would."""
    if dataset == MODEL_SAMPLES:
        return f"{MODEL_SAMPLES}-n{n_samples}-seed{seed}"
    path = Path(dataset)
    if not path.is_file():
        raise FileNotFoundError(
            f"mom2_dataset {dataset!r} is neither {MODEL_SAMPLES!r} nor a text file"
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return f"{path.stem}-{digest}-n{n_samples}"


@torch.no_grad()
def sample_texts(lm: LoadedModel, n_samples: int, seed: int) -> list[str]:
    """``n_samples`` texts the model writes after the starter words, seeded."""
    tokenizer = lm.tokenizer
    texts: list[str] = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for start in tqdm(
            range(0, n_samples, SAMPLE_BATCH),
            desc=f"covariance corpus ({n_samples} texts)",
            unit="batch",
        ):
            count = min(SAMPLE_BATCH, n_samples - start)
            starters = [STARTERS[(start + i) % len(STARTERS)] for i in range(count)]
            inputs = tokenizer(
                starters, return_tensors="pt", padding=True, padding_side="left"
            )
            out = lm.model.generate(
                **inputs.to(lm.device),
                do_sample=True,
                top_k=40,
                max_new_tokens=SAMPLE_TOKENS,
                pad_token_id=tokenizer.pad_token_id,
            )
            texts.extend(tokenizer.batch_decode(out, skip_special_tokens=True))
    return texts


def corpus_texts(
    lm: LoadedModel, dataset: str, n_samples: int, folder: Path, seed: int
) -> list[str]:
    """The corpus texts, generated once (``model_samples``) or read from a text file."""
    if dataset != MODEL_SAMPLES:
        paragraphs = Path(dataset).read_text(encoding="utf-8").split("\n\n")
        return [p.strip() for p in paragraphs if p.strip()][:n_samples]
    cached = folder / "corpus.json"
    if cached.is_file():
        return json.loads(cached.read_text(encoding="utf-8"))
    logger.info(
        "Sampling %d texts from %s for covariance statistics (once)", n_samples, lm.name
    )
    texts = sample_texts(lm, n_samples, seed)
    with atomic_path(cached) as tmp:
        tmp.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
    return texts


@torch.no_grad()
def accumulate_moments(
    lm: LoadedModel, texts: Sequence[str], paths: Sequence[str], dtype: torch.dtype
) -> tuple[dict[str, torch.Tensor], int]:
    """Sum of k kᵀ over every non-padding token of ``texts``, per module input."""
    sums: dict[str, torch.Tensor] = {}
    batch_state: dict[str, object] = {}
    handles = []

    def hook_for(path: str) -> object:
        def hook(_module: torch.nn.Module, args: tuple, _output: object) -> None:
            mask = batch_state["mask"]
            keys = by_position(args[0], mask.shape)[mask.to(args[0].device)].to(dtype)
            sums[path] = sums.get(path, 0) + keys.T @ keys
            seen = batch_state["seen"]
            seen.add(path)
            if len(seen) == len(paths):
                raise StopForward  # the layers above are not needed

        return hook

    for path in paths:
        handles.append(get_module(lm.model, path).register_forward_hook(hook_for(path)))
    count = 0
    try:
        for start in tqdm(
            range(0, len(texts), BATCH_SIZE), desc="covariance", unit="batch"
        ):
            sequences = [
                ids[:MAX_TOKENS]
                for ids in lm.tokenizer(list(texts[start : start + BATCH_SIZE]))[
                    "input_ids"
                ]
                if ids
            ]
            batch = Batch.of(sequences, lm.tokenizer.pad_token_id, lm.device)
            batch_state.update(mask=batch.mask.bool(), seen=set())
            count += int(batch.mask.sum())
            run_until(lm.model, batch)
    finally:
        for handle in handles:
            handle.remove()
    return sums, count


def second_moments(  # noqa: PLR0913 - the statistic's identity
    lm: LoadedModel,
    paths: Sequence[str],
    *,
    dataset: str,
    n_samples: int,
    dtype_name: str,
    context: EditContext,
) -> dict[str, torch.Tensor]:
    """C = E[k kᵀ] of each module's input, from the cache or computed in one pass."""
    folder = (
        Path(context.stats_dir) / lm.name / corpus_id(dataset, n_samples, context.seed)
    )
    dtype = getattr(torch, dtype_name)
    found: dict[str, torch.Tensor] = {}
    for path in paths:
        key = ("mom2", lm.name, str(folder), path)
        if key in context.cache:
            found[path] = context.cache[key]
        elif (folder / f"{path}.safetensors").is_file():
            found[path] = load_file(folder / f"{path}.safetensors")["mom2"].to(
                lm.device
            )
    missing = [path for path in paths if path not in found]
    if missing:
        texts = corpus_texts(lm, dataset, n_samples, folder, context.seed)
        sums, count = accumulate_moments(lm, texts, missing, dtype)
        logger.info(
            "Covariance of %s over %d tokens, cached in %s", missing, count, folder
        )
        for path in missing:
            found[path] = sums[path] / count
            with atomic_path(folder / f"{path}.safetensors") as tmp:
                save_file(
                    {"mom2": found[path].cpu().contiguous()},
                    tmp,
                    metadata={"tokens": str(count), "corpus": str(dataset)},
                )
    for path, value in found.items():
        context.cache[("mom2", lm.name, str(folder), path)] = value
    return found
