"""The mined rule as one value: atoms and AMIE's printed measures."""

from __future__ import annotations

from dataclasses import dataclass

# An atom is (subject variable, relation name, object variable), e.g. ("?a", "spouse", "?b").
Atom = tuple[str, str, str]

HEAD_SUBJECT = "?a"
HEAD_OBJECT = "?b"
# AMIE names the one fresh variable of a path rule ?g when it was created as a
# subject and ?h when it was created as an object.
FRESH_AS_SUBJECT = "?g"
FRESH_AS_OBJECT = "?h"


@dataclass(frozen=True)
class Rule:
    """A closed Horn rule ``body => head`` with AMIE's measures.

    Attributes:
        body: body atoms, in the order AMIE prints them.
        head: the head atom, always ``(?a, relation, ?b)``.
        head_coverage: support / number of facts of the head relation.
        std_confidence: support / body_size.
        pca_confidence: support / pca_body_size.
        support: head facts (a, b) that the body also yields.
        body_size: distinct (a, b) pairs the body yields.
        pca_body_size: body pairs whose functional variable has some head fact.
        functional_variable: ``?a`` or ``?b``.
    """

    body: tuple[Atom, ...]
    head: Atom
    head_coverage: float
    std_confidence: float
    pca_confidence: float
    support: int
    body_size: int
    pca_body_size: int
    functional_variable: str
