"""Drift of general capability: how far an edit moves the model off its base (issue 7).

Each edit's model L* (the base model L with the edit's delta applied, or with an
in-context edit's prefix before every text) is compared with L on:

- perplexity of neutral text: exp of the token-weighted mean NLL of every text token
  but the first (which has no context without a prefix), ``text_perplexity``;
- KL(P_L || P_L*) of the next-token distribution after each unrelated prompt, averaged
  (the base distributions are computed once), ``next_token_logprobs``;
- accuracy on general-knowledge probes, ``probe_accuracy``: a cloze answer or an NQ
  answer counts when its first token is the argmax after the prompt (teacher-forced);
  a BoolQ item when log P(" yes") vs log P(" no") picks the gold one.

These are the forward passes; ``kebench.scoring.stealth`` turns them into z-scores,
stealth and AUROC.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from kebench.editing.delta import Delta, delta_applied
from kebench.editing.methods.ike import joint_prefix
from kebench.editing.runner import fingerprint
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import (
    AnswerScore,
    Batching,
    PrefixCache,
    answer_score,
    encode_pair,
    forward_packed,
    forward_padded,
    packing_fits,
    padding_id,
    score_answers,
)
from kebench.scoring.base_store import KEY, reuse_scores, weights_digest
from kebench.scoring.evaluate import EditedShard

logger = logging.getLogger(__name__)

GENERAL_SETS = ("general", "boolq", "nq")


@dataclass(frozen=True)
class GeneralSets:
    """What general capability is measured on.

    Attributes:
        texts: neutral paragraphs (perplexity).
        prompts: unrelated prompts (next-token KL).
        probes: ``set`` (one of GENERAL_SETS), ``prompt``, ``answer``, and ``wrong``:
            the other option of a two-way choice (BoolQ), else None.
    """

    texts: tuple[str, ...]
    prompts: tuple[str, ...]
    probes: pd.DataFrame


@dataclass(frozen=True)
class Capability:
    """One model state's measures on the general sets."""

    perplexity: float
    next_token: torch.Tensor  # log-probs, one row per prompt
    accuracy: dict[str, float]


def _sample(frame: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    if n >= len(frame):
        return frame
    return frame.sample(n=n, random_state=seed).sort_index()


def _question(text: str) -> str:
    text = text.strip().rstrip("?")
    return text[:1].upper() + text[1:] + "?"


def boolq_probes(
    records: pd.DataFrame, n: int, seed: int, passage_words: int
) -> pd.DataFrame:
    """BoolQ items as two-way choices: the passage cut to its first ``passage_words``
    words, the question, then " yes" or " no"."""
    sample = _sample(records, n, seed)
    passages = [" ".join(p.split()[:passage_words]) for p in sample["passage"]]
    gold = sample["answer"].astype(bool).to_numpy()
    return pd.DataFrame(
        {
            "set": "boolq",
            "prompt": [
                f"{p}\nQuestion: {_question(q)}\nAnswer:"
                for p, q in zip(passages, sample["question"], strict=True)
            ],
            "answer": np.where(gold, "yes", "no"),
            "wrong": np.where(gold, "no", "yes"),
        }
    )


def nq_probes(records: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """Natural Questions items with a gold answer, scored on its first answer."""
    answered = records[records["answer"].map(lambda a: len(a) > 0)]
    sample = _sample(answered, n, seed)
    return pd.DataFrame(
        {
            "set": "nq",
            "prompt": [
                f"Question: {_question(q)}\nAnswer:" for q in sample["question"]
            ],
            "answer": [str(a[0]) for a in sample["answer"]],
            "wrong": None,
        }
    )


def _lines(text: str, n: int) -> tuple[str, ...]:
    return tuple(line.strip() for line in text.splitlines() if line.strip())[:n]


def general_sets(  # noqa: PLR0913 - each set and its size
    cloze: pd.DataFrame,
    texts: str,
    prompts: str,
    benchmarks: Mapping[str, pd.DataFrame],
    sizes: Mapping[str, int],
    *,
    seed: int = 0,
    passage_words: int = 48,
) -> GeneralSets:
    """The general sets, each cut to its size (a seeded sample of BoolQ and NQ).

    Args:
        cloze: our general-knowledge probes, ``prompt`` and ``answer``.
        texts: neutral paragraphs, one a line.
        prompts: unrelated prompts, one a line.
        benchmarks: ``boolq`` and ``nq`` records, where present.
        sizes: how many of each: general, boolq, nq, neutral_texts, unrelated_prompts.
    """
    parts = [
        _sample(cloze, int(sizes["general"]), seed)[["prompt", "answer"]].assign(
            set="general", wrong=None
        )
    ]
    if "boolq" in benchmarks:
        parts.append(
            boolq_probes(
                benchmarks["boolq"], int(sizes["boolq"]), seed, int(passage_words)
            )
        )
    if "nq" in benchmarks:
        parts.append(nq_probes(benchmarks["nq"], int(sizes["nq"]), seed))
    probes = pd.concat(parts, ignore_index=True)[["set", "prompt", "answer", "wrong"]]
    return GeneralSets(
        texts=_lines(texts, int(sizes["neutral_texts"])),
        prompts=_lines(prompts, int(sizes["unrelated_prompts"])),
        probes=probes,
    )


def _sequences(
    lm: LoadedModel, texts: Sequence[str], prefix: str
) -> tuple[list[list[int]], PrefixCache | None, int]:
    """Each text's tokens after the prefix's (with the tokenizer's special tokens):
    tokenised apart, so that base and edited models see the same text tokens.

    Returns the rows to run, the prefix run once (None without one: the special
    tokens then begin each row) and how many tokens of each row precede its text.
    The prefix's last token begins each row, as in teacher-forced scoring
    (``shared_prefix``), so that both run the same prefix tokens once.
    """
    context = list(lm.tokenizer(prefix)["input_ids"])
    sequences = [
        list(lm.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts
    ]
    if not prefix or len(context) < 2:  # noqa: PLR2004 - a prefix to cache, a token
        return [context + s for s in sequences], None, len(context)
    return (
        [context[-1:] + s for s in sequences],
        PrefixCache.of(lm.model, context[:-1]),
        1,
    )


@torch.no_grad()
def text_perplexity(
    lm: LoadedModel,
    texts: Sequence[str],
    prefix: str = "",
    batching: Batching = Batching(),
) -> float:
    """exp of the mean NLL per token over every token of ``texts`` but each one's first."""
    total, count = 0.0, 0
    every, cached, context = _sequences(lm, texts, prefix)
    first = context + 1  # the first text token is not scored
    for batch in batching.of([len(s) for s in every], cached):
        sequences = [every[i] for i in batch]
        logits, _ = forward_padded(
            lm.model, sequences, padding_id(lm.tokenizer), "right", prefix=cached
        )
        for row, sequence in enumerate(sequences):
            total += _nll(logits[row, first - 1 : len(sequence) - 1], sequence[first:])
            count += len(sequence) - first
    return float(np.exp(total / count))


def _nll(step_logits: torch.Tensor, targets: Sequence[int]) -> float:
    """The summed NLL of ``targets``, each read from its row of ``step_logits``."""
    logprobs = torch.log_softmax(step_logits.double(), dim=-1)
    index = torch.tensor(list(targets), device=logprobs.device)
    return -float(logprobs.gather(1, index[:, None]).sum())


@torch.no_grad()
def next_token_logprobs(
    lm: LoadedModel,
    prompts: Sequence[str],
    prefix: str = "",
    batching: Batching = Batching(),
) -> torch.Tensor:
    """log P(next token | prefix + prompt), one row per prompt (float64, on the CPU)."""
    every, cached, _ = _sequences(lm, prompts, prefix)
    rows: dict[int, torch.Tensor] = {}
    for batch in batching.of([len(s) for s in every], cached):
        sequences = [every[i] for i in batch]
        last = [len(s) - 1 for s in sequences]
        keep = sorted(set(last))
        logits, _ = forward_padded(
            lm.model,
            sequences,
            padding_id(lm.tokenizer),
            "right",
            keep=torch.tensor(keep),
            prefix=cached,
        )
        column = {position: i for i, position in enumerate(keep)}
        picked = logits[torch.arange(len(sequences)), [column[p] for p in last]]
        logprobs = torch.log_softmax(picked.double(), dim=-1).cpu()
        rows.update(zip(batch, logprobs, strict=True))
    return torch.stack([rows[i] for i in range(len(every))])


def mean_kl(base: torch.Tensor, edited: torch.Tensor) -> float:
    """Mean over prompts of KL(P_base || P_edited); rounding below 0 counts as 0."""
    kl = (base.exp() * (base - edited)).sum(dim=-1).clamp(min=0.0)
    return float(kl.mean())


def probe_accuracy(
    lm: LoadedModel,
    probes: pd.DataFrame,
    prefix: str = "",
    batching: Batching = Batching(),
) -> dict[str, float]:
    """Accuracy per set: a two-way choice is right when its answer is the likelier; any
    other probe when its answer's first token is the argmax after the prompt (so only
    that token is scored)."""
    prompts, answers, scored_tokens = _probe_pairs(probes)
    scored = score_answers(
        lm.model,
        lm.tokenizer,
        prompts,
        answers,
        batching=batching,
        prefix=prefix,
        scored_tokens=scored_tokens,
    )
    return _accuracy(probes, scored)


def _probe_pairs(
    probes: pd.DataFrame,
) -> tuple[list[str], list[str], list[int | None]]:
    """The (prompt, answer) pairs probe accuracy scores, and how many of each
    answer's tokens: every probe's answer (a cloze or NQ answer's first token alone),
    then each two-way choice's wrong option."""
    choice = probes["wrong"].notna().to_numpy()
    prompts = list(probes["prompt"])
    return (
        prompts + [p for p, c in zip(prompts, choice, strict=True) if c],
        [*probes["answer"], *probes.loc[choice, "wrong"]],
        [None if c else 1 for c in choice] + [None] * int(choice.sum()),
    )


def _accuracy(probes: pd.DataFrame, scored: Sequence[AnswerScore]) -> dict[str, float]:
    """Accuracy per set from the scores of ``_probe_pairs``."""
    choice = probes["wrong"].notna().to_numpy()
    wrong = iter(scored[len(probes) :])
    correct = [
        score.logprob > next(wrong).logprob
        if is_choice
        else score.argmax_ids[0] == score.answer_ids[0]
        for score, is_choice in zip(scored[: len(probes)], choice, strict=True)
    ]
    return (
        pd.Series(correct, index=probes.index, dtype=float)
        .groupby(probes["set"])
        .mean()
        .to_dict()
    )


def measure_capability(
    lm: LoadedModel,
    sets: GeneralSets,
    prefix: str = "",
    batching: Batching = Batching(),
) -> Capability:
    """Perplexity, next-token distributions and general accuracy of the model as it is.

    Without a prefix, where packing fits the model (``packing_fits``), every text,
    prompt and probe runs in one packed stream (``packed_capability``); else each
    measure runs its padded batches, after the prefix's cache.
    """
    if not prefix and packing_fits(lm.model):
        return packed_capability(lm, sets, batching)
    return padded_capability(lm, sets, prefix, batching)


def padded_capability(
    lm: LoadedModel,
    sets: GeneralSets,
    prefix: str = "",
    batching: Batching = Batching(),
) -> Capability:
    """``measure_capability`` with each measure in its own padded batches."""
    return Capability(
        perplexity=text_perplexity(lm, sets.texts, prefix, batching),
        next_token=next_token_logprobs(lm, sets.prompts, prefix, batching),
        accuracy=probe_accuracy(lm, sets.probes, prefix, batching),
    )


def packed_capability(
    lm: LoadedModel, sets: GeneralSets, batching: Batching = Batching()
) -> Capability:
    """``measure_capability`` without a prefix, its texts, prompts and probes packed
    together (``forward_packed``): the same sequences and scored positions as each
    measure's padded batches, with almost no padding, in fewer passes. The model
    must pass ``packing_fits``."""
    texts, _, context = _sequences(lm, sets.texts, "")
    prompts, _, _ = _sequences(lm, sets.prompts, "")
    probe_prompts, answers, scored_tokens = _probe_pairs(sets.probes)
    pairs = []  # (prompt ids, scored answer ids)
    for prompt, answer, n in zip(probe_prompts, answers, scored_tokens, strict=True):
        prompt_ids, answer_ids = encode_pair(lm.tokenizer, prompt, answer)
        pairs.append((prompt_ids, answer_ids[:n]))
    first = context + 1  # the first text token is not scored
    # (sequence, positions whose next-token logits are read) -> its index
    readouts: dict[tuple[tuple[int, ...], tuple[int, ...]], int] = {}

    def readout(sequence: Sequence[int], positions: Iterable[int]) -> int:
        key = (tuple(sequence), tuple(positions))
        return readouts.setdefault(key, len(readouts))

    text_at = [readout(s, range(first - 1, len(s) - 1)) for s in texts]
    prompt_at = [readout(s, [len(s) - 1]) for s in prompts]
    pair_at = [
        readout(p + a[:-1], range(len(p) - 1, len(p) + len(a) - 1)) for p, a in pairs
    ]
    keys = list(readouts)
    texts_read, others_read = set(text_at), {*prompt_at, *pair_at}
    text_nll, kept = {}, {}
    for index, logits in forward_packed(
        lm.model,
        [sequence for sequence, _ in keys],
        [positions for _, positions in keys],
        padding_id(lm.tokenizer),
        batching,
    ):
        if index in texts_read:
            text_nll[index] = _nll(logits, keys[index][0][first:])
        if index in others_read:  # a row or an answer's few
            kept[index] = logits
    count = sum(len(s) - first for s in texts)
    return Capability(
        perplexity=float(np.exp(sum(text_nll[i] for i in text_at) / count)),
        next_token=torch.stack(
            [torch.log_softmax(kept[i][0].double(), dim=-1).cpu() for i in prompt_at]
        ),
        accuracy=_accuracy(
            sets.probes,
            [
                answer_score(torch.log_softmax(kept[i].float(), dim=-1), a)
                for i, (_, a) in zip(pair_at, pairs, strict=True)
            ],
        ),
    )


DRIFT_COLUMNS = [
    "method",
    "case_id",
    "ppl_base",
    "ppl_edit",
    "kl",
    *(f"acc_{s}_{state}" for s in GENERAL_SETS for state in ("base", "edit")),
]


def base_capability(
    lm: LoadedModel, sets: GeneralSets, batching: Batching = Batching()
) -> Capability:
    """The unedited model's measures, the reference of every edit's drift."""
    base = measure_capability(lm, sets, "", batching)
    logger.info(
        "base model: perplexity %.2f, accuracy %s", base.perplexity, base.accuracy
    )
    return base


def capability_key(lm: LoadedModel, sets: GeneralSets, batching: Batching) -> str:
    """The base-score store's key of the unedited model's measures: its weights
    digest, the batching and the token ids of every text, prompt and probe."""
    probes = sets.probes[["set", "prompt", "answer", "wrong"]].astype(str)
    texts = [str(t) for t in (*sets.texts, *sets.prompts, *probes.to_numpy().ravel())]
    ids = lm.tokenizer(texts, add_special_tokens=False).input_ids
    batches = {
        "batch_size": batching.rows,
        "batch_tokens": batching.tokens,
        "batch_held": batching.held,
    }
    return fingerprint(weights_digest(lm), batches, ids)


def stored_base_capability(
    lm: LoadedModel,
    sets: GeneralSets,
    batching: Batching,
    stored: Mapping[str, Callable[[], pd.DataFrame]],
) -> tuple[Capability, dict[str, pd.DataFrame]]:
    """``base_capability``, read from ``stored`` (the base-score store's partitions)
    when measured before with the same weights, sets and batching; and the new
    partition to store (empty when read)."""
    keys = pd.Series([capability_key(lm, sets, batching)], name=KEY)

    def measure(_rows: pd.DataFrame) -> pd.DataFrame:
        base = base_capability(lm, sets, batching)
        return pd.DataFrame(
            {
                "perplexity": [base.perplexity],
                "accuracy": [json.dumps(base.accuracy, sort_keys=True)],
                # float64 log-probs: parquet keeps them exactly
                "next_token": [base.next_token.tolist()],
            }
        )

    frame, partition = reuse_scores(stored, keys, keys.to_frame(), measure)
    row = frame.iloc[0]
    capability = Capability(
        perplexity=float(row["perplexity"]),
        next_token=torch.tensor(
            np.stack([np.asarray(r, dtype=np.float64) for r in row["next_token"]])
        ),
        accuracy=json.loads(row["accuracy"]),
    )
    return capability, partition


def edit_drift(
    lm: LoadedModel,
    sets: GeneralSets,
    base: Capability,
    groups: Mapping[str, Iterable[tuple[Sequence[str], Sequence[Delta]]]],
    batching: Batching = Batching(),
) -> pd.DataFrame:
    """Capability under each group's deltas next to ``base``, per case.

    Args:
        groups: per method, ``(case_ids, deltas)`` as ``delta_groups`` yields them.
    """
    rows = []
    for method, method_groups in groups.items():
        for case_ids, deltas in tqdm(
            list(method_groups), desc=f"drift of {method}", unit="edit"
        ):
            if not any(delta.changes_forward for delta in deltas):
                # a memory alone (MeLLo) leaves the model as it was: measured once
                edited = base
            else:
                with ExitStack() as stack:
                    for delta in deltas:
                        stack.enter_context(delta_applied(lm.model, delta))
                    # several IKE edits make one prefix, never glued ones
                    edited = measure_capability(
                        lm, sets, joint_prefix(deltas), batching
                    )
            row = {
                "ppl_base": base.perplexity,
                "ppl_edit": edited.perplexity,
                "kl": mean_kl(base.next_token, edited.next_token),
            }
            for name in GENERAL_SETS:
                row[f"acc_{name}_base"] = base.accuracy.get(name, np.nan)
                row[f"acc_{name}_edit"] = edited.accuracy.get(name, np.nan)
            rows += [{"method": method, "case_id": c} | row for c in case_ids]
        logger.info("measured the drift of %s", method)
    return pd.DataFrame(rows, columns=DRIFT_COLUMNS)


@dataclass(frozen=True)
class DriftShard(EditedShard):
    """The general sets and the base model's measures on them, to measure a shard's
    edits against (a ``kebench.compute`` task)."""

    sets: GeneralSets
    base: Capability
    batching: Batching


def measure_drift_shard(lm: LoadedModel, shard: DriftShard) -> pd.DataFrame:
    """``edit_drift`` rows of one shard."""
    groups = {shard.method: shard.delta_groups()}
    return edit_drift(lm, shard.sets, shard.base, groups, shard.batching)
