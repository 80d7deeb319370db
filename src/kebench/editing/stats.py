"""Second-moment statistics of MLP keys, computed once, resumable, with provenance.

MEMIT, and ROME with ``mom2_adjustment``, need C = E[k kᵀ] of the rewritten module's
input over ordinary text. The corpus (hparams ``mom2_dataset``, EasyEdit's key) is:
    model_samples: the offline default. ``mom2_n_samples`` texts the model itself
        writes from fixed first words, each batch of texts sampled with a seed derived
        from the run's seed and its position; no data to ship or download, and the
        statistics describe the keys the model actually produces.
    a path to a UTF-8 text file: its paragraphs (blank-line separated), the first
        ``mom2_n_samples`` of them.
    ``hf:<dataset>[:<config>][:<split>][:<text column>]``: the first ``mom2_n_samples``
        non-empty texts of a Hugging Face dataset, streamed (only those are
        downloaded); needs the optional ``datasets`` library (``kebench[hf]``).
        EasyEdit's names map to current datasets: ``wikipedia`` is
        ``hf:wikimedia/wikipedia:20231101.en:train:text``, ``wikitext`` is
        ``hf:Salesforce/wikitext:wikitext-103-raw-v1:train:text``.

Each statistic is one file, ``<stats_dir>/<model>/<corpus folder>/<module>.<dtype>
.safetensors``, whose metadata ``provenance`` (JSON) says what it was computed from. A
file whose provenance does not match the request (another model under the same name,
another corpus) is an error naming the file and the field, never silently reused: it
may be an imported statistic that took hours, so kebench does not overwrite it.

A long accumulation checkpoints its partial sums (atomically) every
``checkpoint_every`` batches; a killed run resumes from the last checkpoint and gives
a result identical to an uninterrupted run (the same additions in the same order).

Both passes (sampling the corpus, accumulating) show a progress bar with its ETA, and,
after their first batch, log one line with the time the pass will take at that batch's
pace, so that a run that would take hours says so in its first seconds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from tqdm.auto import tqdm

import kebench
from kebench.atomic import atomic_path
from kebench.editing.forward import (
    Batch,
    StopForward,
    by_position,
    get_module,
    run_until,
)
from kebench.editing.interface import EditContext
from kebench.models.loading import LoadedModel

logger = logging.getLogger(__name__)

# The statistic's recipe (sampling, tokenisation, accumulation); a change that alters
# the values of a statistic computed from the same request bumps it.
FORMAT = "kebench-mom2/1"
# First words of generated texts (context templates, corpus samples): ROME's choice.
STARTERS = ("The", "Therefore", "Because", "I", "You")
MODEL_SAMPLES = "model_samples"
SAMPLE_TOKENS = 64
SAMPLE_TOP_K = 40
MAX_TOKENS = 128
BATCH_SIZE = 16
SAMPLE_BATCH = 64
CHECKPOINT_EVERY = 8
HF_PREFIX = "hf:"
# EasyEdit's corpus names, as the Hugging Face datasets that hold them today (the
# 20200501 Wikipedia dump that EasyEdit's first versions named is gone from the hub).
HF_ALIASES = {
    "wikipedia": "hf:wikimedia/wikipedia:20231101.en:train:text",
    "wikitext": "hf:Salesforce/wikitext:wikitext-103-raw-v1:train:text",
}
HF_FIELDS = 4  # dataset, config, split, text column
OFFLINE_HINT = (
    "Offline alternatives: mom2_dataset: model_samples (texts the model writes, "
    "seeded) or the path of a UTF-8 text file of blank-line separated paragraphs."
)
PROVENANCE = "provenance"
CORPUS_FILE = "corpus.json"


class CorpusUnavailableError(RuntimeError):
    """The configured corpus cannot be read here (missing library, hub unreachable)."""


class ProvenanceMismatchError(ValueError):
    """A cached statistic or corpus was computed from something else than requested."""


@dataclass(frozen=True)
class Corpus:
    """A resolved ``mom2_dataset``.

    Attributes:
        spec: what provenance records: ``model_samples``, ``file:<name>`` or the full
            ``hf:<dataset>:<config>:<split>:<column>``.
        folder: the stem of its statistics folder.
        path: the text file, for a file corpus.
        hf: (dataset, config or None, split, text column), for a Hugging Face corpus.
        sha256: the content hash when it is known before reading the texts (the text
            file's bytes); None for corpora that are generated or fetched.
    """

    spec: str
    folder: str
    path: Path | None = None
    hf: tuple[str, str | None, str, str] | None = None
    sha256: str | None = None


def _digest(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def resolve_corpus(dataset: str) -> Corpus:
    """The corpus ``mom2_dataset`` names, or an error listing the accepted forms."""
    dataset = HF_ALIASES.get(dataset, dataset)
    if dataset == MODEL_SAMPLES:
        return Corpus(spec=MODEL_SAMPLES, folder=MODEL_SAMPLES)
    if dataset.startswith(HF_PREFIX):
        parts = dataset.removeprefix(HF_PREFIX).split(":")
        if len(parts) > HF_FIELDS or not parts[0]:
            raise ValueError(
                f"mom2_dataset {dataset!r}: expected "
                "hf:<dataset>[:<config>][:<split>][:<text column>]"
            )
        name, config, split, column = (parts + [""] * HF_FIELDS)[:HF_FIELDS]
        split, column = split or "train", column or "text"
        spec = f"{HF_PREFIX}{name}:{config}:{split}:{column}"
        return Corpus(
            spec=spec,
            folder=f"hf-{Path(name).name}-{_digest(spec)[:12]}",
            hf=(name, config or None, split, column),
        )
    path = Path(dataset)
    if not path.is_file():
        raise FileNotFoundError(
            f"mom2_dataset {dataset!r} is neither {MODEL_SAMPLES!r}, a text file, "
            f"'hf:<dataset>[:<config>][:<split>][:<column>]' nor one of {sorted(HF_ALIASES)}"
        )
    digest = _digest(path.read_bytes())
    return Corpus(
        spec=f"file:{path.name}",
        folder=f"{path.stem}-{digest[:12]}",
        path=path,
        sha256=digest,
    )


def stats_folder(  # noqa: PLR0913 - the corpus sample's identity
    stats_dir: Path,
    model: str,
    corpus: Corpus,
    *,
    n_samples: int,
    seed: int,
    max_tokens: int,
) -> Path:
    """The folder of one model's statistics over one corpus sample."""
    seeded = f"-seed{seed}" if corpus.spec == MODEL_SAMPLES else ""
    return (
        Path(stats_dir) / model / f"{corpus.folder}{seeded}-n{n_samples}-t{max_tokens}"
    )


def model_fingerprint(lm: LoadedModel) -> dict[str, str]:
    """What tells this model from another under the same name, cheaply.

    The config's non-default values (less the folder it was read from, the library
    version and the load dtype, which differ between machines sharing statistics) and
    the input embedding matrix in bfloat16 (so fp32 and bf16 loads of one checkpoint
    agree). Edits never touch the embeddings, so an edited model keeps its base
    model's fingerprint: the statistics are of the base model, as in the reference
    code, and a resumed sequential run, which replays its deltas, still finds them.
    """
    config = {
        key: value
        for key, value in lm.model.config.to_diff_dict().items()
        if not key.startswith("_")
        and key not in {"transformers_version", "torch_dtype", "dtype"}
    }
    embedding = lm.model.get_input_embeddings().weight.detach()
    as_bf16 = embedding.to(torch.bfloat16).cpu().contiguous().view(torch.int16)
    return {
        "model_config_sha256": _digest(json.dumps(config, sort_keys=True, default=str)),
        "model_weights_sha256": _digest(as_bf16.numpy().tobytes()),
    }


def check_provenance(
    where: Path, recorded: dict[str, Any], expected: dict[str, Any]
) -> None:
    """Refuse ``where`` unless every expected field is recorded with the same value."""
    for key, value in expected.items():
        if recorded.get(key) != value:
            raise ProvenanceMismatchError(
                f"{where}: {key} is {recorded.get(key)!r} there but {value!r} for this "
                "request; delete the file to recompute it, or give another stats folder"
            )


def read_provenance(file: Path) -> dict[str, Any]:
    """The provenance in a statistic's safetensors metadata (empty if it has none)."""
    with safe_open(file, framework="pt") as handle:
        metadata = handle.metadata() or {}
    return json.loads(metadata.get(PROVENANCE, "{}"))


def _duration(seconds: float) -> str:
    """``3 h 05 min``, ``4 min 10 s`` or ``12.3 s``."""
    minute, hour = 60, 3600
    if seconds >= hour:
        return f"{int(seconds // hour)} h {int(seconds % hour // minute):02d} min"
    if seconds >= minute:
        return f"{int(seconds // minute)} min {int(seconds % minute)} s"
    return f"{seconds:.1f} s"


def paced_batches(batches: range, desc: str) -> Iterator[int]:
    """``batches`` (indices from ``batches.start``, the first not done yet) under a
    progress bar. One INFO line before the first says how many there are; after the
    first, when others follow, one more gives the pass's estimated time, the first
    batch's seconds times this run's batches (the bar's ETA then follows the running
    mean): a batch's time depends on the machine, so it is measured, not guessed."""
    logger.info(
        "%s: %d of %d batches to compute; the estimated time follows the first",
        desc,
        len(batches),
        batches.stop,
    )
    started = time.perf_counter()
    bar = tqdm(
        batches, initial=batches.start, total=batches.stop, desc=desc, unit="batch"
    )
    for number, batch in enumerate(bar):
        yield batch
        if number == 0 and len(batches) > 1:
            first = time.perf_counter() - started
            logger.info(
                "%s: %d batches, about %s in all at the first one's %s",
                desc,
                len(batches),
                _duration(first * len(batches)),
                _duration(first),
            )


def _batch_seed(seed: int, batch: int) -> int:
    """A seed of its own for each batch of sampled texts, so that an interrupted
    sampling resumes at a batch and gives the texts an uninterrupted one would."""
    return int.from_bytes(hashlib.sha256(f"{seed}/{batch}".encode()).digest()[:8]) >> 1


@torch.no_grad()
def sample_texts(
    lm: LoadedModel, n_samples: int, seed: int, done: Sequence[str] = ()
) -> Iterator[list[str]]:
    """The texts so far, after each batch, of ``n_samples`` texts the model writes
    after the starter words, seeded per batch; ``done``: the texts of the first whole
    batches, already sampled."""
    tokenizer = lm.tokenizer
    texts = list(done)
    devices = [lm.device] if lm.device.type == "cuda" else []
    batches = range(len(texts) // SAMPLE_BATCH, -(-n_samples // SAMPLE_BATCH))
    with torch.random.fork_rng(devices=devices):
        for batch in paced_batches(batches, f"covariance corpus ({n_samples} texts)"):
            torch.manual_seed(_batch_seed(seed, batch))
            start = batch * SAMPLE_BATCH
            count = min(SAMPLE_BATCH, n_samples - start)
            starters = [STARTERS[(start + i) % len(STARTERS)] for i in range(count)]
            inputs = tokenizer(
                starters, return_tensors="pt", padding=True, padding_side="left"
            )
            out = lm.model.generate(
                **inputs.to(lm.device),
                do_sample=True,
                top_k=SAMPLE_TOP_K,
                max_new_tokens=SAMPLE_TOKENS,
                pad_token_id=tokenizer.pad_token_id,
            )
            texts.extend(tokenizer.batch_decode(out, skip_special_tokens=True))
            yield texts


def _write_json(path: Path, value: object) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")


def model_sample_texts(
    lm: LoadedModel, n_samples: int, seed: int, folder: Path, fingerprint: dict
) -> list[str]:
    """The generated corpus: from ``corpus.json`` (checked against the model), else
    sampled once, resuming from ``corpus.partial.json`` after an interruption."""
    provenance = {
        "format": FORMAT,
        "model": lm.name,
        **fingerprint,
        "seed": seed,
        "n_samples": n_samples,
    }
    cached = folder / CORPUS_FILE
    if cached.is_file():
        stored = json.loads(cached.read_text(encoding="utf-8"))
        check_provenance(cached, stored.get(PROVENANCE, {}), provenance)
        return stored["texts"]
    partial = folder / "corpus.partial.json"
    done: list[str] = []
    if partial.is_file():
        stored = json.loads(partial.read_text(encoding="utf-8"))
        if stored.get(PROVENANCE) == provenance:
            done = stored["texts"]
            logger.info("Resuming the corpus sampling at text %d", len(done))
    logger.info(
        "Sampling %d texts from %s for covariance statistics (once)", n_samples, lm.name
    )
    texts = done
    for texts in sample_texts(lm, n_samples, seed, done):
        _write_json(partial, {PROVENANCE: provenance, "texts": texts})
    _write_json(cached, {PROVENANCE: provenance, "texts": texts})
    partial.unlink(missing_ok=True)
    return texts


def hf_texts(corpus: Corpus, n_samples: int) -> list[str]:
    """The first ``n_samples`` non-empty texts of a Hugging Face dataset, streamed."""
    try:
        import datasets  # noqa: PLC0415 - optional: only this corpus needs it
    except ImportError as err:
        raise CorpusUnavailableError(
            f"mom2_dataset {corpus.spec!r} needs the Hugging Face `datasets` library, "
            f"which is not installed (pip install 'kebench[hf]'). {OFFLINE_HINT}"
        ) from err
    name, config, split, column = corpus.hf
    texts: list[str] = []
    try:
        rows = datasets.load_dataset(name, config, split=split, streaming=True)
        for row in rows:
            if column not in row:
                raise CorpusUnavailableError(
                    f"mom2_dataset {corpus.spec!r}: no text column {column!r}; "
                    f"its columns are {sorted(row)}"
                )
            text = str(row[column]).strip()
            if text:
                texts.append(text)
            if len(texts) == n_samples:
                break
    # The hub's failures (offline mode, no network, no such dataset) are OSErrors;
    # an unknown config or split is a ValueError.
    except (OSError, ValueError) as err:
        raise CorpusUnavailableError(
            f"mom2_dataset {corpus.spec!r}: cannot read {name!r} ({err}). Offline "
            f"(HF_HUB_OFFLINE=1) a hub dataset loads only from the local cache. "
            f"{OFFLINE_HINT}"
        ) from err
    return texts


def corpus_texts(  # noqa: PLR0913 - the corpus sample's identity
    lm: LoadedModel,
    corpus: Corpus,
    n_samples: int,
    *,
    folder: Path,
    seed: int,
    fingerprint: dict,
) -> list[str]:
    """The corpus texts: generated once, read from a text file, or streamed."""
    if corpus.spec == MODEL_SAMPLES:
        return model_sample_texts(lm, n_samples, seed, folder, fingerprint)
    if corpus.hf is not None:
        texts = hf_texts(corpus, n_samples)
    else:
        paragraphs = corpus.path.read_text(encoding="utf-8").split("\n\n")
        texts = [p.strip() for p in paragraphs if p.strip()][:n_samples]
    if not texts:
        raise ValueError(f"mom2_dataset {corpus.spec!r} has no text")
    if len(texts) < n_samples:
        logger.warning(
            "mom2_dataset %s has %d texts, fewer than mom2_n_samples=%d",
            corpus.spec,
            len(texts),
            n_samples,
        )
    return texts


def _read_checkpoint(
    checkpoint: Path, identity: str, paths: Sequence[str]
) -> tuple[int, dict[str, torch.Tensor], int] | None:
    """(texts done, partial sums, tokens) of a checkpoint of this accumulation."""
    with safe_open(checkpoint, framework="pt") as handle:
        metadata = handle.metadata() or {}
    if metadata.get("identity") != identity:
        logger.warning("%s is of another accumulation; starting over", checkpoint)
        return None
    sums = load_file(checkpoint)
    if set(sums) != set(paths):
        return None
    return int(metadata["texts_done"]), sums, int(metadata["tokens"])


@torch.no_grad()
def accumulate_moments(  # noqa: PLR0913 - the accumulation and its checkpoints
    lm: LoadedModel,
    texts: Sequence[str],
    paths: Sequence[str],
    dtype: torch.dtype,
    *,
    max_tokens: int = MAX_TOKENS,
    checkpoint: Path | None = None,
    identity: str = "",
    checkpoint_every: int = CHECKPOINT_EVERY,
) -> tuple[dict[str, torch.Tensor], int]:
    """Sum of k kᵀ over every non-padding token of ``texts`` (each cut to
    ``max_tokens``), per module input, and the number of tokens.

    With ``checkpoint``, the partial sums are written there every ``checkpoint_every``
    batches, tagged with ``identity``; a checkpoint with the same identity is resumed.
    """
    sums: dict[str, torch.Tensor] = {}
    count, done = 0, 0
    if checkpoint is not None and checkpoint.is_file():
        resumed = _read_checkpoint(checkpoint, identity, paths)
        if resumed is not None:
            done, stored, count = resumed
            sums = {path: value.to(lm.device) for path, value in stored.items()}
            logger.info("Resuming the covariance accumulation at text %d", done)
    batch_state: dict[str, object] = {}
    handles = []

    def hook_for(path: str) -> object:
        def hook(_module: torch.nn.Module, args: tuple, _output: object) -> None:
            mask = batch_state["mask"]
            keys = by_position(args[0], mask.shape)[mask.to(args[0].device)].to(dtype)
            sums[path] = sums[path] + keys.T @ keys if path in sums else keys.T @ keys
            seen = batch_state["seen"]
            seen.add(path)
            if len(seen) == len(paths):
                raise StopForward  # the layers above are not needed

        return hook

    for path in paths:
        handles.append(get_module(lm.model, path).register_forward_hook(hook_for(path)))
    batches = range(done // BATCH_SIZE, -(-len(texts) // BATCH_SIZE))
    try:
        for number, batch_index in enumerate(
            paced_batches(batches, f"covariance ({len(texts)} texts)"), start=1
        ):
            start = batch_index * BATCH_SIZE
            sequences = [
                ids[:max_tokens]
                for ids in lm.tokenizer(list(texts[start : start + BATCH_SIZE]))[
                    "input_ids"
                ]
                if ids
            ]
            if sequences:
                batch = Batch.of(sequences, lm.tokenizer.pad_token_id, lm.device)
                batch_state.update(mask=batch.mask.bool(), seen=set())
                count += int(batch.mask.sum())
                run_until(lm.model, batch)
            end = start + BATCH_SIZE
            if (
                checkpoint is not None
                and number % checkpoint_every == 0
                and end < len(texts)
            ):
                with atomic_path(checkpoint) as tmp:
                    save_file(
                        {
                            path: value.cpu().contiguous()
                            for path, value in sums.items()
                        },
                        tmp,
                        metadata={
                            "identity": identity,
                            "texts_done": str(end),
                            "tokens": str(count),
                        },
                    )
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
    max_tokens: int = MAX_TOKENS,
    checkpoint_every: int = CHECKPOINT_EVERY,
) -> dict[str, torch.Tensor]:
    """C = E[k kᵀ] of each module's input: from the run's memo, from its file (whose
    provenance must match), or computed in one resumable pass over the corpus."""
    corpus = resolve_corpus(dataset)
    folder = stats_folder(
        context.stats_dir,
        lm.name,
        corpus,
        n_samples=n_samples,
        seed=context.seed,
        max_tokens=max_tokens,
    )
    memo = ("model_fingerprint", id(lm.model))
    if memo not in context.cache:
        context.cache[memo] = model_fingerprint(lm)
    fingerprint = context.cache[memo]
    request = {
        "format": FORMAT,
        "model": lm.name,
        **fingerprint,
        "corpus": corpus.spec,
        "seed": context.seed if corpus.spec == MODEL_SAMPLES else None,
        "n_samples": n_samples,
        "dtype": dtype_name,
        "max_tokens": max_tokens,
    }
    if corpus.sha256 is not None:
        request["corpus_sha256"] = corpus.sha256
    files = {path: folder / f"{path}.{dtype_name}.safetensors" for path in paths}
    found: dict[str, torch.Tensor] = {}
    for path, file in files.items():
        key = ("mom2", str(file))
        if key in context.cache:
            found[path] = context.cache[key]
        elif file.is_file():
            check_provenance(file, read_provenance(file), {**request, "module": path})
            found[path] = load_file(file)["mom2"].to(lm.device)
    missing = [path for path in paths if path not in found]
    if missing:
        texts = corpus_texts(
            lm,
            corpus,
            n_samples,
            folder=folder,
            seed=context.seed,
            fingerprint=fingerprint,
        )
        texts_sha256 = _digest(json.dumps(texts, ensure_ascii=False))
        identity = _digest(
            json.dumps([request, missing, texts_sha256, BATCH_SIZE], sort_keys=True)
        )
        checkpoint = folder / f".partial-{identity[:16]}.safetensors"
        sums, count = accumulate_moments(
            lm,
            texts,
            missing,
            getattr(torch, dtype_name),
            max_tokens=max_tokens,
            checkpoint=checkpoint,
            identity=identity,
            checkpoint_every=checkpoint_every,
        )
        if count == 0:
            raise ValueError(f"mom2_dataset {corpus.spec!r} gave no tokens")
        logger.info(
            "Covariance of %s over %d tokens, cached in %s", missing, count, folder
        )
        recorded = {
            "corpus_sha256": texts_sha256,
            **request,
            "n_texts": len(texts),
            "tokens": count,
            "model_dtype": str(lm.model.dtype).removeprefix("torch."),
            "device": lm.device.type,
            "kebench_version": kebench.__version__,
            "created": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        for path in missing:
            found[path] = sums[path] / count
            with atomic_path(files[path]) as tmp:
                save_file(
                    {"mom2": found[path].cpu().contiguous()},
                    tmp,
                    metadata={PROVENANCE: json.dumps({**recorded, "module": path})},
                )
        checkpoint.unlink(missing_ok=True)
    for path, value in found.items():
        context.cache[("mom2", str(files[path]))] = value
    return found
