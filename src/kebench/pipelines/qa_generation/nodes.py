"""Nodes of qa_generation: thin glue over ``kebench.qa``."""

from __future__ import annotations

from typing import Any

import openai
import pandas as pd

from kebench.kg.vocabulary import join_axioms
from kebench.qa.closure import ClosureSettings
from kebench.qa.deduction import DeductionSettings
from kebench.qa.entailment import (
    derivation_context,
    derive_entailed_facts,
    llm_questions,
    template_questions,
)
from kebench.qa.llm_questions import LlmQuestionWriter, LlmSettings, ResponseCache
from kebench.qa.verbaliser import Verbaliser


def merge_axioms(
    vocabulary_axioms: pd.DataFrame, kg_axioms: pd.DataFrame
) -> pd.DataFrame:
    """``axioms``: the shipped table's and the KG's own, each row with its origin."""
    return join_axioms([vocabulary_axioms, kg_axioms])


def derive_consequences(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    edit_requests: pd.DataFrame,
    rules_for_qa: pd.DataFrame,
    kg_triples: pd.DataFrame,
    axioms: pd.DataFrame,
    entity_aliases: pd.DataFrame,
    entity_types: pd.DataFrame,
    relations: dict[str, Any],
    params: dict[str, Any],
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``entailed_facts``: each edit's consequences whose answer changes, in two
    tiers: deductive (the edit, unchanged KG facts and the vocabulary's axioms) and
    inductive (the mined rules the axioms do not entail)."""
    settings = dict(params["consequences"])
    semantics = settings.pop("semantics")
    context = derivation_context(
        axioms,
        relations,
        entity_aliases,
        entity_types,
        kg_triples,
        params["relation_templates"],
    )
    return derive_entailed_facts(
        edit_requests,
        rules_for_qa,
        kg_triples,
        relations,
        context,
        semantics,
        ClosureSettings(**settings),
        DeductionSettings(**params["deductive"]),
    )


def write_questions(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    entailed_facts: pd.DataFrame,
    edit_requests: pd.DataFrame,
    rules_for_qa: pd.DataFrame,
    question_llm: openai.OpenAI,
    relations: dict[str, Any],
    params: dict[str, Any],
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``entailed_questions``: a multi-hop question and cloze per consequence."""
    verbaliser = Verbaliser.configured(
        params["relation_templates"], relations, params["mquake_templates_dir"]
    )
    questions = template_questions(
        entailed_facts, edit_requests, verbaliser, params["max_questions_per_edit"]
    )
    report: dict[str, Any] = {"generator": params["generator"]}
    if params["generator"] == "llm":
        settings = params["llm"]
        writer = LlmQuestionWriter(
            question_llm,
            LlmSettings.from_params(settings),
            ResponseCache(settings["cache_dir"]),
            settings["prompt"],
        )
        questions, rejected = llm_questions(
            questions, entailed_facts, rules_for_qa, writer
        )
        report |= {"llm_requests_sent": writer.requests_sent, "rejected": rejected}
    report |= {
        "questions": len(questions),
        "wording": questions["wording"].value_counts().to_dict(),
        "relations_without_template": dict(verbaliser.wording_used),
    }
    return questions, report


def merge_qa_reports(
    consequence_report: dict[str, Any], question_report: dict[str, Any]
) -> dict[str, Any]:
    """One qa_generation report: consequences, then questions."""
    return {"consequences": consequence_report, "questions": question_report}
