"""Score probes under the base model once, then under each edited model.

Base scores are computed once per (model, probes) and reused for every method. An
edited model is the base model with a delta applied (and reverted afterwards, exactly);
an edit that changes no weights is scored in its context (``kebench.scoring.context``):
an in-context edit (IKE) with its prefix before each prompt, a memory-based edit (MeLLo)
after its run of retrieval steps for the probe's question. Each group of cases is scored
with its own deltas applied: one case's delta in single mode, one batch delta for MEMIT,
every delta so far in sequential mode.

Where several edits act at once (a batch, a sequential run), a probe of one edit whose
fact another edit of the group rewrites no longer has the answer it states: it is
dropped, with its reason (``joint_drops``), before any scoring.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from kebench.editing.delta import Delta, delta_applied
from kebench.editing.runner import fingerprint
from kebench.editing.store import DeltaStore
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import AnswerScorer, ContextOverflowError
from kebench.qa.probes import FACT_KEY, fact_keys, rewritten_facts
from kebench.schemas import PROBE_SCORES, UNCHANGED_TYPES
from kebench.scoring.base_store import log_reuse, reuse_scores, score_keys
from kebench.scoring.context import NO_CONTEXT, PromptContext, prompt_context
from kebench.scoring.generation import (
    CONTINUATION,
    QUESTION_CONTEXTS,
    GenerationSettings,
    alias_list,
    asked_prompts,
    asked_question,
    first_tokens_text,
    generate_answers,
    wild_match,
    wild_scores,
)
from kebench.scoring.mello import DEMONSTRATIONS, answer_questions
from kebench.scoring.metrics import exact_match, token_f1

logger = logging.getLogger(__name__)

# The columns one scoring pass yields per probe, before the base_/edit_ prefix.
PASS_COLUMNS = [
    "lp_old",
    "lp_new",
    "n_tokens_old",
    "n_tokens_new",
    "old_argmax",
    "new_token_hits",
]


@dataclass(frozen=True)
class ScoringSettings:
    """How probes are scored: batch size; how a question-form probe is asked
    (``question_context``, ``asked_prompts``); which probe types also get a greedy
    generation (EM/F1 against the new answer) of at most ``max_new_tokens`` (protocol
    ``gen``); which get a free generation (``wild``, ``wild_strict``, ``bke_f1``:
    ``wild_types``, decoded as ``wild`` says, the strict protocols reading the reply
    up to the first of ``strict_cut``)."""

    batch_size: int = 16
    question_context: str = "chat"
    generate_types: tuple[str, ...] = ()
    max_new_tokens: int = 8
    wild: GenerationSettings | None = None
    wild_types: tuple[str, ...] = ()
    strict_cut: tuple[str, ...] = ("\n", ".")

    def __post_init__(self) -> None:
        if self.question_context not in QUESTION_CONTEXTS:
            raise ValueError(
                f"evaluation.question_context {self.question_context!r}: use one of "
                f"{QUESTION_CONTEXTS}"
            )

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> ScoringSettings:
        """The settings of the ``evaluation`` parameters."""
        wild = params["wild"]
        return cls(
            batch_size=int(params["batch_size"]),
            question_context=str(params["question_context"]),
            generate_types=tuple(params["generation"]["probe_types"]),
            max_new_tokens=int(params["generation"]["max_new_tokens"]),
            wild=GenerationSettings(
                stop_strings=tuple(wild["stop_strings"]),
                max_new_tokens=int(wild["max_new_tokens"]),
                batch_size=int(wild["batch_size"]),
            ),
            wild_types=tuple(wild["probe_types"]),
            strict_cut=tuple(wild["strict_cut"]),
        )


def score_pass(
    lm: LoadedModel,
    probes: pd.DataFrame,
    context: PromptContext = NO_CONTEXT,
    settings: ScoringSettings = ScoringSettings(),
) -> pd.DataFrame:
    """log P(answer_old | prompt) and log P(answer_new | prompt) of each probe.

    Also the argmax tokens over the old answer (for locality), how many of the new
    answer's tokens the argmax reproduces (token accuracy), and, for the configured
    probe types, EM and F1 of a greedy generation. A probe without an old answer (an
    injected claim) has NaN old columns.

    Under a MeLLo memory (``context.mello``) every probe's question is answered by
    MeLLo's run (``mello_answer``, ``mello_em``), its answers are scored after the
    run's transcript, and the generation protocols, which would ask the model without
    its memory, are not run. Otherwise each probe is asked as ``asked_prompts``
    says, for its answers' log-probs and its generations alike (column ``context``).
    """
    batch_size = settings.batch_size
    runs = None
    prefix = context.prefix
    if context.mello is not None:
        questions = probes["question"].fillna(probes["prompt"])
        runs = answer_questions(
            lm, list(questions), context.memory, context.mello, batch_size
        )
        prompts = [run.transcript for run in runs]
        contexts = [CONTINUATION] * len(prompts)
        prefix = DEMONSTRATIONS
    else:
        prompts, contexts = asked_prompts(lm, probes, settings.question_context)
    has_old = probes["answer_old"].notna().to_numpy()
    old_prompts = [p for p, keep in zip(prompts, has_old, strict=True) if keep]
    answers = [*probes["answer_new"], *probes.loc[has_old, "answer_old"]]
    probe_ids = [*probes["probe_id"], *probes.loc[has_old, "probe_id"]]
    empty = sorted(
        {i for i, a in zip(probe_ids, answers, strict=True) if not a.strip()}
    )
    if empty:
        raise ValueError(f"probes with an empty answer cannot be scored: {empty[:10]}")
    try:
        # one scorer, so that a probe's two answers share its prompt's forward pass
        scorer = AnswerScorer(
            lm.model,
            lm.tokenizer,
            prompts + old_prompts,
            answers,
            batch_size=batch_size,
            prefix=prefix,
        )
    except ContextOverflowError as error:
        raise ValueError(
            f"probe {probe_ids[error.index]!r} cannot be scored: {error}"
        ) from error
    # the generations first: a prompt they prefill is not run again for its answers
    generated = (
        _generations(
            lm, probes, prompts, settings=settings, prefix=prefix, scorer=scorer
        )
        if runs is None
        else None
    )
    with torch.no_grad():
        scored = scorer.finish()
    new = scored[: len(prompts)]
    old = iter(scored[len(prompts) :])
    rows = []
    for keep, new_score in zip(has_old, new, strict=True):
        old_score = next(old) if keep else None
        rows.append(
            {
                "lp_old": old_score.logprob if old_score else float("nan"),
                "lp_new": new_score.logprob,
                "n_tokens_old": old_score.n_tokens if old_score else 0,
                "n_tokens_new": new_score.n_tokens,
                "old_argmax": " ".join(map(str, old_score.argmax_ids))
                if old_score
                else None,
                "new_token_hits": sum(
                    a == b
                    for a, b in zip(
                        new_score.argmax_ids, new_score.answer_ids, strict=True
                    )
                ),
            }
        )
    scores = pd.DataFrame(rows, index=probes.index, columns=PASS_COLUMNS)
    scores["context"] = contexts
    if runs is not None:
        answers = [run.answer for run in runs]
        scores["mello_answer"] = answers
        scores["mello_em"] = mello_matches(probes, answers)
        return scores
    return scores.join(generated)


def _generations(  # noqa: PLR0913 - score_pass's state
    lm: LoadedModel,
    probes: pd.DataFrame,
    prompts: Sequence[str],
    *,
    settings: ScoringSettings,
    prefix: str,
    scorer: AnswerScorer,
) -> pd.DataFrame:
    """The columns of the generation protocols (gen, wild), where asked; the prompt
    passes of the free generation go to ``scorer``."""
    scores = pd.DataFrame(index=probes.index)
    generate = probes["probe_type"].isin(settings.generate_types).to_numpy()
    gen_texts = pd.Series(None, index=probes.index, dtype=object)
    asked = probes["probe_type"].isin(settings.wild_types).to_numpy()
    if settings.wild is not None and asked.any():
        chosen = probes[asked]
        texts = [p for p, a in zip(prompts, asked, strict=True) if a]
        # a probe also generated (gen) asks the same prompt greedily: its decode goes
        # on for gen's tokens past wild's stop, and serves both
        shared = generate[asked]
        answers = generate_answers(
            lm,
            texts,
            settings.wild,
            prefix,
            at_least=[settings.max_new_tokens * bool(s) for s in shared],
            on_prompt_pass=scorer.take,
        )
        scores.loc[asked, "wild_text"] = [a.text for a in answers]
        scores.loc[asked, "wild_stop"] = [a.stop for a in answers]
        scores.loc[asked, "wild_tokens"] = [float(a.n_tokens) for a in answers]
        gen_texts.loc[chosen.index[shared]] = [
            gen_text(first_tokens_text(a, settings.max_new_tokens, lm.tokenizer))
            for a, s in zip(answers, shared, strict=True)
            if s
        ]
    alone = generate & gen_texts.isna().to_numpy()
    if alone.any():
        gen_texts[alone] = greedy_answers(
            lm,
            [p for p, g in zip(prompts, alone, strict=True) if g],
            settings.max_new_tokens,
            settings.batch_size,
            prefix,
        )
    if generate.any():
        texts = gen_texts[generate]
        answers = probes.loc[generate, "answer_new"]
        scores.loc[generate, "gen_em"] = [
            exact_match(t, a) for t, a in zip(texts, answers, strict=True)
        ]
        scores.loc[generate, "gen_f1"] = [
            token_f1(t, a) for t, a in zip(texts, answers, strict=True)
        ]
    return scores


# the texts a probe's base scores depend on, with its type (scoring/base_store.py)
PROBE_TEXTS = ["prompt", "answer_new", "answer_old", "question"]


def unedited_scores(
    lm: LoadedModel,
    probes: pd.DataFrame,
    cases: Iterable[str],
    stored: Mapping[str, Callable[[], pd.DataFrame]],
    settings: ScoringSettings,
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The probes of ``cases`` under the unedited model, with their ``probe_id``; and
    the new rows of the base-score store. A probe scored before, by any run or
    pipeline, with the same weights, settings and token ids, is read from ``stored``."""
    edited = probes[probes["case_id"].isin(cases)]
    # a question's asked text is also the model's chat template's
    salt = asdict(settings) | {"chat_template": lm.tokenizer.chat_template}
    keys = score_keys(lm, edited, PROBE_TEXTS, ["probe_type", "form"], salt)
    scores, partition = reuse_scores(
        stored,
        keys,
        edited,
        lambda rows: score_pass(lm, rows, settings=settings),
    )
    log_reuse("probes", len(edited), partition)
    return scores.assign(probe_id=edited["probe_id"].to_numpy()), partition


def mello_matches(probes: pd.DataFrame, answers: Sequence[str | None]) -> list[float]:
    """``mello_em`` of each probe: 1 when MeLLo's final answer is the probe's answer or
    one of its aliases (``wild_match``): the new answer, or for a locality probe the
    old one, which the edit must leave alone; 0 without a final answer."""
    matches = []
    for probe, answer in zip(probes.to_dict("records"), answers, strict=True):
        side = "old" if probe["probe_type"] in UNCHANGED_TYPES else "new"
        gold = probe[f"answer_{side}"]
        if answer is None or not isinstance(gold, str):
            matches.append(0.0 if answer is None else float("nan"))
            continue
        aliases = alias_list(probe.get(f"aliases_{side}"))
        matches.append(wild_match(answer, gold, aliases, asked_question(probe)))
    return matches


def applied_groups(
    lm: LoadedModel,
    frame: pd.DataFrame,
    groups: Iterable[tuple[Sequence[str], Sequence[Delta]]],
    description: str,
) -> Iterator[tuple[pd.DataFrame, Sequence[str], Sequence[Delta], PromptContext]]:
    """Each group's rows of ``frame`` (by ``case_id``), its cases, its deltas and their
    context (``prompt_context``), yielded while the deltas are applied to ``lm``; reverted,
    exactly, before the next group. Groups without rows are skipped.

    Args:
        groups: ``(case_ids, deltas)``: the cases scored while ``deltas`` are applied
            together.
    """
    for case_ids, deltas in tqdm(list(groups), desc=description, unit="group"):
        selected = frame[frame["case_id"].isin(case_ids)]
        if selected.empty:
            continue
        with ExitStack() as stack:
            for delta in deltas:
                stack.enter_context(delta_applied(lm.model, delta))
            yield selected, case_ids, deltas, prompt_context(deltas)


@torch.no_grad()
def edited_scores(
    lm: LoadedModel,
    probes: pd.DataFrame,
    groups: Iterable[tuple[Sequence[str], Sequence[Delta]]],
    settings: ScoringSettings = ScoringSettings(),
    description: str = "scoring",
) -> pd.DataFrame:
    """Scores of each group's probes with that group's deltas applied
    (``applied_groups``)."""
    parts = []
    for selected, case_ids, deltas, context in applied_groups(
        lm, probes, groups, description
    ):
        try:
            parts.append(score_pass(lm, selected, context, settings))
        except ValueError as error:
            if not isinstance(error.__cause__, ContextOverflowError):
                raise
            tokens = len(lm.tokenizer(context.prefix)["input_ids"])
            named = ", ".join(list(case_ids)[:5])
            raise ValueError(
                f"the in-context prefix of {len(deltas)} edit(s), for cases "
                f"{named} ({len(case_ids)} in all), takes {tokens} tokens: too "
                f"many to ask every probe after it: {error}"
            ) from error
    if not parts:
        return pd.DataFrame(columns=PASS_COLUMNS)
    return pd.concat(parts)


def greedy_answers(
    lm: LoadedModel,
    prompts: Sequence[str],
    max_new_tokens: int,
    batch_size: int = 16,
    prefix: str = "",
) -> list[str]:
    """Greedy continuations of ``prompts`` after ``prefix``, up to a newline (protocol
    ``gen``): ``generate_answers`` without stop strings, its text cut here."""
    settings = GenerationSettings(
        stop_strings=(),
        sentence_end=False,
        max_new_tokens=max_new_tokens,
        batch_size=batch_size,
    )
    answers = generate_answers(lm, prompts, settings, prefix)
    return [gen_text(answer.raw) for answer in answers]


def gen_text(raw: str) -> str:
    """Protocol ``gen``'s answer in a greedy continuation: its first line."""
    return raw.strip().split("\n")[0]


def case_digests(probes: pd.DataFrame) -> dict[str, str]:
    """A digest of each case's probes (ids, types, prompts, answers): what it is
    scored on."""
    columns = ["probe_id", "probe_type", "prompt", "answer_new", "answer_old"]
    return {
        case: fingerprint(rows[columns].to_numpy().tolist())
        for case, rows in probes.groupby("case_id", sort=False)
    }


def probe_score_rows(  # noqa: PLR0913 - where a reply is cut is keyword-only
    probes: pd.DataFrame,
    base: pd.DataFrame,
    edited: pd.DataFrame,
    model: str,
    method: str,
    *,
    strict_cut: Sequence[str] = ScoringSettings.strict_cut,
) -> pd.DataFrame:
    """``probe_scores`` rows of one method: each scored probe's base and edited passes
    (``strict_cut``: where the strict protocols cut a reply, ``wild_scores``).

    All three frames are indexed by probe_id; ``edited`` holds the probes scored.
    """
    index = edited.index
    rows = probes.loc[
        index, ["case_id", "probe_id", "probe_type", "risk", "source"]
    ].assign(
        model=model,
        method=method,
        context=edited["context"],
        lp_base_old=base.loc[index, "lp_old"],
        lp_base_new=base.loc[index, "lp_new"],
        lp_edit_old=edited["lp_old"],
        lp_edit_new=edited["lp_new"],
        n_tokens_old=base.loc[index, "n_tokens_old"],
        n_tokens_new=base.loc[index, "n_tokens_new"],
        base_old_argmax=base.loc[index, "old_argmax"],
        edit_old_argmax=edited["old_argmax"],
        base_new_token_hits=base.loc[index, "new_token_hits"],
        edit_new_token_hits=edited["new_token_hits"],
        gen_em=edited.get("gen_em"),
        gen_f1=edited.get("gen_f1"),
        mello_answer=edited.get("mello_answer"),
        mello_em=edited.get("mello_em"),
    )
    if "wild_text" in edited:
        base_texts = base.loc[index].get("wild_text", pd.Series(None, index=index))
        rows = rows.assign(
            base_wild_text=base_texts,
            edit_wild_text=edited["wild_text"],
            edit_wild_stop=edited["wild_stop"],
            edit_wild_tokens=edited["wild_tokens"],
            **wild_scores(
                probes.loc[index], base_texts, edited["wild_text"], strict_cut
            ),
        )
    # columns of protocols not run stay empty
    columns = list(PROBE_SCORES.columns)
    return PROBE_SCORES.validate(rows.reindex(columns=columns).reset_index(drop=True))


def reread_answers(
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    strict_cut: Sequence[str] = ScoringSettings.strict_cut,
) -> pd.DataFrame:
    """``probe_scores`` with every verdict on a stored reply read again: the free
    generation's (``wild_scores``) and MeLLo's final answer's (``mello_matches``).
    A verdict is a function of the reply and the probe, so a stored shard read by a
    newer matcher gets the newer verdicts instead of those it was stored with."""
    by_id = probes.set_index("probe_id", drop=False)
    scores = probe_scores.copy()
    replied = scores["edit_wild_text"].notna().to_numpy()
    if replied.any():
        rows = scores[replied]
        verdicts = wild_scores(
            by_id.loc[rows["probe_id"]].set_axis(rows.index),
            rows["base_wild_text"],
            rows["edit_wild_text"],
            strict_cut,
        )
        scores.loc[replied, list(verdicts.columns)] = verdicts
    answered = scores["mello_answer"].notna().to_numpy()
    if answered.any():
        rows = scores[answered]
        asked = by_id.loc[rows["probe_id"]]
        scores.loc[answered, "mello_em"] = mello_matches(
            asked, list(rows["mello_answer"])
        )
    return scores


def delta_groups(
    manifest: pd.DataFrame, load: Callable[[str], Delta]
) -> Iterator[tuple[list[str], list[Delta]]]:
    """The (cases, deltas) groups under which one method's probes are scored.

    ``manifest`` holds one method and mode, ``ok`` rows only. single: each case with its
    own delta; batch: the cases of one batch delta together; sequential: every case at
    the end of the run, with all deltas applied in their order.
    """
    if manifest.empty:
        return
    mode = manifest["mode"].iloc[0]
    ordered = manifest.sort_values("order")
    if mode == "sequential":
        files = list(dict.fromkeys(ordered["delta_file"]))
        yield list(ordered["case_id"]), [load(f) for f in files]
        return
    for delta_file, part in ordered.groupby("delta_file", sort=False):
        yield list(part["case_id"]), [load(delta_file)]


# Why a probe is dropped from joint scoring: another edit of its group rewrites the
# fact it asks, as that edit's own fact or as one of its consequences.
DROP_REASONS = {"direct": "other_edit_fact", "consequence": "other_edit_consequence"}
# the probe types that ask the edit's own fact
OWN_FACT_TYPES = ("direct", "paraphrase")
DROP_COLUMNS = [
    "model",
    "method",
    "mode",
    "case_id",
    "probe_id",
    "probe_type",
    "reason",
    "rewritten_by",
]


def joint_group(edits: pd.DataFrame) -> pd.Series:
    """The group of edits each manifest row acts together with: its batch (the rows
    of one batch share their unit's fingerprint), the whole run in sequential mode,
    itself in single mode. Failed edits keep their group: both populations (ok_edits
    and itt) are scored on the same probes."""
    sequential = edits["mode"] == "sequential"
    unit = edits["fingerprint"].where(~sequential, "run")
    return edits["method"] + "/" + edits["mode"] + "/" + unit


def joint_drops(
    edits: pd.DataFrame, probes: pd.DataFrame, rewritten: pd.DataFrame
) -> pd.DataFrame:
    """The probes a group's joint edited world changes, with their reason.

    A probe of case X is dropped when another edit Y of X's group (``joint_group``)
    rewrites the fact the probe asks (its ``FACT_KEY``): its answer is no longer the
    one it states. ``other_edit_fact`` when it is Y's edited fact, else
    ``other_edit_consequence``; ``rewritten_by`` lists the Ys. X's own fact (its
    direct and paraphrase probes) is dropped only when Y edits it too. Single mode
    drops nothing.

    Args:
        edits: manifest rows of the evaluated methods and mode.
        rewritten: ``kebench.qa.probes.rewritten_facts``.
    """
    members = edits[["model", "method", "mode", "case_id"]].assign(
        group=joint_group(edits)
    )
    asked = fact_keys(probes, *FACT_KEY)[
        ["case_id", "probe_id", "probe_type", *FACT_KEY]
    ].merge(members, on="case_id")
    changed = rewritten.merge(members[["case_id", "group"]], on="case_id").rename(
        columns={"case_id": "rewritten_by"}
    )
    hits = asked.merge(changed, on=["group", *FACT_KEY])
    # an edit's own fact is stated, not derived: another edit's consequence yields
    # to it, so only another edit of the same fact drops its direct probes
    own_fact = hits["probe_type"].isin(OWN_FACT_TYPES) & (hits["kind"] != "direct")
    hits = hits[(hits["case_id"] != hits["rewritten_by"]) & ~own_fact]
    if hits.empty:
        return pd.DataFrame(columns=DROP_COLUMNS)
    # a probe rewritten as another edit's own fact is reported so, whatever else
    hits = hits.assign(
        reason=hits["kind"].map(DROP_REASONS),
        direct_first=hits["kind"] != "direct",
    ).sort_values(["direct_first", "rewritten_by"])
    keys = ["method", "probe_id"]
    by = hits.groupby(keys)["rewritten_by"].agg(lambda ids: " ".join(sorted(set(ids))))
    drops = hits.drop_duplicates(keys).drop(columns="rewritten_by")
    drops = drops.join(by, on=keys)
    return drops[DROP_COLUMNS].sort_values(keys, ignore_index=True)


def drop_counts(drops: pd.DataFrame) -> pd.DataFrame:
    """How many probes joint scoring dropped per method, mode, probe type and reason."""
    keys = ["method", "mode", "probe_type", "reason"]
    return drops.groupby(keys).size().rename("probes").reset_index()


def run_joint_drops(
    edits: pd.DataFrame, probes: pd.DataFrame, entailed_facts: pd.DataFrame
) -> pd.DataFrame:
    """The probes of ``edits`` left out of joint scoring (batch, sequential): those
    whose fact another edit of the same batch or run rewrites, with the reason;
    logged by count."""
    missing = [c for c in FACT_KEY if c not in probes]
    if missing:
        raise ValueError(
            f"probes have no fact keys {missing}: rerun "
            "`kedro run --pipelines=risk_unification`"
        )
    drops = joint_drops(edits, probes, rewritten_facts(probes, entailed_facts))
    for row in drop_counts(drops).to_dict("records"):
        logger.info(
            "%s (%s): %d %s probes dropped from joint scoring (%s)",
            row["method"],
            row["mode"],
            row["probes"],
            row["probe_type"],
            row["reason"],
        )
    return drops


def kept_probes(probes: pd.DataFrame, drops: pd.DataFrame, method: str) -> pd.DataFrame:
    """``probes`` without those joint scoring dropped for ``method``."""
    dropped = drops.loc[drops["method"] == method, "probe_id"]
    return probes[~probes["probe_id"].isin(dropped)]


# how many cases an error names, per method
NAMED_CASES = 5


def require_scored(
    edits: pd.DataFrame, probe_scores: pd.DataFrame, parameter: str
) -> None:
    """Refuse ``edits`` (manifest rows picked by ``parameter``) of which one that
    succeeded has no ``probe_scores``: the pipelines after evaluation measure what it
    scored, and a missing score would otherwise be a silent NaN or a lookup error."""
    ok = edits[edits["status"] == "ok"]
    scored = pd.MultiIndex.from_frame(probe_scores[["method", "case_id"]])
    missing = ok[~pd.MultiIndex.from_frame(ok[["method", "case_id"]]).isin(scored)]
    if missing.empty:
        return
    unscored = "; ".join(
        f"{method}: {', '.join(cases[:NAMED_CASES])}"
        f"{' ...' if len(cases) > NAMED_CASES else ''} ({len(cases)})"
        for method, cases in missing.groupby("method")["case_id"].agg(list).items()
    )
    methods = "+".join(sorted(set(missing["method"])))
    raise ValueError(
        f"{parameter} picks edits the evaluation did not score ({unscored}): run the "
        "evaluation pipeline with an editing.n_edits that covers them "
        f"(kedro run --pipelines=evaluation --params=method={methods},n_edits=...)"
    )


def plan_shards(
    edits: pd.DataFrame,
    shard_size: int,
    *salt: object,
    content: Mapping[str, str] | None = None,
    split_sequential: bool = True,
) -> pd.DataFrame:
    """``edits`` (ok manifest rows) with a ``shard`` column: consecutive delta groups of
    one method and mode, about ``shard_size`` cases each.

    A sequential run's cases all see its final state: they are cut into shards when
    each case is measured on its own probes (``split_sequential``), and kept in one
    shard when every case gets the same measure of that state (drift), so that it is
    measured once.

    A shard's key, ``<METHOD>/<mode>/<index>-<hash>``, hashes the fingerprints of the
    edits it applies, ``content`` of its cases (case_id -> a digest of what is scored,
    e.g. its probes) and ``salt`` (the settings), so a stored shard is reused only for
    the same edits measuring the same things the same way.
    """
    parts = []
    for (method, mode), rows in edits.groupby(["method", "mode"], sort=True):
        ordered = rows.sort_values("order")
        applied = _applied(ordered)
        shards: list[list[pd.DataFrame]] = [[]]
        for group in _shard_groups(ordered, split_sequential=split_sequential):
            if sum(len(g) for g in shards[-1]) >= shard_size:
                shards.append([])
            shards[-1].append(group)
        for index, shard in enumerate(shards):
            part = pd.concat(shard)
            digest = _shard_digest(part, applied, salt, content)
            parts.append(part.assign(shard=f"{method}/{mode}/{index:04d}-{digest}"))
    if not parts:
        return edits.assign(shard=pd.Series(dtype=str))
    return pd.concat(parts, ignore_index=True)


def _applied(ordered: pd.DataFrame) -> list[str]:
    """The fingerprints of the deltas every case of one method and mode sees besides
    its own group's: a sequential run's, in order (``ordered``: its planned rows)."""
    return (
        list(ordered["fingerprint"]) if ordered["mode"].iloc[0] == "sequential" else []
    )


def _shard_groups(
    ordered: pd.DataFrame, *, split_sequential: bool = True
) -> list[pd.DataFrame]:
    """The groups of ``ordered`` (one method and mode, by order) a shard never splits:
    the cases of one delta; a sequential run's cases one by one, or all together."""
    if ordered["mode"].iloc[0] != "sequential":
        return [g for _, g in ordered.groupby("delta_file", sort=False)]
    if split_sequential:
        return [ordered.iloc[[i]] for i in range(len(ordered))]
    return [ordered]


def _shard_digest(
    part: pd.DataFrame,
    applied: list[str],
    salt: tuple[object, ...],
    content: Mapping[str, str] | None,
) -> str:
    """The hash in a shard's key: its edits, what is scored of its cases, the deltas
    they also see and the settings."""
    cases = [(content or {}).get(case) for case in part["case_id"]]
    return fingerprint(list(part["fingerprint"]), cases, applied, *salt)[:12]


def stored_shard_plan(
    edits: pd.DataFrame,
    stored: Mapping[str, Callable[[], pd.DataFrame]],
    *salt: object,
    content: Mapping[str, str] | None = None,
) -> pd.DataFrame:
    """The ``edits`` (ok manifest rows: every stored edit of their methods and modes)
    whose current results a stored shard holds, with its key in a ``shard`` column.

    Which edits a run shards together depends on what it selected, so a later run that
    selects other edits plans other keys; a stored shard (``stored``: key -> loader of
    rows with ``case_id``) is still current when ``plan_shards`` gives its own cases
    the same hash today: the same edits (in a sequential run, the same whole run: all
    of ``edits`` of it), the same ``content`` of its cases and the same ``salt``. An
    edit that several current shards hold (runs that cut shards differently) takes the
    first by key.
    """
    parts = []
    for (method, mode), rows in edits.groupby(["method", "mode"], sort=True):
        ordered = rows.sort_values("order")
        applied = _applied(ordered)
        found: set[str] = set()
        for key in sorted(k for k in stored if k.startswith(f"{method}/{mode}/")):
            cases = set(stored[key]()["case_id"])
            part = ordered[ordered["case_id"].isin(cases)]
            if len(part) < len(cases):  # a case no longer stored, or failed
                continue
            part = pd.concat(_shard_groups(part))
            if key.rsplit("-", 1)[-1] == _shard_digest(part, applied, salt, content):
                parts.append(part[~part["case_id"].isin(found)].assign(shard=key))
                found |= cases
    if not parts:
        return edits.iloc[:0].assign(shard=pd.Series(dtype=str))
    return pd.concat(parts, ignore_index=True)


@dataclass(frozen=True)
class EditedShard:
    """One shard of a plan (``plan_shards``): its key, the planned edits of its method
    and mode, and the delta store's folder (read where the shard runs)."""

    shard: str
    plan: pd.DataFrame
    store_root: str

    @property
    def method(self) -> str:
        return self.plan["method"].iloc[0]

    def delta_groups(self) -> Iterator[tuple[list[str], list[Delta]]]:
        """``delta_groups`` of the shard's cases; a sequential shard's cases get every
        delta of the run."""
        load = DeltaStore(self.store_root).load
        rows = self.plan[self.plan["shard"] == self.shard]
        if rows.empty or rows["mode"].iloc[0] != "sequential":
            yield from delta_groups(rows, load)
            return
        _, deltas = next(delta_groups(self.plan, load))
        yield list(rows["case_id"]), deltas


@dataclass(frozen=True)
class ScoreShard(EditedShard):
    """A shard's probes (by probe_id) and their base-model scores, to score under its
    method's edits (a ``kebench.compute`` task)."""

    probes: pd.DataFrame
    base: pd.DataFrame
    settings: ScoringSettings


def score_shard(lm: LoadedModel, shard: ScoreShard) -> pd.DataFrame:
    """``probe_scores`` rows of one shard."""
    edited = edited_scores(
        lm,
        shard.probes,
        shard.delta_groups(),
        shard.settings,
        f"scoring {shard.method}",
    )
    return probe_score_rows(
        shard.probes,
        shard.base,
        edited,
        lm.name,
        shard.method,
        strict_cut=shard.settings.strict_cut,
    )
