"""Frame-level glue: every edit's entailed facts, and their questions."""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pyoxigraph as ox

from kebench.kg.amie_export import amie_term, local_name
from kebench.kg.vocabulary import (
    Step,
    Vocabulary,
    edit_relations,
    vocabulary_of,
    warn_contradictions,
)
from kebench.qa.closure import (
    ClosureSettings,
    EditedWorld,
    consistent_facts,
)
from kebench.qa.consequences import (
    ConsequenceFinder,
    EditedFact,
    EntailedFact,
    KgIndex,
    entailed_facts,
)
from kebench.qa.deduction import (
    AxiomRule,
    Deducer,
    Deduction,
    DeductionSettings,
    EditTriples,
    Term,
    WorldStore,
    axiom_rule,
    path_text,
)
from kebench.qa.llm_questions import LlmQuestionWriter
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import (
    ENTAILED_FACTS,
    ENTAILED_QUESTIONS,
    FACT_STATUSES,
)

logger = logging.getLogger(__name__)


def target_local(uri: object, label: str) -> str:
    """A target as rules name it: its entity's local name, else its text as a literal."""
    return (
        local_name(uri) if isinstance(uri, str) else amie_term(label, is_literal=True)
    )


def _term(uri: object, label: str) -> Term:
    """A target as the KG states it: its entity, else its text as a literal."""
    return Term(uri) if isinstance(uri, str) else Term(label, literal=True)


def edit_triples(
    edit: Mapping[str, Any],
    kg: KgIndex,
    predicates: Mapping[str, set[str]],
    relations: Mapping[str, Mapping[str, Any]],
    pages: frozenset[str] = frozenset(),
) -> tuple[EditTriples | None, str | None]:
    """The edit as KG triples (``EditTriples``), or the reason it cannot be one
    (``pages``: the KG's disambiguation pages, which no edit's subject may be).

    A target that was not linked to an entity is matched as a literal (DBpedia often
    states heads of government as plain names). Among the factual KG predicates of
    the relation (``predicates``: local name -> predicate IRIs), those that state the
    old or the new value for the subject are used, else all of them.
    """
    if not isinstance(edit["subject_uri"], str):
        return None, "subject not linked to the KG"
    if edit["subject_uri"] in pages:
        return None, "subject is a disambiguation page"
    if not isinstance(edit["target_true"], str):
        # Both tiers compare the world before the edit, where (subject, relation)
        # has the old value, with the world after it.
        return None, "the edit adds a fact: no old value to replace"
    subject = local_name(edit["subject_uri"])
    if subject not in kg.entities:
        return None, "subject not in the KG"
    old = target_local(edit["target_true_uri"], edit["target_true"])
    new = target_local(edit["target_new_uri"], edit["target_new"])
    candidates = [
        r for r in edit_relations(edit["relation_id"], relations) if r in kg.relations()
    ]
    # no candidate leaves no predicate IRI below: "relation has no factual KG predicate"
    stated = [
        r for r in candidates if kg.objects(subject, r) & {old, new}
    ] or candidates
    iris = {
        iri
        for iri in relations.get(edit["relation_id"], {}).get("dbpedia", [])
        if local_name(iri) in stated and iri in predicates.get(local_name(iri), ())
    }
    if not iris:
        return None, "relation has no factual KG predicate"
    return EditTriples(
        subject=edit["subject_uri"],
        predicates=tuple(sorted(iris)),
        old=_term(edit["target_true_uri"], edit["target_true"]),
        new=_term(edit["target_new_uri"], edit["target_new"]),
    ), None


def _local_fact(quad_s: str, quad_p: str, obj: Term) -> tuple[str, str, str]:
    return local_name(quad_s), local_name(quad_p), amie_term(obj.value, obj.literal)


def edited_facts(triples: EditTriples, store: WorldStore) -> list[EditedFact]:
    """The edit in AMIE local names, for the rule closure: each stated predicate
    with the stored facts each world retracts (the replaced value's symmetric twin,
    inverse, sub- and equivalent properties), so no consequence rests on them."""
    retracted = []
    for use_new in (True, False):
        removed, _ = store.changes(triples, use_new)
        retracted.append(
            frozenset(
                _local_fact(
                    q.subject.value,
                    q.predicate.value,
                    Term(q.object.value, isinstance(q.object, ox.Literal)),
                )
                for q in removed
            )
        )
    old = amie_term(triples.old.value, triples.old.literal)
    new = amie_term(triples.new.value, triples.new.literal)
    return [
        EditedFact(
            local_name(triples.subject),
            local_name(predicate),
            old,
            new,
            retracted_new=retracted[0],
            retracted_old=retracted[1],
        )
        for predicate in dict.fromkeys(triples.predicates)
    ]


SEMANTICS = ("paper", "consistent")


@dataclass(frozen=True)
class DerivationContext:
    """What derivations read beside the edits, the rules and the KG.

    Attributes:
        vocabulary: the axioms; only its factual predicates carry consequences.
        aliases: entity IRI -> its other names (``subject_alias`` probes).
        types: entity IRI -> its classes (domain and range checks).
        walkable: the steps (predicate, backward) a deductive walk may take over
            unchanged KG triples: those a question can word.
        classed: predicate -> the classes its wording names (``phrase_by_class``).
    """

    vocabulary: Vocabulary
    aliases: Mapping[str, Sequence[str]] = field(default_factory=dict)
    types: Mapping[str, set[str]] = field(default_factory=dict)
    walkable: frozenset[Step] = frozenset()
    classed: Mapping[str, frozenset[str]] = field(default_factory=dict)


def derivation_context(  # noqa: PLR0913, PLR0917 - the context's sources
    axioms: pd.DataFrame,
    relations: Mapping[str, Mapping[str, Any]],
    entity_aliases: pd.DataFrame,
    entity_types: pd.DataFrame,
    kg_triples: pd.DataFrame,
    templates: Mapping[str, Any],
) -> DerivationContext:
    """The ``DerivationContext`` of a run.

    The vocabulary reads ``axioms`` (the shipped table's and the KG's own) and takes
    the edit relations' predicates (``relations``) as factual. A subject's other
    names are its KG aliases that name no other KG entity. A walk crosses an
    unchanged KG triple only where ``templates`` word the step: its relation forward,
    its converse (``^<local name>``) backward.
    """
    vocabulary = vocabulary_of(axioms, relations)
    names = EntityNames.of(kg_triples, pd.DataFrame(columns=_TARGET_COLUMNS))
    taken = set(names.labels.values())
    aliases: dict[str, list[str]] = defaultdict(list)
    ordered = entity_aliases.assign(
        rank=entity_aliases["via"].map({"redirect": 0, "same_as": 1, "label": 2})
    ).sort_values(["uri", "rank", "alias"])
    for uri, alias in zip(ordered["uri"], ordered["alias"], strict=True):
        if alias not in taken and alias != names.labels.get(uri):
            aliases[uri].append(alias)
    types: dict[str, set[str]] = defaultdict(set)
    for uri, kind in zip(entity_types["uri"], entity_types["type"], strict=True):
        types[uri].add(kind)
    classes = {local_name(c): c for c in vocabulary.super_classes}
    classed = {
        p: frozenset(
            classes[name]
            for name in templates[local_name(p)]["phrase_by_class"]
            if name in classes
        )
        for p in set(kg_triples["p"])
        if "phrase_by_class" in templates.get(local_name(p), {})
    }
    return DerivationContext(
        vocabulary,
        aliases=dict(aliases),
        types=dict(types),
        classed=classed,
        walkable=frozenset(
            (p, key.startswith("^"))
            for p in set(kg_triples["p"])
            for key in (local_name(p), f"^{local_name(p)}")
            if key in templates
        ),
    )


_TARGET_COLUMNS = ["target_true", "target_true_uri", "target_new", "target_new_uri"]


def disambiguation_pages(kg_triples: pd.DataFrame) -> frozenset[str]:
    """The KG's disambiguation pages: the subjects of ``wikiPageDisambiguates``
    (DBpedia states it of its disambiguation pages only). Such a page names several
    entities, none of them: a fact about it, or a question through it, means nothing.
    In the paper's MQuAKE subgraph `dbr:New_York` is one, and the `country` of New
    York's Air National Guard units points at it."""
    marked = kg_triples["p"].map(local_name) == "wikiPageDisambiguates"
    return frozenset(kg_triples.loc[marked, "s"])


def factual_triples(
    kg_triples: pd.DataFrame, vocabulary: Vocabulary, pages: frozenset[str]
) -> tuple[pd.DataFrame, dict[str, int], int]:
    """The triples of factual predicates between entities that are no
    disambiguation page (``pages``); the count of the others by predicate, and of
    those that name a disambiguation page (no consequence of either tier rests on
    them)."""
    keep = kg_triples["p"].map(vocabulary.is_factual).astype(bool)
    left_out = kg_triples.loc[~keep, "p"].value_counts()
    if len(left_out):
        logger.info(
            "%d KG triples of %d predicates state no fact (not in the vocabulary's "
            "allow-list) and carry no consequence; most: %s",
            int(left_out.sum()),
            len(left_out),
            ", ".join(f"{local_name(p)} ({n})" for p, n in left_out.head(8).items()),
        )
    on_page = kg_triples["s"].isin(pages) | (
        ~kg_triples["o_is_literal"].astype(bool) & kg_triples["o"].isin(pages)
    )
    if (keep & on_page).any():
        logger.info(
            "%d factual KG triples name one of %d disambiguation pages and carry no "
            "consequence",
            int((keep & on_page).sum()),
            len(pages),
        )
    return (
        kg_triples[keep & ~on_page].reset_index(drop=True),
        {str(p): int(n) for p, n in left_out.items()},
        int((keep & on_page).sum()),
    )


def derive_entailed_facts(  # noqa: PLR0913, PLR0915, PLR0917 - inputs and settings
    edit_requests: pd.DataFrame,
    rules: pd.DataFrame,
    kg_triples: pd.DataFrame,
    relations: Mapping[str, Mapping[str, Any]],
    context: DerivationContext,
    semantics: str = "consistent",
    closure: ClosureSettings = ClosureSettings(),
    deduction: DeductionSettings = DeductionSettings(),
) -> tuple[pd.DataFrame, dict[str, Any]]:
    """``entailed_facts`` of both tiers for every edit, and a report of what was
    derived, skipped and why.

    The deductive tier (``kebench.qa.deduction``) and the inductive one: the mined
    rules the axioms do not entail, under ``semantics`` ``paper`` (each rule applied
    once to KG + edit, every consequence ``entailed``) or ``consistent`` (the closure
    of kebench.qa.closure, with statuses). Only factual predicates' triples are read.
    """
    if semantics not in SEMANTICS:
        raise ValueError(
            f"qa_generation.consequences.semantics: {semantics!r} is not one of "
            f"{list(SEMANTICS)}"
        )
    vocabulary = context.vocabulary
    pages = disambiguation_pages(kg_triples)
    factual, left_out, on_pages = factual_triples(kg_triples, vocabulary, pages)
    kg = KgIndex(factual)
    predicates: dict[str, set[str]] = defaultdict(set)
    for iri, local in zip(factual["p"], factual["p_local"], strict=True):
        predicates[local].add(iri)
    tiers = split_rules(rules, vocabulary, predicates)
    inductive = rules[rules["rule_id"].isin(tiers.inductive)]
    finder = ConsequenceFinder(
        kg, inductive, max_per_rule=closure.max_groundings_per_rule
    )
    world = EditedWorld(
        kg,
        [
            (rid, [tuple(a) for a in body], tuple(head))
            for rid, body, head in zip(
                inductive["rule_id"], inductive["body"], inductive["head"], strict=True
            )
            # the finder counts and leaves out rules naming a relation the KG lacks
            if {a[1] for a in [*body, head]} <= kg.relations()
        ],
        closure,
    )
    deducer = Deducer(
        factual,
        vocabulary,
        walkable=context.walkable,
        classed=context.classed,
        types=context.types,
        aliases=context.aliases,
        settings=deduction,
    )
    rules_by_id = {
        rid: ([tuple(a) for a in body], tuple(head))
        for rid, body, head in zip(
            inductive["rule_id"], inductive["body"], inductive["head"], strict=True
        )
    }
    confidence = (
        dict(zip(rules["rule_id"], rules["pca_confidence"], strict=True))
        if "pca_confidence" in rules
        else {}
    )
    names = EntityNames.of(kg_triples, edit_requests)
    stored = StoredPredicates.of(factual)
    rows, skipped_edits, several = [], {}, {}
    for edit in edit_requests.to_dict("records"):
        triples, reason = edit_triples(edit, kg, predicates, relations, pages)
        if reason:
            skipped_edits[edit["case_id"]] = reason
            continue
        facts = edited_facts(triples, deducer.store)
        if semantics == "paper":
            inductive_facts = [
                f
                for edited in facts
                for f in entailed_facts(finder, edited, rules_by_id)
            ]
        else:
            inductive_facts = consistent_facts(world, facts, finder.skipped)
        deduced = deducer.deduce(edit["case_id"], triples, tiers.axiom)
        if (values := deducer.edited_values(triples)) > 1:
            several[edit["case_id"]] = values
        numbered = enumerate(
            [
                *(deductive_row(d, triples, names, confidence) for d in deduced),
                *(
                    inductive_row(f, names, kg, stored, confidence)
                    for f in inductive_facts
                ),
            ]
        )
        rows += [
            {"fact_id": f"{edit['case_id']}/{n}", "case_id": edit["case_id"]}
            | row
            | {"semantics": semantics}
            for n, row in numbered
        ]
    frame = ENTAILED_FACTS.validate(
        pd.DataFrame(rows, columns=list(ENTAILED_FACTS.columns))
    )
    report = consequence_report(frame, edit_requests, rules, skipped_edits, several)
    report |= {
        "semantics": semantics,
        "rules_available": len(rules),
        "rules": {
            "axiom_entailed": sorted(r.rule_id for r in tiers.axiom),
            "inductive": len(tiers.inductive),
            "naming_a_non_factual_predicate": len(tiers.non_factual),
        },
        "triples_without_fact_by_predicate": left_out,
        "factual_triples_naming_a_disambiguation_page": on_pages,
        "edits_without_kg_fact": dict(Counter(skipped_edits.values())),
        "consequences_skipped": dict(finder.skipped) | dict(deducer.skipped),
        "closure_notes": dict(world.notes),
        "functional_axioms_contradicted": warn_contradictions(vocabulary, factual),
    }
    return frame, report


@dataclass(frozen=True)
class RuleTiers:
    """The rules of ``rules_for_qa`` by tier."""

    axiom: list[AxiomRule]
    inductive: list[str]
    non_factual: list[str]


def split_rules(
    rules: pd.DataFrame, vocabulary: Vocabulary, predicates: Mapping[str, set[str]]
) -> RuleTiers:
    """Rules the axioms entail (deductive, kind ``axiom``), the others (inductive),
    and those naming a relation with no factual predicate (neither: left out)."""
    axiom, inductive, non_factual = [], [], []
    for rid, body, head in zip(
        rules["rule_id"], rules["body"], rules["head"], strict=True
    ):
        atoms = [tuple(a) for a in body]
        if any(a[1] not in predicates for a in [*atoms, tuple(head)]):
            non_factual.append(rid)
        elif found := axiom_rule(rid, atoms, tuple(head), vocabulary, predicates):
            axiom.append(found)
        else:
            inductive.append(rid)
    if non_factual:
        logger.info(
            "%d rules for QA name a predicate that states no fact: left out",
            len(non_factual),
        )
    return RuleTiers(axiom, inductive, non_factual)


@dataclass(frozen=True)
class EntityNames:
    """Labels of IRIs, and IRIs of AMIE local names, for the rows."""

    labels: Mapping[str, str]
    by_local: Mapping[str, str]

    @classmethod
    def of(cls, kg_triples: pd.DataFrame, edit_requests: pd.DataFrame) -> EntityNames:
        entities = kg_triples[~kg_triples["o_is_literal"]]
        labels = dict(zip(kg_triples["s"], kg_triples["s_label"], strict=True))
        labels |= dict(zip(entities["o"], entities["o_label"], strict=True))
        for side in ("target_true", "target_new"):
            known = edit_requests.dropna(subset=[f"{side}_uri"])
            for uri, label in zip(known[f"{side}_uri"], known[side], strict=True):
                labels.setdefault(uri, label)
        return cls(labels, {local_name(iri): iri for iri in labels})

    def label(self, term: Term) -> str:
        return (
            term.value
            if term.literal
            else self.labels.get(term.value, local_name(term.value))
        )


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def deductive_row(
    item: Deduction,
    edit: EditTriples,
    names: EntityNames,
    confidence: Mapping[str, float],
) -> dict[str, Any]:
    """An ``entailed_facts`` row of the deductive tier."""
    walk = item.walk
    start = Term(walk.start)
    label = names.label
    nodes = [
        Term(t.s) if backward else t.o
        for t, (_, backward) in zip(walk.triples, walk.steps, strict=True)
    ]
    if walk.asked == walk.steps:
        reached = [label(n) for n in nodes]
        classes = [local_name(c) if c else None for c in item.node_classes]
    else:
        reached = [""] * (len(walk.asked) - 1) + [label(item.answer_new)]
        classes = [None] * len(walk.asked)
    last = walk.triples[-1]
    new = {(edit.subject, p, edit.new) for p in edit.predicates}
    return {
        "tier": "deductive",
        "kind": walk.kind,
        "rule_id": walk.rule_id,
        "confidence": confidence.get(walk.rule_id) if walk.rule_id else None,
        "bindings": "{}",
        "subject_uri": walk.start,
        "subject_label": walk.start_label or label(start),
        "relation": path_text(walk.steps),
        "fact_subject_uri": last.s,
        "fact_relation": local_name(last.p),
        "answer_old": label(item.answer_old) if item.answer_old else None,
        "answer_old_uri": item.answer_old.value if item.answer_old else None,
        "answer_new": label(item.answer_new),
        "answer_new_uri": item.answer_new.value,
        "chain": _json(
            [
                [local_name(p), "in" if backward else "out", name, cls]
                for (p, backward), name, cls in zip(
                    walk.asked, reached, classes, strict=True
                )
            ]
        ),
        "path": _json(
            [[label(Term(t.s)), local_name(t.p), label(t.o)] for t in walk.triples]
        ),
        "path_uri": _json([[t.s, t.p, t.o.value] for t in walk.triples]),
        "premises": _json(
            [
                [label(Term(t.s)), local_name(t.p), label(t.o)]
                for t in walk.triples
                if (t.s, t.p, t.o) not in new
            ]
        ),
        "hops": len(walk.steps),
        "status": item.status,
        "reason": item.reason,
        "depth": 1,
    }


@dataclass(frozen=True)
class StoredPredicates:
    """The predicate IRI of a fact named in local names: the one the KG stores it
    under, else the first of its local name (a derived fact)."""

    by_local: Mapping[str, list[str]]
    facts: frozenset[tuple[str, str, str]]

    @classmethod
    def of(cls, triples: pd.DataFrame) -> StoredPredicates:
        by_local: dict[str, set[str]] = defaultdict(set)
        for iri, local in zip(triples["p"], triples["p_local"], strict=True):
            by_local[local].add(iri)
        return cls(
            {k: sorted(v) for k, v in by_local.items()},
            frozenset(zip(triples["s"], triples["p"], triples["o"], strict=True)),
        )

    def iri(self, subject: str, local: str, obj: str) -> str:
        candidates = self.by_local.get(local, [local])
        return next(
            (p for p in candidates if (subject, p, obj) in self.facts), candidates[0]
        )


def inductive_row(  # noqa: PLR0913, PLR0917 - a row's sources
    fact: EntailedFact,
    names: EntityNames,
    kg: KgIndex,
    stored: StoredPredicates,
    confidence: Mapping[str, float],
) -> dict[str, Any]:
    """An ``entailed_facts`` row of the inductive tier (a mined rule's consequence)."""

    def entity(local: str) -> tuple[str, str]:
        """(IRI, label) of a local name: the KG's entity, else the edit's target."""
        if local in kg.entities:
            found = kg.entities[local]
            return found.iri, found.label
        iri = names.by_local.get(local, local)
        return iri, names.labels.get(iri, local.replace("_", " "))

    def labelled(atoms: Sequence[tuple[str, str, str]]) -> str:
        return _json([[entity(s)[1], r, entity(o)[1]] for s, r, o in atoms])

    def as_iris(atoms: Sequence[tuple[str, str, str]]) -> str:
        triples = []
        for s, r, o in atoms:
            s_iri, o_iri = entity(s)[0], entity(o)[0]
            # a literal object is stored as its text, which its local name spells
            # with "_" for whitespace
            obj = o_iri if o_iri != o else entity(o)[1]
            triples.append([s_iri, stored.iri(s_iri, r, obj), obj])
        return _json(triples)

    subject_uri, subject_label = entity(fact.subject)
    return {
        "tier": "inductive",
        "kind": "rule",
        "rule_id": fact.rule_id,
        "confidence": confidence.get(fact.rule_id),
        "bindings": json.dumps(fact.bindings, sort_keys=True),
        "subject_uri": subject_uri,
        "subject_label": subject_label,
        "relation": fact.relation,
        "fact_subject_uri": subject_uri,
        "fact_relation": fact.relation,
        "answer_old": entity(fact.answer_old)[1],
        "answer_old_uri": entity(fact.answer_old)[0],
        "answer_new": entity(fact.answer_new)[1],
        "answer_new_uri": entity(fact.answer_new)[0],
        "chain": _json([[rel, d, entity(e)[1]] for rel, d, e in fact.chain]),
        "path": labelled(fact.path),
        "path_uri": as_iris(fact.path),
        "premises": labelled(fact.premises),
        "status": fact.status,
        "reason": fact.reason,
        "depth": fact.depth,
        # A backward step names its entity, so only forward steps add a hop.
        "hops": 1 + sum(direction == "out" for _, direction, _ in fact.chain),
    }


def headline_deductive(frame: pd.DataFrame) -> pd.Series:
    """The rows the headline's deductive Consistency can count: probed
    compositions (each walks the edit and at least one unchanged KG triple)."""
    return (
        (frame["tier"] == "deductive")
        & (frame["kind"] == "composition")
        & (frame["status"] == "entailed")
    )


def consequence_report(
    frame: pd.DataFrame,
    edit_requests: pd.DataFrame,
    rules: pd.DataFrame,
    skipped_edits: Mapping[str, str],
    several: Mapping[str, int],
) -> dict[str, Any]:
    """Counts per tier, kind and status, edits with probed consequences of each
    tier, and why the edits without a deductive composition have none."""
    probed = frame[frame["status"] == "entailed"]
    cases = edit_requests["case_id"]

    def share(part: pd.DataFrame) -> float:
        return round(100.0 * float(cases.isin(part["case_id"]).mean()), 2)

    tiers = {}
    for tier, rows in frame.groupby("tier"):
        kept = rows[rows["status"] == "entailed"]
        tiers[tier] = {
            "consequences": len(rows),
            "probed": len(kept),
            "edits_with_probed_pct": share(kept),
            "by_kind": {
                kind: {
                    status: int((part["status"] == status).sum())
                    for status in FACT_STATUSES
                    if (part["status"] == status).any()
                }
                for kind, part in rows.groupby("kind")
            },
            "without_old_answer": int(kept["answer_old"].isna().sum()),
            "not_probed_by_reason": dict(
                Counter(reason_kind(reason) for reason in rows["reason"].dropna())
            ),
            "top_rules_entailed": top_rules(kept.dropna(subset=["rule_id"]), rules),
        }
    per_edit = probed.groupby("case_id").size().reindex(cases, fill_value=0)
    return {
        "edits": len(edit_requests),
        "consequences": len(frame),
        "tiers": tiers,
        "edits_with_deductive_composition_pct": share(frame[headline_deductive(frame)]),
        "edits_without_deductive_composition": without_composition_reasons(
            frame, cases, skipped_edits, several
        ),
        "consequences_per_edit": {
            "mean": round(float(per_edit.mean()), 3),
            "max": int(per_edit.max()) if len(per_edit) else 0,
        },
    }


def without_composition_reasons(
    frame: pd.DataFrame,
    cases: pd.Series,
    skipped_edits: Mapping[str, str],
    several: Mapping[str, int],
) -> dict[str, int]:
    """Why each edit without a probed deductive composition has none, counted: it is
    no KG fact, the subject keeps several values of the edited relation (``several``:
    case -> count), its compositions' statuses, or no unchanged KG triple joins it."""
    compositions = frame[
        (frame["tier"] == "deductive") & (frame["kind"] == "composition")
    ]
    reasons: Counter = Counter()
    for case in cases:
        own = compositions[compositions["case_id"] == case]
        if (own["status"] == "entailed").any():
            continue
        if case in skipped_edits:
            reasons[f"the edit is no KG fact: {skipped_edits[case]}"] += 1
        elif case in several:
            reasons[
                "no single answer: the subject keeps several values of the edited "
                "relation in the edited world (one of its predicates states another "
                "relation too, or the KG gives it several)"
            ] += 1
        elif own.empty:
            reasons[
                "no composition: no unchanged KG fact joins the edit through a step "
                "a question words and that names one entity, or none changes its "
                "answer (see consequences_skipped)"
            ] += 1
        else:
            kinds = ", ".join(sorted(set(own["status"])))
            reasons[f"every composition is {kinds}"] += 1
    return dict(reasons)


def top_rules(facts: pd.DataFrame, rules: pd.DataFrame, n: int = 10) -> list[dict]:
    """The ``n`` rules with most of ``facts``: id, AMIE's text of the rule, count."""
    text = (
        dict(
            zip(
                rules["rule_id"], rules["amie_line"].str.split("\t").str[0], strict=True
            )
        )
        if "amie_line" in rules
        else {}
    )
    return [
        {"rule_id": rule, "rule": text.get(rule, ""), "count": int(count)}
        for rule, count in facts["rule_id"].value_counts().head(n).items()
    ]


def reason_kind(reason: str) -> str:
    """A reason without its particulars: the text before its colon."""
    return reason.split(":", maxsplit=1)[0]


def fact_question(
    fact: Mapping[str, Any], edit: Mapping[str, Any], verbaliser: Verbaliser
) -> tuple[str, str, str]:
    """``(question, cloze, wording)`` of one consequence: an inductive one asked
    from the edited subject through its chain, a deductive one along its property
    path from its own subject. A ``subject_alias`` one asks the edited relation, by
    its label (``edit_requests.relation_label``), of the other name: "The chief
    executive officer of Nokia Corporation is". Neither the dataset's cloze (which
    may claim a class its target lacks: MQuAKE-T's "located in the city of" a
    street) nor the KG predicate's wording (P169's ``keyPerson``, "the key person",
    has several values) would ask exactly the edited fact."""
    chain = [tuple(step) for step in json.loads(fact["chain"])]
    if fact["tier"] == "inductive":
        return verbaliser.question(edit["subject"], chain, fact["relation"])
    if fact["kind"] == "subject_alias":
        label, alias = edit["relation_label"], fact["subject_label"]
        asked, _, _ = verbaliser.path_question(alias, chain)
        pronoun = "Who" if asked.startswith("Who ") else "What"
        return (
            f"{pronoun} is the {label} of {alias}?",
            f"The {label} of {alias} is",
            "relation label",
        )
    return verbaliser.path_question(fact["subject_label"], chain)


def derivation_id(fact: Mapping[str, Any]) -> str:
    """What derived a consequence: its mined rule, else ``<kind>:<property path>``."""
    rule = fact["rule_id"]
    return rule if isinstance(rule, str) else f"{fact['kind']}:{fact['relation']}"


def template_questions(
    entailed: pd.DataFrame,
    edit_requests: pd.DataFrame,
    verbaliser: Verbaliser,
    max_per_edit: int,
) -> pd.DataFrame:
    """One templated question (and cloze) per ``entailed`` fact (facts of another
    status are not probed), at most ``max_per_edit`` per edit and tier, no
    duplicates."""
    edits = edit_requests.set_index("case_id")
    rows = []
    for fact in entailed[entailed["status"] == "entailed"].to_dict("records"):
        edit = edits.loc[fact["case_id"]]
        question, cloze, wording = fact_question(fact, edit, verbaliser)
        rows.append(
            {
                "fact_id": fact["fact_id"],
                "case_id": fact["case_id"],
                "tier": fact["tier"],
                "kind": fact["kind"],
                "rule_id": derivation_id(fact),
                "question": question,
                "cloze": cloze,
                "answer_old": fact["answer_old"],
                "answer_new": fact["answer_new"],
                "hops": fact["hops"],
                "generator": "template",
                "wording": wording,
            }
        )
    return cap_questions(
        pd.DataFrame(rows, columns=list(ENTAILED_QUESTIONS.columns)), max_per_edit
    )


def cap_questions(questions: pd.DataFrame, max_per_edit: int) -> pd.DataFrame:
    """Drop duplicate questions of an edit and keep at most ``max_per_edit`` per edit
    and tier."""
    questions = questions.drop_duplicates(["case_id", "question"])
    questions = questions.groupby(["case_id", "tier"], sort=False).head(max_per_edit)
    return ENTAILED_QUESTIONS.validate(questions.reset_index(drop=True))


def llm_questions(
    templated: pd.DataFrame,
    entailed: pd.DataFrame,
    rules: pd.DataFrame,
    writer: LlmQuestionWriter,
) -> tuple[pd.DataFrame, list[dict[str, str]]]:
    """Replace each templated question by the LLM's, or drop it with the reason.

    The LLM sees the consequence's rule and its supporting facts (edit included) and
    must answer with the derived entity; the templated cloze is kept for scoring.
    """
    rule_text = {
        rid: line.split("\t")[0]
        for rid, line in zip(rules["rule_id"], rules["amie_line"], strict=True)
    }
    path_of = entailed.set_index("fact_id")["path"]
    kept, rejected = [], []
    for row in templated.to_dict("records"):
        question, reason = writer.write(
            # a deductive consequence's derivation is its kind and property path
            [rule_text.get(row["rule_id"], row["rule_id"])],
            json.loads(path_of[row["fact_id"]]),
            row["answer_new"],
        )
        if question is None:
            rejected.append({"fact_id": row["fact_id"], "reason": reason})
            continue
        kept.append({**row, "question": question, "generator": "llm", "wording": "llm"})
    logger.info("LLM questions: %d kept, %d rejected", len(kept), len(rejected))
    frame = pd.DataFrame(kept, columns=list(ENTAILED_QUESTIONS.columns))
    return ENTAILED_QUESTIONS.validate(frame), rejected
