"""Known premises: which probes the base model could pass from what it knows.

A premise (``kebench.qa.premises``) is *known* when the base model, asked its cloze in
the direction its probe walks it, generates the KG's answer greedily: its reply gives
the answer, one of the KG's other names of it or, asked backward, another of the KG's
answers, as protocol ``wild`` reads a reply (``wild_match``). An entailed probe's
premises are known when all are (a probe that rests on the edit alone has none); a
direct probe's premise is the edit's original fact.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any

import pandas as pd

from kebench.models.loading import LoadedModel
from kebench.schemas import PREMISE_KNOWLEDGE
from kebench.scoring.base_store import log_reuse, reuse_scores, score_keys
from kebench.scoring.generation import (
    CONTINUATION,
    GenerationSettings,
    generate_answers,
    wild_match,
)
from kebench.scoring.metrics import bootstrap_ci

KEYS = ["prompt", "answer", "aliases", "other_answers"]


def premise_knowledge(  # noqa: PLR0913 - what is already known is optional
    lm: LoadedModel,
    premise_probes: pd.DataFrame,
    model: str,
    settings: GenerationSettings,
    stored: Mapping[str, Callable[[], pd.DataFrame]] | None = None,
    *,
    answered: Mapping[str, str] | None = None,
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Ask the base model each distinct premise once; one row per probe premise. A
    premise whose generation ``stored`` holds (same weights, settings and prompt
    token ids) is not asked again, nor one whose prompt ``answered`` holds (the
    base model's greedy answer to it under these settings, from another protocol's
    decode); the second value holds the new generations, to store."""
    distinct = premise_probes.drop_duplicates(KEYS)[KEYS].reset_index(drop=True)
    keys = score_keys(lm, distinct, ["prompt"], [], asdict(settings))

    def ask(rows: pd.DataFrame) -> pd.DataFrame:
        known = rows["prompt"].map(answered or {}).astype(object)
        new = known.isna().to_numpy()
        texts = generate_answers(lm, list(rows.loc[new, "prompt"]), settings)
        known.loc[new] = [a.text for a in texts]
        return pd.DataFrame({"generation": known}, index=rows.index)

    generations, partition = reuse_scores(stored or {}, keys, distinct, ask)
    known = [
        bool(wild_match(text, answer, json.loads(aliases) + json.loads(others), prompt))
        for text, prompt, answer, aliases, others in zip(
            generations["generation"],
            distinct["prompt"],
            distinct["answer"],
            distinct["aliases"],
            distinct["other_answers"],
            strict=True,
        )
    ]
    scores = distinct.assign(generation=generations["generation"], known=known)
    knowledge = premise_probes.merge(scores, on=KEYS, how="left").assign(model=model)
    return PREMISE_KNOWLEDGE.validate(
        knowledge[list(PREMISE_KNOWLEDGE.columns)]
    ), partition


def premise_generation(params: Mapping[str, Any]) -> GenerationSettings:
    """How a premise is asked, from the ``evaluation`` parameters: decoded as the free
    generation (``wild``), up to ``premises.max_new_tokens`` tokens."""
    wild, settings = params["wild"], params["premises"]
    return GenerationSettings(
        stop_strings=tuple(wild["stop_strings"]),
        max_new_tokens=int(settings["max_new_tokens"]),
        batch_size=int(wild["batch_size"]),
    )


def base_premise_knowledge(  # noqa: PLR0913 - how they are asked is keyword-only
    lm: LoadedModel,
    premise_probes: pd.DataFrame,
    cases: Iterable[str],
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    *,
    generation: GenerationSettings,
    stored: Mapping[str, Callable[[], pd.DataFrame]],
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Whether the base model knows each premise of the probes of ``cases``
    (``premise_knowledge``); and the new rows of the premise store. One that a probe's
    base free answer already answers (``answered_prompts``) is read from that."""
    premises = premise_probes[premise_probes["case_id"].isin(cases)]
    answered = (
        answered_prompts(probes, base_probe_scores, generation.max_new_tokens)
        if "wild_stop" in base_probe_scores
        else {}
    )
    knowledge, partition = premise_knowledge(
        lm, premises, lm.name, generation, stored, answered=answered
    )
    log_reuse(
        f"premises ({len(premises.drop_duplicates(['prompt', 'answer']))} distinct)",
        len(premises),
        partition,
    )
    return knowledge, partition


def answered_prompts(
    probes: pd.DataFrame, base_scores: pd.DataFrame, max_new_tokens: int
) -> dict[str, str]:
    """The base model's free answers (protocol ``wild``) to cloze prompts, asked as
    plain continuations, that a premise decode of at most ``max_new_tokens`` tokens
    with the same stops gives too: those that stopped on their own within that many
    tokens. By prompt."""
    rows = base_scores.merge(probes[["probe_id", "prompt"]], on="probe_id")
    ended = (
        rows["wild_stop"].isin(["stop_string", "sentence_end", "eos"])
        & (rows["wild_tokens"] <= max_new_tokens)
        & (rows["context"] == CONTINUATION)
    )
    return dict(
        zip(rows.loc[ended, "prompt"], rows.loc[ended, "wild_text"], strict=True)
    )


def known_probes(premise_knowledge: pd.DataFrame, probes: pd.DataFrame) -> pd.Series:
    """Per probe id of ``probes``: True when all its premises are known.

    Direct probes are judged on the edit's original fact; entailed probes on their
    derivation's premises (none: True); any probe on the conditions its dataset names
    (RippleEdits' ``condition_queries``); other probes are not judged (NA).
    """
    known = premise_knowledge.groupby("probe_id")["known"].all()
    flags = pd.Series(pd.NA, index=probes["probe_id"], dtype="boolean")
    entailed = probes.loc[probes["probe_type"] == "entailed", "probe_id"]
    flags[entailed] = True
    judged = known.index.intersection(flags.index)
    flags[judged] = known[judged].astype(bool)
    return flags


def known_share(premise_knowledge: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """The share of known premises, per model, kind (edit facts, derivation premises)
    and direction (forward, backward), over distinct questions (one several probes
    rest on counts once), with a bootstrap 95 % CI over those questions."""
    distinct = premise_knowledge.drop_duplicates(["model", "kind", "prompt", "answer"])
    rows = []
    groups = distinct.groupby(["model", "kind", "direction"])
    for (model, kind, direction), part in groups:
        known = part["known"].astype(float).to_numpy()
        low, high = bootstrap_ci(known, seed=seed)
        rows.append(
            {
                "model": model,
                "kind": kind,
                "direction": direction,
                "known_share": float(known.mean()),
                "ci_low": low,
                "ci_high": high,
                "n": len(known),
            }
        )
    return pd.DataFrame(
        rows,
        columns=["model", "kind", "direction", "known_share", "ci_low", "ci_high", "n"],
    )
