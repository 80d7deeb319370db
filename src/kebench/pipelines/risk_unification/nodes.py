"""Nodes of risk_unification: thin glue over ``kebench.qa.probes``."""

from __future__ import annotations

from typing import Any

import pandas as pd

from kebench.kg.aliases import aliases_by_label
from kebench.kg.edit_cases import (
    RawEditCases,
    RelationCatalog,
    counterfact_prompts,
    dataset_probes,
)
from kebench.kg.vocabulary import edit_relations, vocabulary_of
from kebench.qa.premises import premise_probes
from kebench.qa.probes import (
    InjectionSet,
    dataset_probe_rows,
    edit_probes,
    entailed_probes,
    injection_probes,
    locality_probes,
    probe_summary,
    relation_specificity_probes,
    unify_probes,
    with_echoes,
    with_kg_aliases,
)
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import PROBES


def collect_edit_probes(
    edit_requests: pd.DataFrame,
    relations: dict[str, dict[str, Any]],
    params: dict[str, Any],
) -> pd.DataFrame:
    """Direct (the edit's cloze) and paraphrase (its question) probes, keyed by the
    KG fact they ask."""
    predicates = {r: edit_relations(r, relations) for r in relations}
    return edit_probes(edit_requests, params["qa_format"], predicates)


def collect_entailed_probes(
    entailed_questions: pd.DataFrame,
    edit_requests: pd.DataFrame,
    entailed_facts: pd.DataFrame,
) -> pd.DataFrame:
    """Entailed probes from the rule-derived questions, keyed by their consequence."""
    return entailed_probes(entailed_questions, edit_requests, entailed_facts)


def read_dataset_probes(
    raw_edit_cases: RawEditCases,
    relations: dict[str, Any],
    rippleedits_relations: dict[str, Any],
) -> pd.DataFrame:
    """The dataset's own probes as its files state them (a RippleEdits file's read
    with the phrases of RippleEdits' relation table)."""
    return dataset_probes(
        raw_edit_cases, RelationCatalog.from_config(relations, rippleedits_relations)
    )


def collect_dataset_probes(
    raw_dataset_probes: pd.DataFrame,
    edit_requests: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """The dataset's own probes: MQuAKE's multi-hop questions, CounterFact's and
    zsRE's paraphrases and locality prompts, RippleEdits' tests."""
    return dataset_probe_rows(raw_dataset_probes, edit_requests, params["qa_format"])


def collect_counterfact_prompts(
    raw_edit_cases: RawEditCases, edit_requests: pd.DataFrame
) -> pd.DataFrame:
    """CounterFact's prompts of each edit, for its standard metrics (empty for other
    datasets)."""
    prompts = counterfact_prompts(raw_edit_cases)
    return prompts[prompts["case_id"].isin(edit_requests["case_id"])].reset_index(
        drop=True
    )


def sample_locality_probes(
    edit_requests: pd.DataFrame,
    kg_triples: pd.DataFrame,
    relation_templates: dict[str, dict[str, str]],
    params: dict[str, Any],
) -> pd.DataFrame:
    """Unrelated KG facts per edit, whose answers an edit must leave alone."""
    settings = params["locality"]
    verbaliser = Verbaliser(templates=relation_templates)
    return locality_probes(
        edit_requests, kg_triples, verbaliser, settings["per_edit"], settings["seed"]
    )


def sample_relation_specificity_probes(  # noqa: PLR0913, PLR0917 - a node's inputs
    edit_requests: pd.DataFrame,
    kg_triples: pd.DataFrame,
    rules_for_qa: pd.DataFrame,
    axioms: pd.DataFrame,
    relations: dict[str, Any],
    relation_templates: dict[str, dict[str, str]],
    params: dict[str, Any],
) -> pd.DataFrame:
    """Facts of each edited subject under a relation no axiom or rule lets the edit
    change, whose answers must stay (RippleEdits' Relation Specificity)."""
    settings = params["relation_specificity"]
    return relation_specificity_probes(
        edit_requests,
        kg_triples,
        rules_for_qa,
        vocabulary_of(axioms, relations),
        Verbaliser(templates=relation_templates),
        relations,
        settings["per_edit"],
        settings["seed"],
    )


def collect_injection_probes(
    injection_sets: list[InjectionSet], params: dict[str, Any]
) -> pd.DataFrame:
    """Harmful-injection probes (misinformation, bias) from the EditAttack sets."""
    return injection_probes(
        injection_sets, params["injection_max_cases"], params["qa_format"]
    )


def unify_probe_table(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    edit: pd.DataFrame,
    entailed: pd.DataFrame,
    dataset: pd.DataFrame,
    locality: pd.DataFrame,
    relation_specificity: pd.DataFrame,
    injection: pd.DataFrame,
    entity_aliases: pd.DataFrame,
    kg_triples: pd.DataFrame,
    edit_requests: pd.DataFrame,
) -> pd.DataFrame:
    """The one ``probes`` table, validated, its answers' aliases completed with the
    KG's other names of them, each probe marked when it is an echo of its edit."""
    probes = unify_probes(
        [edit, entailed, dataset, locality, relation_specificity, injection]
    )
    aliases = aliases_by_label(entity_aliases, kg_triples, edit_requests)
    probes = with_kg_aliases(probes, aliases)
    return PROBES.validate(with_echoes(probes, edit_requests, entity_aliases))


def summarise_probes(probes: pd.DataFrame) -> pd.DataFrame:
    """Counts per source x probe_type x risk, for the report."""
    return probe_summary(probes)


def collect_premise_probes(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probes: pd.DataFrame,
    raw_dataset_probes: pd.DataFrame,
    entailed_questions: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    edit_requests: pd.DataFrame,
    kg_triples: pd.DataFrame,
    entity_aliases: pd.DataFrame,
    relations: dict[str, Any],
    qa_params: dict[str, Any],
) -> pd.DataFrame:
    """The facts each direct and entailed probe rests on, and those a dataset names
    for its own probes, as cloze probes with their answer's other names (asked of the
    base model in evaluation)."""
    verbaliser = Verbaliser.configured(
        qa_params["relation_templates"], relations, qa_params["mquake_templates_dir"]
    )
    return premise_probes(
        probes,
        entailed_questions,
        entailed_facts,
        edit_requests,
        verbaliser=verbaliser,
        relations=relations,
        aliases=aliases_by_label(entity_aliases, kg_triples, edit_requests),
        kg_triples=kg_triples,
        dataset_probes=raw_dataset_probes,
    )
