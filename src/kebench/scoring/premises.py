"""Known premises: which probes the base model could pass from what it knows.

A premise (``kebench.qa.premises``) is *known* when the base model prefers the KG's
answer over every candidate answer of the same relation: log P(answer | cloze) summed
over its tokens (the joint probability, as EditSucc) is above the best candidate's. A
premise whose relation has no other answer in the KG has nothing to beat and counts as
known. An entailed probe's premises are known when all are (a probe that rests on the
edit alone has none); a direct probe's premise is the edit's original fact.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from kebench.models.loading import LoadedModel
from kebench.schemas import PREMISE_KNOWLEDGE
from kebench.scoring.logprobs import score_answers
from kebench.scoring.metrics import bootstrap_ci

KEYS = ["prompt", "answer", "candidates"]


def premise_knowledge(
    lm: LoadedModel, premise_probes: pd.DataFrame, model: str, batch_size: int = 16
) -> pd.DataFrame:
    """Score each distinct premise once on the base model; one row per probe premise."""
    distinct = premise_probes.drop_duplicates(KEYS)[KEYS].reset_index(drop=True)
    candidates = [json.loads(c) for c in distinct["candidates"]]
    prompts, answers = [], []
    for prompt, answer, others in zip(
        distinct["prompt"], distinct["answer"], candidates, strict=True
    ):
        prompts += [prompt] * (1 + len(others))
        answers += [answer, *others]
    # one call: a premise's answer and candidates share its prompt's forward pass
    scored = iter(
        score_answers(lm.model, lm.tokenizer, prompts, answers, batch_size=batch_size)
    )
    rows = []
    for others in candidates:
        lp_answer = next(scored).logprob
        lps = [next(scored).logprob for _ in others]
        best = int(np.argmax(lps)) if lps else None
        rows.append(
            {
                "lp_answer": lp_answer,
                "best_candidate": others[best] if best is not None else None,
                "lp_best_candidate": lps[best] if best is not None else None,
                "n_candidates": len(others),
                "known": best is None or lp_answer > lps[best],
            }
        )
    scores = pd.concat([distinct, pd.DataFrame(rows)], axis=1)
    knowledge = premise_probes.merge(scores, on=KEYS, how="left").assign(model=model)
    return PREMISE_KNOWLEDGE.validate(knowledge[list(PREMISE_KNOWLEDGE.columns)])


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
    """The share of known premises, per model and kind (edit facts, derivation
    premises), over distinct facts (a fact several probes rest on counts once), with a
    bootstrap 95 % CI over those facts."""
    distinct = premise_knowledge.drop_duplicates(["model", "kind", "prompt", "answer"])
    rows = []
    for (model, kind), part in distinct.groupby(["model", "kind"]):
        known = part["known"].astype(float).to_numpy()
        low, high = bootstrap_ci(known, seed=seed)
        rows.append(
            {
                "model": model,
                "kind": kind,
                "known_share": float(known.mean()),
                "ci_low": low,
                "ci_high": high,
                "n": len(known),
            }
        )
    return pd.DataFrame(
        rows, columns=["model", "kind", "known_share", "ci_low", "ci_high", "n"]
    )
