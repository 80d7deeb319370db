"""CounterFact's standard metrics (Meng et al., 2022), protocol ``counterfact``.

The numbers published tables report for CounterFact, computed as ROME's evaluation
computes them, so that they can be set beside those tables:

- **Probabilities.** Each prompt of an edit (its rewrite prompt, its paraphrase
  prompts, its neighbourhood prompts: other subjects that share the old object) is
  scored with both of the edit's objects. The score of an object is its mean token
  negative log-likelihood (NLL), teacher-forced, so that objects of different token
  lengths compare per token; P̄ = exp(−NLL) is that per-token probability.

  - efficacy score: the share of rewrite prompts where NLL(new) < NLL(true);
    efficacy magnitude: the mean of P̄(new) − P̄(true);
  - paraphrase score and magnitude: the same over the paraphrase prompts;
  - neighbourhood score: the share of neighbourhood prompts where NLL(true) <
    NLL(new); magnitude: the mean of P̄(true) − P̄(new).

  Each is a mean over an edit's prompts, then over edits; ``cf_score`` is the harmonic
  mean of the three scores.
- **Generation.** Each generation prompt is continued by top-k sampling (k = 5) to
  ``max_length`` tokens, prompt included, without stopping at an end of sequence
  (ROME's ``generate_fast``); the text is the prompt and its continuation.

  - n-gram entropy: per text, the mean of (2/3)·H₂ and (4/3)·H₃, the entropies (bits)
    of its word 2-gram and 3-gram frequencies; then the mean over texts. Low values
    flag repetitive, degenerate text.
  - reference score (consistency): the TF-IDF cosine between an edit's generated
    texts, joined, and the reference texts about subjects that have the new object
    (ROME's ``attribute_snippets.json``, joined). The IDF is ROME's stored one
    (``idf.npy`` and ``tfidf_vocab.json``) when given, else fitted on every reference
    text, as ROME does when its stored IDF is missing. Without reference texts the
    score is not computed (NaN).

Deliberate differences, each documented in docs/metrics.md: an object's tokens are
those of the joint text after the prompt (``kebench.models.logprobs``), as every
kebench probe is scored; ROME tokenises `` <object>`` alone, the same tokens on
GPT-2's tokenizer. Words are cut as nltk's ``word_tokenize`` does, sentence by
sentence, with spaCy's rule-based sentencizer in place of Punkt, whose model is a
separate download. Sampling is seeded per (seed, case, prompt), so a run is
reproducible and every method, and the unedited model, see the same random stream.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from transformers import DynamicCache

from kebench.compute.engine import collect_shards, pending_shards
from kebench.editing.runner import fingerprint
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import score_answers
from kebench.schemas import COUNTERFACT_SCORES, UNEDITED
from kebench.scoring.evaluate import EditedShard, applied_groups
from kebench.scoring.metrics import bootstrap_ci

logger = logging.getLogger(__name__)

# an edit's prompt kinds, as CounterFact names its fields
PROBABILITY_KINDS = ("rewrite", "paraphrase", "neighborhood")
GENERATION_KIND = "generation"
# ROME's weights of the 2-gram and 3-gram entropies
NGRAM_WEIGHTS = {2: 2 / 3, 3: 4 / 3}
# metric name (``metrics.csv``) -> its ``counterfact_scores`` column, and the probe
# type of the prompts it reads
METRICS = {
    "cf_efficacy_score": ("rewrite_score", "direct"),
    "cf_efficacy_magnitude": ("rewrite_magnitude", "direct"),
    "cf_paraphrase_score": ("paraphrase_score", "paraphrase"),
    "cf_paraphrase_magnitude": ("paraphrase_magnitude", "paraphrase"),
    "cf_neighborhood_score": ("neighborhood_score", "locality"),
    "cf_neighborhood_magnitude": ("neighborhood_magnitude", "locality"),
    "cf_ngram_entropy": ("ngram_entropy", "generation"),
    "cf_reference_score": ("reference_score", "generation"),
}
PROTOCOL = "counterfact"


@dataclass(frozen=True)
class CounterfactSettings:
    """How the generation metrics sample (ROME's values by default)."""

    max_length: int = 100
    top_k: int = 5
    seed: int = 0
    batch_size: int = 16

    def __post_init__(self) -> None:
        if self.max_length < 1 or self.top_k < 1:
            raise ValueError(
                f"counterfact: max_length and top_k must be >= 1, got "
                f"{self.max_length} and {self.top_k}"
            )

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> CounterfactSettings:
        """The settings of the ``evaluation`` parameters."""
        settings = params["counterfact"]
        return cls(
            max_length=int(settings["max_length"]),
            top_k=int(settings["top_k"]),
            seed=int(settings["seed"]),
            batch_size=int(params["batch_size"]),
        )


# what a CounterFact prompt's NLLs depend on, besides the model
NLL_KEY = ["case_id", "prompt", "target_new", "target_true"]


def evaluated_nlls(
    probes: pd.DataFrame, scores: pd.DataFrame, lp_new: str, lp_old: str
) -> pd.DataFrame:
    """Mean token NLLs of the probes the evaluation scored (``scores``: probe_id,
    ``lp_new`` and ``lp_old`` columns, n_tokens_new, n_tokens_old), by ``NLL_KEY``: a
    probe whose prompt and two answers are a CounterFact prompt's and targets."""
    rows = scores.dropna(subset=[lp_old]).merge(
        probes[["probe_id", "case_id", "prompt", "answer_new", "answer_old"]],
        on="probe_id",
        suffixes=("_score", ""),
    )
    return (
        rows.assign(
            target_new=rows["answer_new"],
            target_true=rows["answer_old"],
            nll_new=-rows[lp_new] / rows["n_tokens_new"],
            nll_true=-rows[lp_old] / rows["n_tokens_old"],
        )
        .drop_duplicates(NLL_KEY)[[*NLL_KEY, "nll_new", "nll_true"]]
        .reset_index(drop=True)
    )


def mean_nlls(
    lm: LoadedModel,
    prompts: pd.DataFrame,
    prefix: str = "",
    batch_size: int = 16,
    known: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """The mean token NLL of each prompt's ``target_new`` and ``target_true``
    (columns ``nll_new``, ``nll_true``), after ``prefix``. ``known``
    (``evaluated_nlls``): NLLs the evaluation computed under the same model state,
    read instead of scored again."""
    found = (
        prompts[NLL_KEY].merge(known, on=NLL_KEY, how="left").set_index(prompts.index)
        if known is not None and len(known)
        else pd.DataFrame({"nll_new": np.nan, "nll_true": np.nan}, index=prompts.index)
    )
    missing = found["nll_new"].isna().to_numpy()
    if missing.any():
        rest = prompts[missing]
        texts = list(rest["prompt"])
        scored = score_answers(
            lm.model,
            lm.tokenizer,
            texts + texts,
            [*rest["target_new"], *rest["target_true"]],
            batch_size=batch_size,
            prefix=prefix,
        )
        nll = [-s.logprob / s.n_tokens for s in scored]
        found.loc[missing, "nll_new"] = nll[: len(texts)]
        found.loc[missing, "nll_true"] = nll[len(texts) :]
    return prompts.assign(nll_new=found["nll_new"], nll_true=found["nll_true"])


def _seed(*parts: object) -> int:
    digest = hashlib.sha256(json.dumps(parts, default=str).encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _clean(text: str) -> str:
    # as ROME's generate_fast returns its texts
    return unicodedata.normalize("NFKD", text).replace("\n\n", " ")


@torch.no_grad()
def sample_texts(
    lm: LoadedModel,
    prompts: Sequence[str],
    settings: CounterfactSettings,
    prefix: str = "",
    seed_key: object = "",
) -> list[str]:
    """Each prompt followed by a top-k sampled continuation, ``max_length`` tokens in
    all (the module docstring); ``prefix`` (an in-context edit) is read, not counted.

    Written as a loop over the KV cache rather than ``generate()``: ROME samples
    past an end of sequence, which ``generate()`` only allows by masking that token's
    logit, a different distribution.
    """
    model, tokenizer = lm.model, lm.tokenizer
    texts = []
    for prompt in prompts:
        budget = settings.max_length - len(tokenizer(prompt)["input_ids"])
        ids = tokenizer(prefix + prompt, return_tensors="pt")["input_ids"]
        ids = ids.to(model.device)
        # the draw among the top k is made on the CPU: the same stream on any device
        generator = torch.Generator().manual_seed(
            _seed(settings.seed, seed_key, prompt)
        )
        cache, tokens = DynamicCache(), []
        step = ids
        for _ in range(max(budget, 0)):
            out = model(input_ids=step, cache=cache, use_cache=True)
            probs = torch.softmax(out.logits[0, -1].float(), dim=-1)
            top = torch.topk(probs, min(settings.top_k, probs.numel()))
            weights = top.values.cpu()
            pick = torch.multinomial(weights / weights.sum(), 1, generator=generator)
            tokens.append(int(top.indices[int(pick)]))
            step = torch.tensor([[tokens[-1]]], device=model.device)
        texts.append(
            _clean(prompt + tokenizer.decode(tokens, skip_special_tokens=True))
        )
    return texts


@functools.cache
def _sentencizer():
    # imported here: only the generation metrics need spaCy and nltk
    import spacy  # noqa: PLC0415

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    return nlp


@functools.cache
def _word_tokenizer():
    from nltk.tokenize import NLTKWordTokenizer  # noqa: PLC0415

    return NLTKWordTokenizer()


def words(text: str) -> list[str]:
    """``text``'s words as nltk's ``word_tokenize`` cuts them, sentence by sentence
    (spaCy's sentencizer finds the sentences; the module docstring)."""
    tokenizer = _word_tokenizer()
    return [
        word
        for sentence in _sentencizer()(text).sents
        for word in tokenizer.tokenize(sentence.text)
    ]


def ngram_entropy(text: str) -> float:
    """ROME's n-gram entropy of one text: the mean of (2/3)·H₂ and (4/3)·H₃, in bits.
    A text too short for any n-gram has entropy 0 for that n, as in ROME."""
    tokens = words(text)
    weighted = []
    for n, weight in NGRAM_WEIGHTS.items():
        counts = np.array(list(Counter(zip(*(tokens[i:] for i in range(n)))).values()))
        freqs = counts / max(counts.sum(), 1)
        weighted.append(weight * float(-(freqs * np.log2(freqs)).sum()))
    return float(np.mean(weighted))


@dataclass(frozen=True)
class ReferenceTexts:
    """ROME's attribute snippets: texts about subjects that have an object of a
    relation, by (relation id, object id), and the TF-IDF vectorizer that compares a
    generation with them."""

    texts: Mapping[tuple[str, str], tuple[str, ...]]
    vectorizer: object

    def score(
        self, generated: Sequence[str], relation_id: str, target_id: str
    ) -> float:
        """The TF-IDF cosine of ``generated`` with the references of (relation,
        object); NaN when there are none."""
        references = self.texts.get((relation_id, target_id))
        if not references:
            return float("nan")
        vectors = self.vectorizer.transform(
            [" ".join(generated), " ".join(references)]
        ).toarray()
        norms = np.linalg.norm(vectors, axis=1)
        if not norms.all():
            return 0.0
        return float(vectors[0] @ vectors[1] / norms[0] / norms[1])


@functools.lru_cache(maxsize=1)
def load_reference_texts(
    snippets: str | Path, idf: str | Path | None = None, vocab: str | Path | None = None
) -> ReferenceTexts:
    """ROME's ``attribute_snippets.json``, and its stored IDF (``idf.npy``,
    ``tfidf_vocab.json``) when both are given, else an IDF fitted on the snippets.
    Errors name the file and, for a malformed entry, its index."""
    # imported here: only the reference score needs scikit-learn
    from sklearn.feature_extraction.text import TfidfVectorizer  # noqa: PLC0415

    path = Path(snippets)
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: cannot read attribute snippets: {error}") from error
    if not isinstance(entries, list):
        raise ValueError(f"{path}: expected a JSON list of snippet entries")
    texts: dict[tuple[str, str], list[str]] = {}
    for index, entry in enumerate(entries):
        try:
            key = (str(entry["relation_id"]), str(entry["target_id"]))
            samples = [str(sample["text"]) for sample in entry["samples"]]
        except (KeyError, TypeError) as error:
            raise ValueError(
                f"{path}: entry #{index} needs relation_id, target_id and samples "
                f"with a text: {error!r} missing"
            ) from error
        texts.setdefault(key, []).extend(samples)
    vectorizer = TfidfVectorizer()
    if idf is not None and vocab is not None:
        # allow_pickle=False: a stored IDF is a plain float array, never code
        weights = np.load(Path(idf), allow_pickle=False)
        vectorizer.vocabulary_ = json.loads(Path(vocab).read_text(encoding="utf-8"))
        if len(vectorizer.vocabulary_) != weights.size:
            raise ValueError(
                f"{idf}: {weights.size} IDF weights for a vocabulary of "
                f"{len(vectorizer.vocabulary_)} words in {vocab}"
            )
        vectorizer.idf_ = weights
    else:
        vectorizer.fit([text for group in texts.values() for text in group])
    return ReferenceTexts({k: tuple(v) for k, v in texts.items()}, vectorizer)


def reference_texts(settings: Mapping[str, Any]) -> ReferenceTexts | None:
    """ROME's attribute snippets (and stored IDF) when the files that ``settings``
    (``evaluation.counterfact``) names exist."""
    snippets = Path(settings["snippets"])
    if not snippets.is_file():
        logger.warning(
            "CounterFact reference score not computed: no attribute snippets at %s "
            "(docs/evaluation.md#counterfacts-standard-metrics)",
            snippets,
        )
        return None
    idf, vocab = Path(settings["idf"]), Path(settings["vocab"])
    stored = idf.is_file() and vocab.is_file()
    logger.info(
        "CounterFact reference texts from %s, IDF %s",
        snippets,
        f"from {idf}" if stored else "fitted on the snippets",
    )
    return load_reference_texts(
        str(snippets), str(idf) if stored else None, str(vocab) if stored else None
    )


def case_scores(
    nlls: pd.DataFrame,
    generated: Mapping[str, list[str]],
    references: ReferenceTexts | None,
) -> pd.DataFrame:
    """Each case's CounterFact metrics (``COUNTERFACT_SCORES`` columns but the run's
    model and method) from its prompts' NLLs (``mean_nlls``) and its generated
    texts."""
    rows = []
    for case_id, part in nlls.groupby("case_id", sort=True):
        row: dict[str, object] = {"case_id": case_id}
        for kind in PROBABILITY_KINDS:
            chosen = part[part["kind"] == kind]
            new, true = chosen["nll_new"], chosen["nll_true"]
            if kind == "neighborhood":  # the old object must keep winning
                new, true = true, new
            row[f"{kind}_score"] = float((new < true).mean()) if len(chosen) else None
            row[f"{kind}_magnitude"] = (
                float((np.exp(-new) - np.exp(-true)).mean()) if len(chosen) else None
            )
        texts = generated.get(case_id, [])
        first = part.iloc[0]
        row["ngram_entropy"] = (
            float(np.mean([ngram_entropy(t) for t in texts])) if texts else None
        )
        row["reference_score"] = (
            references.score(texts, first["relation_id"], first["target_new_id"])
            if texts and references is not None
            else None
        )
        row["generated"] = json.dumps(texts, ensure_ascii=False)
        rows.append(row)
    return pd.DataFrame(rows)


def score_cases(  # noqa: PLR0913 - the prefix and known NLLs are optional
    lm: LoadedModel,
    prompts: pd.DataFrame,
    settings: CounterfactSettings,
    references: ReferenceTexts | None,
    prefix: str = "",
    *,
    known: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """``case_scores`` of ``prompts``' cases (``COUNTERFACT_PROMPTS`` rows) under the
    model as it is now, after ``prefix`` (``known``: as ``mean_nlls`` takes it)."""
    scored = prompts[prompts["kind"].isin(PROBABILITY_KINDS)]
    nlls = mean_nlls(lm, scored, prefix, settings.batch_size, known)
    generated = {
        case_id: sample_texts(lm, list(part["prompt"]), settings, prefix, case_id)
        for case_id, part in prompts[prompts["kind"] == GENERATION_KIND].groupby(
            "case_id", sort=True
        )
    }
    return case_scores(nlls, generated, references)


def _harmonic_mean(scores: np.ndarray) -> float:
    # imported here: every kedro run imports every pipeline's nodes, and scipy.stats
    # takes a second to import from a cold disk
    from scipy.stats import hmean  # noqa: PLC0415

    # hmean of (efficacy, paraphrase, neighbourhood); 0 when any of them is 0
    return float(hmean(scores)) if (scores > 0).all() else 0.0


def metric_rows(scores: pd.DataFrame, seed: int = 0, n_boot: int = 2000) -> list[dict]:
    """``metrics.csv`` rows (protocol ``counterfact``) per (model, method, risk): each
    metric's mean over cases with a bootstrap CI over cases, and ``cf_score``, the
    harmonic mean of the three scores, with the CI of the same statistic over the
    same resampled cases."""
    rows = []
    for (model, method, risk), part in scores.groupby(
        ["model", "method", "risk"], sort=True
    ):
        base = {"model": model, "method": method, "risk": risk, "protocol": PROTOCOL}
        for metric, (column, probe_type) in METRICS.items():
            values = part[column].dropna().astype(float).to_numpy()
            if values.size == 0:
                continue
            low, high = bootstrap_ci(values, n_boot=n_boot, seed=seed)
            rows.append(
                base
                | {
                    "probe_type": probe_type,
                    "metric": metric,
                    "value": float(values.mean()),
                    "ci_low": low,
                    "ci_high": high,
                    "n": int(values.size),
                    "n_edits": int(values.size),
                }
            )
        triple = part[[f"{k}_score" for k in PROBABILITY_KINDS]].dropna().astype(float)
        if triple.empty:
            continue
        values = triple.to_numpy()
        rng = np.random.default_rng(seed)
        draws = rng.integers(0, len(values), size=(n_boot, len(values)))
        replicates = [_harmonic_mean(values[d].mean(axis=0)) for d in draws]
        rows.append(
            base
            | {
                "probe_type": "all",
                "metric": "cf_score",
                "value": _harmonic_mean(values.mean(axis=0)),
                "ci_low": float(np.quantile(replicates, 0.025)),
                "ci_high": float(np.quantile(replicates, 0.975)),
                "n": len(values),
                "n_edits": len(values),
            }
        )
    return rows


def score_rows(
    cases: pd.DataFrame, prompts: pd.DataFrame, model: str, method: str
) -> pd.DataFrame:
    """``counterfact_scores`` rows: ``case_scores`` output with the run's model,
    method, and each case's risk and source."""
    keys = prompts.drop_duplicates("case_id").set_index("case_id")[["risk", "source"]]
    table = cases.join(keys, on="case_id").assign(model=model, method=method)
    return COUNTERFACT_SCORES.validate(
        table.reindex(columns=list(COUNTERFACT_SCORES.columns)).reset_index(drop=True)
    )


def shard_keys(
    plan: pd.DataFrame, prompts: pd.DataFrame, settings: CounterfactSettings
) -> dict[str, str]:
    """The stored key of each probe-scoring shard (``plan``) that has CounterFact
    cases: the shard's key and a digest of its prompts and the settings, so that a
    stored shard is reused only for the same prompts scored the same way."""
    keys = {}
    for key, rows in plan.groupby("shard", sort=True):
        chosen = prompts[prompts["case_id"].isin(rows["case_id"])]
        if chosen.empty:
            continue
        digest = fingerprint(
            chosen[["case_id", "kind", "prompt", "target_new", "target_true"]]
            .to_numpy()
            .tolist(),
            repr(settings),
        )
        keys[key] = f"{key}-cf{digest[:8]}"
    return keys


@dataclass(frozen=True)
class CounterfactShard(EditedShard):
    """A shard's CounterFact prompts, to score under its method's edits (a
    ``kebench.compute`` task)."""

    prompts: pd.DataFrame
    settings: CounterfactSettings
    references: ReferenceTexts | None
    # the evaluation's NLLs of the shard's probes under the same edits
    known: pd.DataFrame | None = None


@torch.no_grad()
def score_shard(lm: LoadedModel, shard: CounterfactShard) -> pd.DataFrame:
    """``counterfact_scores`` rows of one shard's cases under its edited models.

    A MeLLo memory gives none: ROME's metrics score the prompts' next tokens, which a
    memory-based method does not answer (it answers questions in steps)."""
    parts = []
    for selected, _cases, _deltas, context in applied_groups(
        lm, shard.prompts, shard.delta_groups(), f"CounterFact {shard.method}"
    ):
        if context.mello is not None:
            logger.warning(
                "CounterFact's standard metrics are not defined for %s's memory: "
                "its %d cases are left out",
                shard.method,
                selected["case_id"].nunique(),
            )
            continue
        parts.append(
            score_cases(
                lm,
                selected,
                shard.settings,
                shard.references,
                context.prefix,
                known=shard.known,
            )
        )
    cases = pd.concat(parts) if parts else pd.DataFrame(columns=["case_id"])
    return score_rows(cases, shard.prompts, lm.name, shard.method)


def unedited_scores(  # noqa: PLR0913 - how to score them is keyword-only
    lm: LoadedModel,
    counterfact_prompts: pd.DataFrame,
    cases: Iterable[str],
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    *,
    settings: CounterfactSettings,
    reference_files: Mapping[str, Any],
) -> pd.DataFrame:
    """CounterFact's standard metrics of ``cases`` under the unedited model (ROME's
    "pre" numbers); empty where they have no CounterFact prompts. A prompt the base
    probe scores hold (same prompt and targets) is read from them. ROME's reference
    texts are read as ``reference_files`` says (``reference_texts``)."""
    prompts = counterfact_prompts[counterfact_prompts["case_id"].isin(cases)]
    if prompts.empty:
        return COUNTERFACT_SCORES.validate(
            pd.DataFrame(columns=list(COUNTERFACT_SCORES.columns))
        )
    logger.info(
        "CounterFact metrics of %d cases, unedited", prompts["case_id"].nunique()
    )
    scores = score_cases(
        lm,
        prompts,
        settings,
        reference_texts(reference_files),
        known=evaluated_nlls(probes, base_probe_scores, "lp_new", "lp_old"),
    )
    return score_rows(scores, prompts, lm.name, UNEDITED)


def edited_shards(  # noqa: PLR0913 - where and how to score them is keyword-only
    counterfact_prompts: pd.DataFrame,
    plan: pd.DataFrame,
    probes: pd.DataFrame,
    run_probe_scores: pd.DataFrame,
    stored: Mapping[str, Any],
    *,
    store_root: str,
    settings: CounterfactSettings,
    reference_files: Mapping[str, Any],
) -> dict[str, CounterfactShard]:
    """The CounterFact shards to score, by stored key: those of the probe-scoring
    shards (``plan``) with CounterFact cases that ``stored`` lacks. A prompt the
    shard's probe scores hold (same prompt and targets, under the same edits) is read
    from them. ROME's reference texts are read (``reference_texts``, from
    ``reference_files``) only when a shard is to be scored."""
    keys = shard_keys(plan, counterfact_prompts, settings)
    pending = {
        keys[key]: (rows, shard_plan)
        for key, rows, shard_plan in pending_shards(plan, {})
        if key in keys and keys[key] not in stored
    }
    if not pending:
        return {}
    texts = reference_texts(reference_files)
    shards = {
        stored_key: CounterfactShard(
            shard=rows["shard"].iloc[0],
            plan=shard_plan,
            store_root=store_root,
            prompts=counterfact_prompts[
                counterfact_prompts["case_id"].isin(rows["case_id"])
            ],
            settings=settings,
            references=texts,
            known=evaluated_nlls(
                probes,
                run_probe_scores[run_probe_scores["method"] == rows["method"].iloc[0]],
                "lp_edit_new",
                "lp_edit_old",
            ),
        )
        for stored_key, (rows, shard_plan) in pending.items()
    }
    logger.info(
        "CounterFact metrics: %d shards (%d stored)",
        len(shards),
        len(keys) - len(shards),
    )
    return shards


def collected_scores(
    shards: Mapping[str, Any],
    base_scores: pd.DataFrame,
    plan: pd.DataFrame,
    counterfact_prompts: pd.DataFrame,
    settings: CounterfactSettings,
) -> pd.DataFrame:
    """``counterfact_scores``: the unedited model's, then every shard of the
    probe-scoring ``plan``'s, read from ``shards``."""
    keys = shard_keys(plan, counterfact_prompts, settings)
    stored = pd.DataFrame({"shard": sorted(keys.values())})
    parts = [base_scores, *collect_shards(shards, stored)]
    return COUNTERFACT_SCORES.validate(pd.concat(parts, ignore_index=True))
