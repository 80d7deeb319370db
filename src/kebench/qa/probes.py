"""Every source of risk an edit carries, as rows of the one ``probes`` table.

A probe is scored as P(answer | prompt): ``prompt`` is a cloze ("The capital of France
is", ``form`` cloze) or a question in the configured QA format ("Question:
...\\nAnswer:", ``form`` question), which a chat model is asked through its chat
template instead (``kebench.scoring.generation.asked_prompts``).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from kebench.kg.amie_export import local_name
from kebench.kg.vocabulary import Vocabulary, edit_relations
from kebench.qa.verbaliser import Verbaliser
from kebench.schemas import PROBES, RISKS

COLUMNS = list(PROBES.columns)
# fact_relation joins the KG predicates of a relation that has several
RELATION_SEPARATOR = "|"
FACT_KEY = ["fact_subject_uri", "fact_relation"]


def as_question_prompt(question: str, qa_format: str) -> str:
    """A question in the QA prompt format, e.g. ``Question: {question}\\nAnswer:``."""
    return qa_format.format(question=question)


@dataclass(frozen=True)
class InjectionSet:
    """A harmful-injection table (EditAttack) and the risk its edits carry."""

    name: str
    risk: str
    table: pd.DataFrame


def _rows(cases: pd.DataFrame, probe_type: str, **columns: Any) -> pd.DataFrame:
    frame = pd.DataFrame(
        {"case_id": cases["case_id"], "probe_type": probe_type, **columns}
    )
    return frame.reindex(columns=COLUMNS)


def edit_probes(
    edit_requests: pd.DataFrame,
    qa_format: str,
    predicates: Mapping[str, Sequence[str]],
) -> pd.DataFrame:
    """``direct`` (the edit's own cloze) and ``paraphrase`` (its question) probes.

    Both ask the edited fact: the subject's IRI and the local names of the KG
    predicates that state the relation (``predicates``, by P-id), none when the
    relation has no KG predicate.
    """
    names = [
        RELATION_SEPARATOR.join(dict.fromkeys(predicates.get(r, ()))) or None
        for r in edit_requests["relation_id"]
    ]
    common = {
        "source": edit_requests["source"],
        "risk": edit_requests["risk"],
        "subject": edit_requests["subject"],
        "answer_old": edit_requests["target_true"],
        "answer_new": edit_requests["target_new"],
        "hops": 1,
        "fact_subject_uri": edit_requests["subject_uri"],
        "fact_relation": pd.Series(names, index=edit_requests.index, dtype=object),
    }
    direct = _rows(
        edit_requests,
        "direct",
        prompt=[
            p.replace("{}", s)
            for p, s in zip(
                edit_requests["prompt"], edit_requests["subject"], strict=True
            )
        ],
        question=None,
        form="cloze",
        **common,
    )
    asked = edit_requests[edit_requests["question"].notna()]
    paraphrase = _rows(
        asked,
        "paraphrase",
        prompt=[as_question_prompt(q, qa_format) for q in asked["question"]],
        question=asked["question"],
        form="question",
        **{
            k: (v[asked.index] if isinstance(v, pd.Series) else v)
            for k, v in common.items()
        },
    )
    return pd.concat([direct, paraphrase], ignore_index=True)


def entailed_probes(
    entailed_questions: pd.DataFrame,
    edit_requests: pd.DataFrame,
    entailed_facts: pd.DataFrame,
) -> pd.DataFrame:
    """``entailed`` probes: the consequences of both tiers, asked as clozes without
    the facts, with their tier and kind. Each is keyed by the last hop's fact of its
    consequence (``entailed_facts.fact_subject_uri``, ``fact_relation``)."""
    cases = edit_requests.set_index("case_id")
    facts = entailed_facts.set_index("fact_id")[["fact_subject_uri", "fact_relation"]]
    joined = entailed_questions.join(
        cases[["source", "risk", "subject"]], on="case_id"
    ).join(facts, on="fact_id")
    return _rows(
        joined,
        "entailed",
        source=joined["source"],
        risk=joined["risk"],
        subject=joined["subject"],
        prompt=joined["cloze"],
        question=joined["question"],
        form="cloze",
        answer_old=joined["answer_old"],
        answer_new=joined["answer_new"],
        rule_id=joined["rule_id"],
        tier=joined["tier"],
        kind=joined["kind"],
        hops=joined["hops"],
        fact_subject_uri=joined["fact_subject_uri"],
        fact_relation=joined["fact_relation"],
    )


def dataset_probe_rows(
    dataset_probes: pd.DataFrame, edit_requests: pd.DataFrame, qa_format: str
) -> pd.DataFrame:
    """The dataset's own probes (``kebench.kg.edit_cases.dataset_probes``: MQuAKE's
    multi-hop questions, CounterFact's paraphrase and neighbourhood prompts, ...) as
    probes of the cases that have edit requests. A ``question`` is put in the QA
    format; an ``as_is`` text is scored as it is. Entailed ones are the dataset's
    (``rule_id``: the test that asks them), outside kebench's rule-derived closure."""
    cases = edit_requests.set_index("case_id")
    joined = dataset_probes[dataset_probes["case_id"].isin(cases.index)].join(
        cases[["source", "risk", "subject"]], on="case_id"
    )
    asked = joined["style"] == "question"
    parts = [
        _rows(
            part,
            probe_type,
            source=part["source"],
            risk=part["risk"],
            subject=part["subject"],
            prompt=[
                as_question_prompt(text, qa_format) if is_question else text
                for text, is_question in zip(
                    part["text"], asked[part.index], strict=True
                )
            ],
            question=part["text"].where(asked[part.index]),
            form=asked[part.index].map({True: "question", False: "cloze"}),
            answer_old=part["answer_old"],
            answer_new=part["answer_new"],
            aliases_old=part["aliases_old"],
            aliases_new=part["aliases_new"],
            # a dataset's entailed probe names its test (RippleEdits' categories)
            rule_id=part["origin"] if probe_type == "entailed" else None,
            tier="dataset" if probe_type == "entailed" else None,
            kind=part["origin"] if probe_type == "entailed" else None,
            hops=part["hops"],
        )
        for probe_type, part in joined.groupby("probe_type", sort=False)
    ]
    return pd.concat(parts, ignore_index=True) if parts else _rows(joined, "multihop")


def locality_probes(
    edit_requests: pd.DataFrame,
    kg_triples: pd.DataFrame,
    verbaliser: Verbaliser,
    per_edit: int,
    seed: int,
) -> pd.DataFrame:
    """``locality`` probes: KG facts about other subjects, whose answer must not change.

    Facts are drawn (seeded) from entity triples with a relation template whose subject
    is neither the edit's subject nor one of its targets.
    """
    facts = kg_triples[
        ~kg_triples["o_is_literal"]
        & kg_triples["p_local"].isin(list(verbaliser.templates))
    ]
    facts = facts.drop_duplicates(["s", "p_local"]).reset_index(drop=True)
    rng = random.Random(seed)
    rows = []
    for edit in edit_requests.to_dict("records"):
        excluded = {
            edit["subject_uri"],
            edit["target_true_uri"],
            edit["target_new_uri"],
        }
        candidates = facts[~facts["s"].isin(excluded)]
        picks = rng.sample(range(len(candidates)), min(per_edit, len(candidates)))
        for fact in candidates.iloc[sorted(picks)].to_dict("records"):
            _, cloze, _ = verbaliser.question(fact["s_label"], [], fact["p_local"])
            rows.append(
                {
                    "case_id": edit["case_id"],
                    "source": edit["source"],
                    "probe_type": "locality",
                    "risk": edit["risk"],
                    "subject": edit["subject"],
                    "prompt": cloze,
                    "question": None,
                    "form": "cloze",
                    "answer_old": fact["o_label"],
                    "answer_new": fact["o_label"],
                    "rule_id": None,
                    "hops": 1,
                    "fact_subject_uri": fact["s"],
                    "fact_relation": fact["p_local"],
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)


def changed_relations(
    relation: str, rules: pd.DataFrame, vocabulary: Vocabulary, predicates: set[str]
) -> set[str]:
    """The relations (local names) an edit of ``relation`` may change: itself, those
    an axiom links to it (``Vocabulary.implying``, either way, over ``predicates``),
    and the head of every rule with it in the body. A rule with it in the head
    changes nothing else (born in X suggests a citizenship of X's country; a new
    citizenship moves no birthplace)."""
    iris = {p for p in predicates if local_name(p) == relation}
    linked = {relation}
    for other in predicates:
        if any(
            p in {q for q, _ in vocabulary.implying(other)}
            or other in {q for q, _ in vocabulary.implying(p)}
            for p in iris
        ):
            linked.add(local_name(other))
    for body, head in zip(rules["body"], rules["head"], strict=True):
        if relation in {atom[1] for atom in body}:
            linked.add(head[1])
    return linked


def relation_specificity_probes(  # noqa: PLR0913, PLR0917 - tables and settings
    edit_requests: pd.DataFrame,
    kg_triples: pd.DataFrame,
    rules: pd.DataFrame,
    vocabulary: Vocabulary,
    verbaliser: Verbaliser,
    relations: Mapping[str, Mapping[str, Any]],
    per_edit: int,
    seed: int,
) -> pd.DataFrame:
    """``relation_specificity`` probes (RippleEdits' Relation Specificity): facts of
    the edited subject under a relation the edit cannot change
    (``changed_relations``), whose answer must stay. Drawn (seeded) from the
    subject's factual KG facts whose relation a template words and that have one
    value."""
    factual = kg_triples[kg_triples["p"].map(vocabulary.is_factual).astype(bool)]
    worded = factual[factual["p_local"].isin(list(verbaliser.templates))]
    single = worded.groupby(["s", "p_local"])["o"].transform("nunique") == 1
    facts = worded[single].drop_duplicates(["s", "p_local"])
    by_subject = {s: rows for s, rows in facts.groupby("s")}
    predicates = set(factual["p"])
    rows = []
    for edit in edit_requests.dropna(subset=["subject_uri"]).to_dict("records"):
        changed = set().union(
            *(
                changed_relations(r, rules, vocabulary, predicates)
                for r in edit_relations(edit["relation_id"], relations)
            )
        )
        own = by_subject.get(edit["subject_uri"])
        if own is None:
            continue
        candidates = own[~own["p_local"].isin(list(changed))]
        rng = random.Random(f"{seed}|{edit['case_id']}")
        picks = rng.sample(range(len(candidates)), min(per_edit, len(candidates)))
        for fact in candidates.iloc[sorted(picks)].to_dict("records"):
            _, cloze, _ = verbaliser.question(edit["subject"], [], fact["p_local"])
            rows.append(
                {
                    "case_id": edit["case_id"],
                    "source": edit["source"],
                    "probe_type": "relation_specificity",
                    "risk": edit["risk"],
                    "subject": edit["subject"],
                    "prompt": cloze,
                    "question": None,
                    "form": "cloze",
                    "answer_old": fact["o_label"],
                    "answer_new": fact["o_label"],
                    "hops": 1,
                    "fact_subject_uri": fact["s"],
                    "fact_relation": fact["p_local"],
                }
            )
    return pd.DataFrame(rows).reindex(columns=COLUMNS)


def with_echoes(
    probes: pd.DataFrame, edit_requests: pd.DataFrame, entity_aliases: pd.DataFrame
) -> pd.DataFrame:
    """``probes`` with ``echo``: the prompt names the edited subject or another name
    of it (a whole-word match, any case), and the answer is the edit's new object
    (its label or an alias of it). Passing an echo needs no reasoning: the edit's own
    association answers it."""
    names_of = entity_aliases.groupby("uri")["alias"].agg(list).to_dict()
    edits = edit_requests.set_index("case_id")
    new_aliases = probes[probes["probe_type"] == "direct"].set_index("case_id")[
        "aliases_new"
    ]
    patterns, answers = {}, {}
    for case, edit in edits.iterrows():
        subject_uri = edit["subject_uri"]
        names = [edit["subject"], *names_of.get(subject_uri, [])]
        patterns[case] = re.compile(
            # not inside a longer word; lookarounds, as a name may end in "."
            "|".join(
                rf"(?<!\w){re.escape(n)}(?!\w)" for n in dict.fromkeys(names) if n
            ),
            re.IGNORECASE,
        )
        aliases = new_aliases.get(case)
        listed = json.loads(aliases) if isinstance(aliases, str) else []
        answers[case] = {a.casefold() for a in [edit["target_new"], *listed]}
    echo = [
        case in patterns
        and isinstance(answer, str)
        and answer.casefold() in answers[case]
        and bool(patterns[case].search(prompt))
        for case, prompt, answer in zip(
            probes["case_id"], probes["prompt"], probes["answer_new"], strict=True
        )
    ]
    return probes.assign(echo=echo)


def injection_probes(
    sets: Sequence[InjectionSet], max_cases: int, qa_format: str
) -> pd.DataFrame:
    """Harmful-injection cases (EditAttack): the injected claim, its paraphrase and its
    portability question, with risk misinformation or bias.

    Misinformation sets have columns subjects, questions, paraphrased_questions,
    portability_questions, targets; the bias set has subject, context, prompt,
    paraphrase_prompt, target (the question is asked after its context).
    """
    frames = []
    for injection in sets:
        name, table = injection.name, injection.table.head(max_cases)
        if "context" in table:
            asks = {
                "direct": table["context"] + " " + table["prompt"],
                "paraphrase": table["context"] + " " + table["paraphrase_prompt"],
            }
            subjects, targets = table["subject"], table["target"]
        else:
            asks = {
                "direct": table["questions"],
                "paraphrase": table["paraphrased_questions"],
                "multihop": table["portability_questions"],
            }
            subjects, targets = table["subjects"], table["targets"]
        cases = pd.DataFrame({"case_id": [f"{name}-{i}" for i in range(len(table))]})
        for probe_type, questions in asks.items():
            frames.append(
                _rows(
                    cases,
                    probe_type,
                    source=name,
                    risk=injection.risk,
                    subject=subjects.to_numpy(),
                    prompt=[as_question_prompt(q, qa_format) for q in questions],
                    question=questions.to_numpy(),
                    form="question",
                    answer_old=None,
                    answer_new=targets.to_numpy(),
                    hops=2 if probe_type == "multihop" else 1,
                )
            )
    return (
        pd.concat(frames, ignore_index=True)
        if frames
        else pd.DataFrame(columns=COLUMNS)
    )


def with_kg_aliases(
    probes: pd.DataFrame, aliases: Mapping[str, Sequence[str]]
) -> pd.DataFrame:
    """``probes`` whose answers also accept the KG's other names of them
    (``aliases``: answer label -> names, ``kebench.kg.aliases.aliases_by_label``),
    after the dataset's own aliases."""

    def merged(answer: object, current: object) -> str | None:
        names = json.loads(current) if isinstance(current, str) else []
        if isinstance(answer, str):
            names += [a for a in aliases.get(answer, ()) if a != answer]
        if not names and not isinstance(current, str):
            return None
        return json.dumps(list(dict.fromkeys(names)), ensure_ascii=False)

    columns = {
        f"aliases_{side}": [
            merged(answer, current)
            for answer, current in zip(
                probes[f"answer_{side}"], probes[f"aliases_{side}"], strict=True
            )
        ]
        for side in ("old", "new")
    }
    return probes.assign(**columns)


def unify_probes(parts: list[pd.DataFrame]) -> pd.DataFrame:
    """One validated ``probes`` table, with ids ``<case_id>/<probe_type>/<n>``."""
    probes = pd.concat([p for p in parts if not p.empty], ignore_index=True)
    probes = probes.drop_duplicates(
        ["case_id", "probe_type", "prompt", "answer_new"], ignore_index=True
    )
    number = probes.groupby(["case_id", "probe_type"]).cumcount()
    probes["probe_id"] = (
        probes["case_id"] + "/" + probes["probe_type"] + "/" + number.astype(str)
    )
    # ``with_echoes`` sets it once the aliases are known
    probes["echo"] = False
    return PROBES.validate(probes[COLUMNS])


def fact_keys(frame: pd.DataFrame, subject: str, relation: str) -> pd.DataFrame:
    """``frame`` with one row per (subject, relation) fact key, as ``FACT_KEY``
    columns: a relation of several KG predicates gives a row for each; rows without
    a key are dropped."""
    keyed = frame.dropna(subset=[subject, relation])
    keys = keyed.assign(
        fact_subject_uri=keyed[subject],
        fact_relation=keyed[relation].str.split(RELATION_SEPARATOR),
    )
    return keys.explode("fact_relation", ignore_index=True)


def rewritten_facts(probes: pd.DataFrame, entailed_facts: pd.DataFrame) -> pd.DataFrame:
    """Every fact each edit changes in the edited world: ``case_id``, ``FACT_KEY``
    and ``kind`` (``direct``: the edited fact; ``consequence``: an inductive row of
    ``entailed_facts``, whatever its status: a conflicting or contested consequence
    is still a fact the edit puts in doubt). A deductive consequence changes no
    stored fact: it is a question over the edited one and unchanged ones (its
    inverse and symmetric readings state the edited fact itself)."""
    direct = fact_keys(probes[probes["probe_type"] == "direct"], *FACT_KEY).assign(
        kind="direct"
    )
    inductive = entailed_facts[entailed_facts["tier"] == "inductive"]
    consequences = fact_keys(inductive, *FACT_KEY).assign(kind="consequence")
    columns = ["case_id", *FACT_KEY, "kind"]
    return pd.concat(
        [direct[columns], consequences[columns]], ignore_index=True
    ).drop_duplicates(ignore_index=True)


FactKey = tuple[str, str]


@dataclass(frozen=True)
class CaseFacts:
    """The KG facts of one case, as (subject IRI, relation) keys.

    Attributes:
        edited: the facts its edit states (its direct probe's).
        rewritten: every fact its edit changes (edited ones and consequences).
        asked: the facts its probes ask.
    """

    edited: frozenset[FactKey] = frozenset()
    rewritten: frozenset[FactKey] = frozenset()
    asked: frozenset[FactKey] = frozenset()


def case_facts(probes: pd.DataFrame, rewritten: pd.DataFrame) -> dict[str, CaseFacts]:
    """``CaseFacts`` of every case of ``probes`` (``rewritten``: ``rewritten_facts``)."""

    def by_case(frame: pd.DataFrame) -> dict[str, frozenset[FactKey]]:
        return {
            case: frozenset(zip(rows[FACT_KEY[0]], rows[FACT_KEY[1]], strict=True))
            for case, rows in frame.groupby("case_id")
        }

    edited = by_case(rewritten[rewritten["kind"] == "direct"])
    changed = by_case(rewritten)
    asked = by_case(fact_keys(probes, *FACT_KEY))
    empty: frozenset[FactKey] = frozenset()
    return {
        case: CaseFacts(
            edited.get(case, empty), changed.get(case, empty), asked.get(case, empty)
        )
        for case in probes["case_id"].unique()
    }


def case_paraphrases(probes: pd.DataFrame) -> dict[str, list[str]]:
    """case_id -> the questions of its ``paraphrase`` probes (they ask the edited fact
    in other words), in table order."""
    asked = probes[(probes["probe_type"] == "paraphrase") & probes["question"].notna()]
    return {
        str(case): list(rows["question"]) for case, rows in asked.groupby("case_id")
    }


def probe_summary(probes: pd.DataFrame) -> pd.DataFrame:
    """Counts of probes and cases per source x probe_type x risk."""
    return (
        probes.groupby(["source", "probe_type", "risk"])
        .agg(probes=("probe_id", "size"), cases=("case_id", "nunique"))
        .reset_index()
    )


ALL = "all"


def _edit_count(count: object, where: str) -> int | None:
    """One risk's count of edits: an integer >= 0, or None for ``"all"``."""
    if count in (None, ALL):
        return None
    text = str(count).strip()
    if isinstance(count, bool) or not text.isdigit():
        raise ValueError(
            f"{where}: expected a count of edits (an integer >= 0) or {ALL!r}, "
            f"got {count!r}"
        )
    return int(text)


def edits_per_risk(
    n_edits: int | str | Mapping[str, int | str], where: str
) -> dict[str, int | None]:
    """``n_edits`` as a count per risk (None: every edit of that risk).

    ``n_edits`` is one count for every risk, ``"all"``, or a mapping of each of
    ``RISKS`` to its count (or ``"all"``). ``where`` names the parameter in errors.
    """
    if not isinstance(n_edits, Mapping):
        return dict.fromkeys(RISKS, _edit_count(n_edits, where))
    unknown = sorted(set(n_edits) - set(RISKS))
    missing = [risk for risk in RISKS if risk not in n_edits]
    if unknown or missing:
        raise ValueError(
            f"{where}: a count per risk must name each of {list(RISKS)} "
            f"(unknown: {unknown}, missing: {missing})"
        )
    return {risk: _edit_count(n_edits[risk], f"{where}.{risk}") for risk in RISKS}


def first_cases_per_risk(
    cases: pd.DataFrame, n_edits: int | str | Mapping[str, int | str], where: str
) -> list[str]:
    """The ids of the first cases of each risk (``edits_per_risk``), taken in turn
    across the edited relations: the first case of each relation (in the order
    ``cases`` first names them), then the second of each, and so on, so that a few
    edits cover every relation the dataset edits. ``cases``: rows with ``case_id``,
    ``risk`` and ``fact_relation`` (the direct probes; a case may have several rows;
    a case without a relation, an injected claim, keeps its place in ``cases``);
    the ids come in the order of ``cases``."""
    counts = edits_per_risk(n_edits, where)
    first = cases.drop_duplicates("case_id").reset_index(drop=True)
    relation = first["fact_relation"].fillna("") if "fact_relation" in first else ""
    turn = first.assign(relation=relation).groupby(["risk", "relation"]).cumcount()
    order = first.assign(turn=turn, position=first.index).sort_values(
        ["turn", "position"]
    )
    rank = order.groupby("risk", sort=False).cumcount().sort_index()
    # "all" as an unbounded count
    limit = first["risk"].map(
        {risk: float("inf") if n is None else n for risk, n in counts.items()}
    )
    return list(first.loc[rank < limit, "case_id"])


def first_stored_edits(
    manifest: pd.DataFrame,
    probes: pd.DataFrame,
    n_edits: int | str | Mapping[str, int | str],
    where: str,
) -> pd.DataFrame:
    """The ``manifest`` rows (stored edits) of each method's first ``n_edits`` cases
    of each risk (``edits_per_risk``), in the ``probes`` table's order of cases."""
    columns = [c for c in ("case_id", "risk", "fact_relation") if c in probes]
    direct = probes.loc[probes["probe_type"] == "direct", columns]
    kept = [
        rows[
            rows["case_id"].isin(
                first_cases_per_risk(
                    direct[direct["case_id"].isin(rows["case_id"])], n_edits, where
                )
            )
        ]
        for _, rows in manifest.groupby("method", sort=False)
    ]
    return pd.concat(kept) if kept else manifest.iloc[:0]


def edits_measured(edits: pd.DataFrame, probes: pd.DataFrame, parameter: str) -> str:
    """One sentence for a report: how many of the dataset's edits of each risk
    ``edits`` (rows with ``method`` and ``case_id``) hold per method, and the
    parameter that chose them."""
    risks = probes[probes["probe_type"] == "direct"].drop_duplicates("case_id")
    risk_of = risks.set_index("case_id")["risk"]
    totals = risks["risk"].value_counts()
    parts = []
    for method, rows in edits.drop_duplicates(["method", "case_id"]).groupby("method"):
        counts = rows["case_id"].map(risk_of).value_counts()
        shares = ", ".join(
            f"{risk} {counts.get(risk, 0)} of {totals[risk]}"
            for risk in RISKS
            if risk in totals
        )
        parts.append(f"{method}: {shares}")
    return (
        f"Edits measured, per method and risk, of the dataset's (the first of each "
        f"risk, in turn across its relations, `{parameter}`): "
        f"{'; '.join(parts) or 'none'}."
    )
