"""Deterministic questions from relation templates.

A consequence (s_c, r_c, o_c) reached from the edited subject s by a chain of relations
becomes a multi-hop question that names s but not the entities reached by following
relations forward: chain [spouse] and r_c citizenship give "What is the country of
citizenship of the spouse of Valerie Hobson?" and the cloze "The country of
citizenship of the spouse of Valerie Hobson is". A backward step (``x`` such that
r(x, s)) names ``x`` itself, since "the one whose birthplace is Salzburg" would be
ambiguous; so does a consequence about the new object itself ("What is the country
of citizenship of Willem-Alexander?" after making him Spain's head of state). The supporting facts are never put in the question.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kebench.kg.amie_export import local_name

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def split_camel_case(name: str) -> str:
    """``leaderName`` -> ``leader name``: the fallback wording of a relation."""
    return _CAMEL.sub(" ", name).replace("_", " ").lower()


@dataclass(frozen=True)
class MquakeTemplates:
    """MQuAKE's Wikidata question and cloze templates (``[X]`` is the subject)."""

    questions: dict[str, str]
    clozes: dict[str, str]

    @classmethod
    def from_dir(cls, folder: str | Path | None) -> MquakeTemplates:
        """Read ``question_templates.json`` and ``cloze_templates.json``; empty if absent."""
        folder = Path(folder) if folder else None
        if folder is None or not (folder / "question_templates.json").is_file():
            return cls({}, {})
        read = lambda name: json.loads((folder / name).read_text(encoding="utf-8"))  # noqa: E731
        return cls(read("question_templates.json"), read("cloze_templates.json"))


@dataclass
class Verbaliser:
    """Turns a relation chain and a target relation into a question and a cloze.

    Args:
        templates: per relation local name, ``noun`` (e.g. "country of citizenship") and
            optionally ``question``/``cloze`` with ``{subject}``.
        pid_of: relation local name -> Wikidata P-id, to use MQuAKE's templates.
        mquake: MQuAKE's templates, used when a relation has no template of its own.
    """

    templates: Mapping[str, Mapping[str, str]]
    pid_of: Mapping[str, str] = field(default_factory=dict)
    mquake: MquakeTemplates = field(default_factory=lambda: MquakeTemplates({}, {}))
    wording_used: Counter = field(default_factory=Counter)

    @classmethod
    def configured(
        cls,
        templates: Mapping[str, Mapping[str, str]],
        relations: Mapping[str, Mapping[str, Any]],
        mquake_templates_dir: str | Path | None,
    ) -> Verbaliser:
        """The verbaliser of the ``qa_generation`` parameters: its templates, P-ids
        from ``relations`` and MQuAKE's templates where their folder exists."""
        return cls(
            templates=templates,
            pid_of=pid_by_local_name(relations),
            mquake=MquakeTemplates.from_dir(mquake_templates_dir),
        )

    def noun(self, relation: str) -> str:
        """The relation as a noun phrase; camel-case splitting when it has no template."""
        if relation in self.templates:
            return self.templates[relation]["noun"]
        self.wording_used[f"fallback:{relation}"] += 1
        return split_camel_case(relation)

    def subject_phrase(
        self, subject: str, chain: Sequence[tuple[str, str, str]]
    ) -> str:
        """Name the consequence's subject by walking the chain from the edited subject.

        ``chain`` holds (relation, "out" | "in" | "named", label of the entity
        reached); only "out" steps are described, the others name the entity.
        """
        phrase = subject
        for relation, direction, reached in chain:
            phrase = (
                f"the {self.noun(relation)} of {phrase}"
                if direction == "out"
                else reached
            )
        return phrase

    def question(
        self, subject: str, chain: Sequence[tuple[str, str, str]], relation: str
    ) -> tuple[str, str, str]:
        """``(question, cloze, source)`` asking for ``relation`` of the chained subject.

        ``source`` says which wording was used: ``conf``, ``mquake`` or ``fallback``.
        """
        phrase = self.subject_phrase(subject, chain)
        spec = self.templates.get(relation)
        pid = self.pid_of.get(relation)
        if spec is not None:
            fill = {"noun": spec["noun"], "subject": phrase}
            question = spec.get("question", "What is the {noun} of {subject}?").format(
                **fill
            )
            cloze = spec.get("cloze", "The {noun} of {subject} is").format(**fill)
            source = "conf"
        elif pid in self.mquake.questions and pid in self.mquake.clozes:
            self.wording_used[f"mquake:{relation}"] += 1
            question = self.mquake.questions[pid].replace("[X]", phrase)
            cloze = self.mquake.clozes[pid].replace("[X]", phrase)
            cloze, source = cloze.replace("__", "").rstrip(), "mquake"
        else:
            noun = self.noun(relation)
            question, cloze = (
                f"What is the {noun} of {phrase}?",
                f"The {noun} of {phrase} is",
            )
            source = "fallback"
        return _sentence_case(question), _sentence_case(cloze), source

    def path_question(
        self, start: str, chain: Sequence[tuple[str, str, str]]
    ) -> tuple[str, str, str]:
        """``(question, cloze, source)`` for a property path from ``start``, each step
        worded, none named: ``[citizenship, capital]`` from Barack Obama gives "The
        capital of the country of citizenship of Barack Obama is".

        ``chain`` holds (relation, "out" | "in", label reached[, class reached]). A
        step walked backward ("in") is worded by the template of ``^relation`` when
        there is one (``phrase``: "the country whose capital is {subject}";
        ``cloze``: "{subject} is the capital of"), else as "the entity whose <noun>
        is ..." and "... is the <noun> of". A template's ``phrase_by_class`` words a
        step by the class of the entity it reaches ("the country where {subject} has
        its headquarters").
        """
        phrase = start
        for relation, direction, _, *cls in chain[:-1]:
            phrase = self.step_phrase(
                relation, direction == "in", phrase, cls[0] if cls else None
            )
        relation, direction, *_ = chain[-1]
        if direction == "in":
            return self._converse_question(relation, phrase)
        return self.question(phrase, [], relation)

    def step_phrase(
        self, relation: str, backward: bool, subject: str, cls: str | None = None
    ) -> str:
        """A noun phrase for the entity one step from ``subject`` (of class ``cls``,
        when known)."""
        key = f"^{relation}" if backward else relation
        spec = self.templates.get(key, {})
        by_class = spec.get("phrase_by_class", {})
        if cls in by_class:
            return by_class[cls].format(subject=subject)
        if "phrase" in spec:
            return spec["phrase"].format(subject=subject)
        if backward:
            self.wording_used[f"fallback:{key}"] += 1
            return f"the entity whose {self.noun(relation)} is {subject}"
        return f"the {self.noun(relation)} of {subject}"

    def _converse_question(self, relation: str, subject: str) -> tuple[str, str, str]:
        """The question and cloze of a step walked backward (``^relation``)."""
        spec = self.templates.get(f"^{relation}", {})
        if not spec:
            self.wording_used[f"fallback:^{relation}"] += 1
        fill = {"subject": subject, "noun": spec.get("noun") or self.noun(relation)}
        question = spec.get("question", "Of what is {subject} the {noun}?")
        cloze = spec.get("cloze", "{subject} is the {noun} of")
        return (
            _sentence_case(question.format(**fill)),
            _sentence_case(cloze.format(**fill)),
            "conf" if spec else "fallback",
        )


def _sentence_case(text: str) -> str:
    """Upper-case the first letter, as a subject phrase may open the sentence."""
    return text[:1].upper() + text[1:]


def pid_by_local_name(relations: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """Relation local name -> Wikidata P-id, from the ``relations`` parameters."""
    return {
        local_name(iri): pid
        for pid, spec in relations.items()
        for iri in spec.get("dbpedia", [])
    }
