"""Protocol ``judge``: an LLM judges whether a free generation states the expected answer.

Exact match misses a right answer in other words ("The answer is Ottawa"); a judge
does not. The judge is any model behind an OpenAI-compatible endpoint (the client the
LLM question writer uses, ``kebench.qa.llm_questions.CachedChat``), asked with a
rubric prompt of our own (``evaluation.judge.prompt``) whose reply must contain the
verdict CORRECT or INCORRECT. Replies are cached on disk; a reply without a verdict is
garbage and is retried like a failed request. After the bounded attempts the probe is
*unjudged*, with the reason, and every other probe is still judged. An empty
generation states nothing: it is incorrect without asking; a locality probe's answer
that is the base model's own, character for character, is kept without asking.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import openai
import pandas as pd
from tqdm.auto import tqdm

from kebench.qa.llm_questions import (
    CachedChat,
    LlmError,
    LlmSettings,
    ResponseCache,
)
from kebench.schemas import JUDGEMENTS, UNCHANGED_TYPES
from kebench.scoring.generation import alias_list

logger = logging.getLogger(__name__)

_VERDICT = re.compile(r"\b(INCORRECT|CORRECT)\b", re.IGNORECASE)


def verdict(reply: str) -> float:
    """1.0 for CORRECT, 0.0 for INCORRECT: the first of the two words in ``reply``;
    ``ValueError`` when it has neither."""
    found = _VERDICT.search(reply)
    if found is None:
        raise ValueError(f"no CORRECT or INCORRECT in the judge's reply {reply[:80]!r}")
    return 1.0 if found.group(1).upper() == "CORRECT" else 0.0


@dataclass(frozen=True)
class Judgement:
    """A judged generation (``score``), or an unjudged one with its ``reason``."""

    score: float | None
    reason: str | None = None


class GenerationJudge:
    """Asks the judge model about one generation at a time (the module docstring).

    ``prompt`` has the fields ``{question}``, ``{expected}``, ``{aliases}`` and
    ``{answer}``.
    """

    def __init__(self, chat: CachedChat, prompt: str) -> None:
        missing = [
            f
            for f in ("{question}", "{expected}", "{aliases}", "{answer}")
            if f not in prompt
        ]
        if missing:
            raise ValueError(f"evaluation.judge.prompt lacks the fields {missing}")
        self.chat = chat
        self.prompt = prompt

    def judge(
        self, question: str, expected: str, aliases: list[str], answer: str
    ) -> Judgement:
        if not answer.strip():
            return Judgement(0.0)
        prompt = self.prompt.format(
            question=question,
            expected=expected,
            aliases=", ".join(aliases) if aliases else "none",
            answer=answer,
        )
        try:
            return Judgement(verdict(self.chat.complete(prompt, parse=verdict)))
        except LlmError as error:
            return Judgement(None, str(error))


def judgement_table(
    generations: pd.DataFrame, probes: pd.DataFrame, judge: GenerationJudge
) -> pd.DataFrame:
    """``judgements``: the judge's verdict on each generation (``generations``), with
    the aliases its probe accepts; a locality probe's expected answer is the base
    model's own."""
    aliases = probes.set_index("probe_id")["aliases_new"]
    rows = []
    for row in tqdm(generations.to_dict("records"), desc="judging", unit="answer"):
        accepted = (
            alias_list(aliases.get(row["probe_id"]))
            if row["probe_type"] not in UNCHANGED_TYPES
            else []
        )
        expected = row["expected"] if isinstance(row["expected"], str) else ""
        question = row["question"] if isinstance(row["question"], str) else None
        if (
            row["probe_type"] in UNCHANGED_TYPES
            and row["generation"].strip() == expected.strip()
        ):
            result = Judgement(1.0)  # the base model's very answer: nothing to judge
        else:
            result = judge.judge(
                question or row["prompt"], expected, accepted, row["generation"]
            )
        rows.append(
            {
                "model": row["model"],
                "method": row["method"],
                "probe_id": row["probe_id"],
                "judge": result.score,
                "reason": result.reason,
            }
        )
    return JUDGEMENTS.validate(pd.DataFrame(rows, columns=list(JUDGEMENTS.columns)))


def judged_generations(
    generations: pd.DataFrame,
    probes: pd.DataFrame,
    client: openai.OpenAI,
    settings: Mapping[str, Any],
) -> pd.DataFrame:
    """The judge's verdict on each free generation (none unless ``settings``,
    ``evaluation.judge``, says ``enabled``); a generation it could not judge keeps the
    reason."""
    if not settings["enabled"]:
        return JUDGEMENTS.validate(pd.DataFrame(columns=list(JUDGEMENTS.columns)))
    chat = CachedChat(
        client,
        LlmSettings.from_params(settings),
        ResponseCache(settings["cache_dir"]),
    )
    table = judgement_table(
        generations, probes, GenerationJudge(chat, settings["prompt"])
    )
    logger.info(
        "judged %d generations with %s (%d requests sent, %d unjudged)",
        len(table),
        settings["model"],
        chat.requests_sent,
        int(table["judge"].isna().sum()),
    )
    return table
