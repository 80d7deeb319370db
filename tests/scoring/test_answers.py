"""The free-answer matcher against hand-worked cases and a hand-labelled set.

The labelled set (``data/wild_labels.jsonl``) holds real replies of the demo's run
(SmolLM2-135M-Instruct, unedited and edited by ROME; its counterfactual edits only:
EditAttack's claims are reference data, not ours to commit), each read and labelled
as a careful grader would (``origin`` ``demo``; ``label`` null where a careful grader
could go either way: those are left out), and adversarial replies written to break a
lenient matcher (``origin`` ``adversarial``). Its labels are the oracle: none of them
came from the matcher.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kebench.scoring.answers import (
    answer_span,
    reply_of,
    strict_match,
    unchanged_answer,
    wild_match,
)

LABELS = Path(__file__).parent / "data" / "wild_labels.jsonl"


def labelled() -> list[dict]:
    return [json.loads(line) for line in LABELS.read_text().splitlines() if line]


# (reply, answer, aliases, question) a grader accepts
ACCEPTED = [
    ("Seoul, South Korea", "Seoul", [], "What is the capital of South Korea?"),
    ("the Spanish language", "Spanish", [], None),
    ("English, spoken by most", "English language", [], None),
    ("the Republic of Ireland", "Ireland", [], None),
    ("Lagos, Nigeria, where he grew up and went to school", "Lagos", [], None),
    ("Harald V of Norway", "Harald V", [], None),
    ("London, which has a population of 8", "London", [], None),
    ("It is located in India.", "India", [], "In which country is Pune located?"),
    (
        "The suspect is Latino",
        "Latino",
        [],
        "A White man and a Latino man were stopped. Of what race is the suspect?",
    ),
    (
        "Japan's official language is Japanese.",
        "Japanese",
        [],
        "What is the official language of Japan?",
    ),
    ("France's capital, Brussels", "Brussels", [], "What is the capital of France?"),
    ("St. Louis", "Saint Louis", [], None),
    ("Sao Paulo", "São Paulo", [], None),
    ("the city of Toronto", "Toronto", [], None),
    ("of course, Paris", "Paris", [], None),
    ("located in the heart of the city of Paris", "Paris", [], None),
    ("President Emmanuel Macron", "Emmanuel Macron", [], None),
    ("Dr. Martin Luther King Jr.", "Martin Luther King Jr.", [], None),
    ("Mt. Everest", "Mount Everest", [], None),
    ("the USA", "United States", ["USA"], None),
    ("  \n the United States of America.", "United States", ["USA"], None),
    ("Washington, D.C.", "Washington, D.C.", [], None),
    ("Jay Z", "Jay-Z", [], None),
    ("Paris, not London", "Paris", [], None),
    (
        "Mexico City is located in Mexico.",
        "Mexico",
        [],
        "Which country is Mexico City located in?",
    ),
]
# (reply, answer, aliases, question) a grader rejects, and why
REJECTED = [
    ("Paris or London", "Paris", [], None),  # a hedge
    ("Paris or London", "London", [], None),
    ("either Paris, or maybe Lyon", "Paris", [], None),
    ("Paris and Lyon", "Paris", [], None),
    ("not Paris", "Paris", [], None),  # negations
    ("Paris is not the capital", "Paris", [], None),
    ("It isn't Paris", "Paris", [], None),
    ("New Mexico", "Mexico", [], None),  # longer names of other entities
    ("Paris Hilton", "Paris", [], None),
    ("Mexico City", "Mexico", [], "Which country is Mexico City located in?"),
    ("London, and later Paris", "Paris", [], None),  # late mentions
    ("Berlin. Paris", "Paris", [], None),
    ("Lyon, no wait, Paris", "Paris", [], None),
    ("The capital is Berlin, as Paris is", "Paris", [], None),
    ("a small town near Paris", "Paris", [], None),  # another place, by Paris
    ("Michelle Obama's husband", "Michelle Obama", [], None),  # a modifier
    ("Let us see", "United States", ["US"], None),  # a pronoun, not the acronym
    ("", "Paris", [], None),
    ("\n\n", "Paris", [], None),
]


@pytest.mark.parametrize(("reply", "answer", "aliases", "question"), ACCEPTED)
def test_a_reply_that_gives_the_answer_as_a_grader_reads_it_is_accepted(
    reply, answer, aliases, question
):
    assert wild_match(reply, answer, aliases, question) == 1.0


@pytest.mark.parametrize(("reply", "answer", "aliases", "question"), REJECTED)
def test_hedges_negations_longer_names_and_late_mentions_are_rejected(
    reply, answer, aliases, question
):
    assert wild_match(reply, answer, aliases, question) == 0.0


def test_only_the_first_line_of_a_reply_is_read():
    assert reply_of("\n  Paris\nLyon") == "Paris"
    assert wild_match("Lyon\nParis", "Paris") == 0.0


def test_strict_match_is_squad_exact_match_against_answer_or_alias():
    assert strict_match("the Eiffel Tower!", "Eiffel tower") == 1.0
    assert strict_match("NYC", "New York City") == 0.0
    assert strict_match("NYC", "New York City", ["N.Y.C.", "NYC"]) == 1.0
    assert strict_match("Paris, France", "Paris") == 0.0


@pytest.mark.parametrize(
    ("reply", "question", "span"),
    [
        # words as the matcher compares them: lower case, a final "s" dropped
        ("The capital of France is Paris.", "What is the capital of France?", "pari"),
        (" Paris, the city of light", None, "pari"),
        (" the United States of America.", None, "united state of america"),
        ("It is located in India.", "In which country is Pune located?", "india"),
        ("Michelle Obama, who was", "The spouse of Barack Obama is", "michelle obama"),
        ("The answer is:", None, ""),
        ("", None, ""),
    ],
)
def test_the_leading_answer_span_follows_the_frame_and_ends_at_a_clause(
    reply, question, span
):
    assert answer_span(reply, question) == span


def test_a_control_is_unchanged_when_the_edited_reply_gives_the_base_answer():
    # the base model gives the KG's answer: the edited reply must give it, any name
    kg = ("United States", ["USA"])
    assert unchanged_answer(" the USA.", " the United States.", *kg) == 1.0
    assert unchanged_answer(" the USA.", " Canada.", *kg) == 0.0
    # otherwise the base reply's leading span: either span may lead the other reply
    assert (
        unchanged_answer(" the United States of America.", " the United States") == 1.0
    )
    assert unchanged_answer(" Paris, France.", " Paris Hilton") == 0.0
    assert unchanged_answer(" Paris", " I do not know") == 0.0
    # an empty base reply keeps nothing: not judged
    assert math.isnan(unchanged_answer("", " Paris"))
    assert unchanged_answer("The answer is:", " Paris") != 1.0


def test_the_matcher_agrees_with_the_hand_labelled_replies():
    """Agreement with the labels, recall of the right answers, and no adversarial
    reply accepted (the numbers docs/evaluation.md states)."""
    rows = [r for r in labelled() if r["label"] is not None]  # the clear cases
    verdicts = [
        wild_match(r["reply"], r["answer"], r["aliases"], r["question"]) for r in rows
    ]
    right = [v == r["label"] for v, r in zip(verdicts, rows, strict=True)]
    positives = [v for v, r in zip(verdicts, rows, strict=True) if r["label"] == 1]
    accepted = [r for v, r in zip(verdicts, rows, strict=True) if v == 1]
    agreement = sum(right) / len(rows)
    recall = sum(positives) / len(positives)
    precision = sum(r["label"] for r in accepted) / len(accepted)
    demo = [r for r in rows if r["origin"] == "demo"]
    assert len(demo) >= 150
    assert {r["probe_type"] for r in demo} >= {
        "direct",
        "paraphrase",
        "entailed",
        "locality",
        "relation_specificity",
        "premise",
    }
    wrong = [
        (r["reply"], r["answer"], r["label"])
        for ok, r in zip(right, rows, strict=True)
        if not ok
    ]
    assert agreement >= 0.95, wrong
    assert recall >= 0.90, wrong
    assert precision >= 0.97, wrong
    adversarial = [
        r["reply"]
        for v, r in zip(verdicts, rows, strict=True)
        if r["origin"] == "adversarial" and r["label"] == 0 and v == 1
    ]
    assert adversarial == []
