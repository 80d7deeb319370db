"""Scores of the unedited model, kept across runs and pipelines.

The unedited model's score of a probe depends only on the model's weights, on how the
probe is scored (the scoring settings) and on the token ids it forwards. A stored row
carries the digest of those three (``score_key``), so a later run, of any pipeline,
reuses it, and a change to the model, the settings or a probe's text misses it and is
scored afresh. Rows are stored as partitions that are never overwritten (like the
delta store): each run adds the rows it scored, and nothing stored is lost.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd
import torch

from kebench.editing.runner import fingerprint
from kebench.models.loading import LoadedModel

logger = logging.getLogger(__name__)

KEY = "score_key"

# digests of models already hashed in this process: hashing a 7B model's weights takes
# seconds, and every base-scoring node of a run asks for it
_DIGESTS: weakref.WeakKeyDictionary[torch.nn.Module, str] = weakref.WeakKeyDictionary()


def weights_digest(lm: LoadedModel) -> str:
    """SHA-256 over every tensor of the model's state dict (names, dtypes, shapes and
    bytes, in name order). Call it on the unedited model: a delta applied changes it."""
    model = lm.model
    if model not in _DIGESTS:
        digest = hashlib.sha256()
        for name, tensor in sorted(model.state_dict().items()):
            flat = tensor.detach().contiguous().reshape(-1)
            digest.update(f"{name}:{flat.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(flat.view(torch.uint8).cpu().numpy().tobytes())
        _DIGESTS[model] = digest.hexdigest()
    return _DIGESTS[model]


def score_keys(
    lm: LoadedModel,
    rows: pd.DataFrame,
    text_columns: Sequence[str],
    label_columns: Sequence[str],
    settings: Mapping[str, Any],
) -> pd.Series:
    """Each row's key: the weights digest, the settings, the token ids of each text
    column (a missing text is ``None``) and the label columns (a probe type, which
    decides the protocols a probe is scored under)."""
    weights = weights_digest(lm)
    ids: dict[str, list[list[int] | None]] = {}
    for column in text_columns:
        texts = rows[column]
        present = texts.notna().to_numpy()
        encoded = iter(
            lm.tokenizer(
                [str(t) for t in texts[present]], add_special_tokens=False
            ).input_ids
            if present.any()
            else []
        )
        ids[column] = [next(encoded) if p else None for p in present]
    labels = rows[list(label_columns)].astype(str).to_numpy().tolist()
    keys = [
        fingerprint(weights, dict(settings), [ids[c][i] for c in text_columns], label)
        for i, label in enumerate(labels)
    ]
    return pd.Series(keys, index=rows.index, name=KEY)


def reuse_scores(
    stored: Mapping[str, Callable[[], pd.DataFrame]],
    keys: pd.Series,
    rows: pd.DataFrame,
    score: Callable[[pd.DataFrame], pd.DataFrame],
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The scores of ``rows`` (index-aligned), each read from ``stored`` partitions
    when its key is there and computed by ``score`` otherwise; and the new partition
    (empty when nothing was scored) to store."""
    known = [load() for load in stored.values()]
    store = (
        pd.concat(known, ignore_index=True).drop_duplicates(KEY).set_index(KEY)
        if known
        else pd.DataFrame()
    )
    hit = keys.isin(store.index).to_numpy()
    unique_missing = ~keys.duplicated().to_numpy() & ~hit
    fresh = pd.DataFrame()
    if unique_missing.any():
        fresh = score(rows[unique_missing]).assign(**{KEY: keys[unique_missing]})
        store = pd.concat([store, fresh.set_index(KEY)])
    scores = store.loc[keys.to_numpy()].set_axis(rows.index)
    partition = (
        {fingerprint(sorted(fresh[KEY]))[:16]: fresh.reset_index(drop=True)}
        if len(fresh)
        else {}
    )
    return scores, partition


def log_reuse(what: str, n_rows: int, partition: dict[str, pd.DataFrame]) -> None:
    """Log how many of ``n_rows`` rows were scored now (``partition``, what
    ``reuse_scores`` returns to store) and read from the store."""
    scored = sum(len(rows) for rows in partition.values())
    logger.info(
        "%d %s under the base model: %d scored now, the others read from the store",
        n_rows,
        what,
        scored,
    )
