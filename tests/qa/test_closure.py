"""The ``consistent`` semantics: the edited world as a closure, on hand-worked KGs.

Each expectation below was worked out by hand from the rules and facts written in the
test, as a perfect reasoner that accepts the edit and the rules would conclude.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kebench.qa.closure import (
    ClosureSettings,
    EditedWorld,
    functional_relations,
)
from kebench.qa.consequences import EditedFact, KgIndex
from tests.qa.kgs import DBO, derive, edit_row, kg, rules

BIRTH_CAPITAL = (
    "Rcap",
    [["?a", "birthPlace", "?h"], ["?b", "capital", "?h"]],
    ["?a", "citizenship", "?b"],
)
BIRTH_COUNTRY = (
    "Rbc",
    [["?a", "birthPlace", "?h"], ["?h", "country", "?b"]],
    ["?a", "citizenship", "?b"],
)
BORN_HERE = (
    "Rborn",
    [["?g", "birthPlace", "?a"], ["?g", "citizenship", "?b"]],
    ["?a", "country", "?b"],
)
SPOUSE = (
    "Rsp",
    [["?g", "citizenship", "?b"], ["?g", "spouse", "?a"]],
    ["?a", "citizenship", "?b"],
)
ALUMNI = (
    "Ralm",
    [["?g", "almaMater", "?a"], ["?g", "citizenship", "?b"]],
    ["?a", "country", "?b"],
)
RELATIONS = {
    "P19": {"dbpedia": [f"{DBO}birthPlace"]},
    "P27": {"dbpedia": [f"{DBO}citizenship"]},
    "P26": {"dbpedia": [f"{DBO}spouse"]},
    "P69": {"dbpedia": [f"{DBO}almaMater"]},
}

BIDEN = kg(
    ("Joe_Biden", "birthPlace", "Scranton"),
    ("Joe_Biden", "citizenship", "United_States"),
    ("Joe_Biden", "spouse", "Jill_Biden"),
    ("Jill_Biden", "spouse", "Joe_Biden"),
    ("Jill_Biden", "citizenship", "United_States"),
    ("Scranton", "country", "United_States"),
    ("Dublin", "country", "Ireland"),
    ("Ireland", "capital", "Dublin"),
    ("United_States", "capital", "Washington"),
    ("Washington", "country", "United_States"),
)
BIDEN_RULES = rules(BIRTH_CAPITAL, BIRTH_COUNTRY, BORN_HERE, SPOUSE)


def consequences(frame: pd.DataFrame) -> dict[tuple[str, str], tuple[str, str, str]]:
    """(subject, relation) -> (old, new, status) of an ``entailed_facts`` frame."""
    return {
        (f["subject_label"], f["relation"]): (
            f["answer_old"],
            f["answer_new"],
            f["status"],
        )
        for f in frame.to_dict("records")
    }


def test_biden_born_in_dublin_has_no_stale_premise():
    """demo-14: the paper derives "Dublin is in the United States" from Biden's *old*
    citizenship, which the same edit changes to Ireland; the closure does not."""
    edits = pd.DataFrame([edit_row("c1", "Joe_Biden", "P19", "Scranton", "Dublin")])
    paper, _ = derive(edits, BIDEN_RULES, BIDEN, RELATIONS, semantics="paper")
    assert ("Dublin", "country") in consequences(paper)
    consistent, report = derive(edits, BIDEN_RULES, BIDEN, RELATIONS)
    assert consequences(consistent) == {
        ("Joe Biden", "citizenship"): ("United States", "Ireland", "entailed"),
        # two rule applications: Biden's new citizenship, then his spouse's
        ("Jill Biden", "citizenship"): ("United States", "Ireland", "entailed"),
    }
    jill = consistent[consistent["subject_label"] == "Jill Biden"].iloc[0]
    assert jill["depth"] == 2
    assert jill["hops"] == 2  # "the spouse of Joe Biden"
    # the KG facts under both derivations; the edit and the derived fact are not
    assert set(map(tuple, json.loads(jill["premises"]))) == {
        ("Ireland", "capital", "Dublin"),
        ("Joe Biden", "spouse", "Jill Biden"),
    }
    assert report["tiers"]["inductive"]["by_kind"]["rule"] == {"entailed": 2}


def test_depth_bound_of_one_keeps_first_consequences_only():
    edits = pd.DataFrame([edit_row("c1", "Joe_Biden", "P19", "Scranton", "Dublin")])
    facts, _ = derive(
        edits,
        BIDEN_RULES,
        BIDEN,
        RELATIONS,
        closure=ClosureSettings(max_depth=1),
    )
    assert consequences(facts) == {
        ("Joe Biden", "citizenship"): ("United States", "Ireland", "entailed")
    }


HARVARD = kg(
    ("Barack_Obama", "almaMater", "Harvard_University"),
    ("Barack_Obama", "citizenship", "United_States"),
    ("George_W._Bush", "almaMater", "Harvard_University"),
    ("George_W._Bush", "citizenship", "United_States"),
    ("Bill_Gates", "almaMater", "Harvard_University"),
    ("Bill_Gates", "citizenship", "United_States"),
    ("Harvard_University", "country", "United_States"),
    ("Obama_only_school", "country", "United_States"),
    ("Barack_Obama", "almaMater", "Obama_only_school"),
)


@pytest.mark.parametrize(
    ("share", "status"), [(0.5, "contested"), (0.66, "contested"), (0.67, "entailed")]
)
def test_one_alumnus_does_not_move_a_university(share, status):
    """demo-1: other alumni's citizenships keep Harvard in the United States (2 of the
    3 groundings of the rule there do not use the edit: share 0.667); a school only Obama attended
    moves with him."""
    edits = pd.DataFrame(
        [edit_row("c1", "Barack_Obama", "P27", "United_States", "Canada")]
    )
    facts, report = derive(
        edits,
        rules(ALUMNI),
        HARVARD,
        RELATIONS,
        closure=ClosureSettings(contest_share=share),
    )
    found = consequences(facts)
    assert found[("Harvard University", "country")] == (
        "United States",
        "Canada",
        status,
    )
    assert found[("Obama only school", "country")][2] == "entailed"
    if status == "contested":
        harvard = facts[facts["subject_label"] == "Harvard University"].iloc[0]
        assert harvard["reason"].startswith("independent groundings: 2 of 3 ")
        assert "of Ralm" in harvard["reason"]
        inductive = report["tiers"]["inductive"]
        assert inductive["not_probed_by_reason"] == {"independent groundings": 1}
        assert inductive["by_kind"]["rule"]["contested"] == 1


def test_a_spouse_nationality_follows_when_nothing_else_speaks_for_it():
    """The paper's own example stays entailed: only one grounding of spouse ∘
    nationality speaks for John Profumo."""
    world = kg(
        ("Valerie_Hobson", "citizenship", "United_Kingdom"),
        ("Valerie_Hobson", "spouse", "John_Profumo"),
        ("John_Profumo", "citizenship", "United_Kingdom"),
    )
    edits = pd.DataFrame(
        [edit_row("c1", "Valerie_Hobson", "P27", "United_Kingdom", "France")]
    )
    facts, _ = derive(edits, rules(SPOUSE), world, RELATIONS)
    assert consequences(facts) == {
        ("John Profumo", "citizenship"): ("United Kingdom", "France", "entailed")
    }


def test_spouses_taking_each_others_citizenship_conflict():
    """demo-23: marrying Shakira, David Beckham's citizenship would become hers and hers
    his, each from the other's old value: no consistent world, so both conflict."""
    mirrored = (
        "Rsp2",
        [["?h", "citizenship", "?b"], ["?a", "spouse", "?h"]],
        ["?a", "citizenship", "?b"],
    )
    world = kg(
        ("David_Beckham", "citizenship", "United_Kingdom"),
        ("David_Beckham", "spouse", "Victoria_Beckham"),
        ("Victoria_Beckham", "spouse", "David_Beckham"),
        ("Shakira", "citizenship", "Colombia"),
    )
    edits = pd.DataFrame(
        [edit_row("c1", "David_Beckham", "P26", "Victoria_Beckham", "Shakira")]
    )
    facts, report = derive(edits, rules(SPOUSE, mirrored), world, RELATIONS)
    found = consequences(facts)
    assert found[("David Beckham", "citizenship")][2] == "conflicting"
    assert found[("Shakira", "citizenship")][2] == "conflicting"
    assert "entailed" not in {status for _, _, status in found.values()}
    assert report["tiers"]["inductive"]["edits_with_probed_pct"] == 0.0


def test_a_relation_that_is_not_functional_is_additive():
    """almaMater has two values for one subject here (functionality 3/4 < 0.9): Ben's
    old alma mater stays a KG fact beside the new one, so new-vs-old is no test."""
    world = kg(
        ("Ada", "almaMater", "Oslo_University"),
        ("Ben", "almaMater", "Oslo_University"),
        ("Ben", "almaMater", "Bergen_University"),
        ("Ada", "spouse", "Ben"),
    )
    rule = (
        "Rsch",
        [["?g", "spouse", "?a"], ["?g", "almaMater", "?b"]],
        ["?a", "almaMater", "?b"],
    )
    assert functional_relations(KgIndex(world), 0.9) == {"spouse"}
    edits = pd.DataFrame(
        [edit_row("c1", "Ada", "P69", "Oslo_University", "Trondheim_University")]
    )
    facts, report = derive(edits, rules(rule), world, RELATIONS)
    assert consequences(facts) == {
        ("Ben", "almaMater"): ("Oslo University", "Trondheim University", "additive")
    }
    assert report["tiers"]["inductive"]["edits_with_probed_pct"] == 0.0


def test_a_non_functional_consequence_only_the_old_world_derives_is_entailed():
    """MQuAKE-T's kind: a town's "leader" follows its country's. leaderName is not
    functional (the country has two), but the town's old leader is no KG fact: only
    the old world derives it, so the change is real."""
    world = kg(
        ("United_Kingdom", "leaderName", "Boris_Johnson"),
        ("United_Kingdom", "leaderName", "Lindsay_Hoyle"),
        ("Aston", "country", "United_Kingdom"),
    )
    rule = (
        "Rtown",
        [["?a", "country", "?h"], ["?h", "leaderName", "?b"]],
        ["?a", "leaderName", "?b"],
    )
    edits = pd.DataFrame(
        [edit_row("c1", "United_Kingdom", "P6", "Boris_Johnson", "Rishi_Sunak")]
    )
    facts, _ = derive(
        edits, rules(rule), world, {"P6": {"dbpedia": [f"{DBO}leaderName"]}}
    )
    assert consequences(facts) == {
        ("Aston", "leaderName"): ("Boris Johnson", "Rishi Sunak", "entailed")
    }


def test_two_edits_in_one_world_conflict_where_they_disagree():
    """A batch: Obama becomes Canadian and Michelle British. Each edit alone entails
    the other's citizenship; together the spouse rule meets Michelle's own edit."""
    world = kg(
        ("Barack_Obama", "citizenship", "United_States"),
        ("Michelle_Obama", "citizenship", "United_States"),
        ("Barack_Obama", "spouse", "Michelle_Obama"),
        ("Michelle_Obama", "spouse", "Barack_Obama"),
    )
    closure = EditedWorld(
        KgIndex(world), [(SPOUSE[0], [tuple(a) for a in SPOUSE[1]], tuple(SPOUSE[2]))]
    )
    alone = closure.derive(
        [EditedFact("Barack_Obama", "citizenship", "United_States", "Canada")]
    )
    assert [(i.fact, i.status) for i in alone] == [
        (("Michelle_Obama", "citizenship", "Canada"), "entailed")
    ]
    joint = closure.derive(
        [
            EditedFact("Barack_Obama", "citizenship", "United_States", "Canada"),
            EditedFact("Michelle_Obama", "citizenship", "United_States", "Britain"),
        ]
    )
    # an edit's own fact is given: the rule's conclusions about it are not consequences
    assert joint == []
    assert closure.notes["consequence about an edited fact itself"] >= 2


def test_unknown_semantics_is_refused():
    edits = pd.DataFrame([edit_row("c1", "Joe_Biden", "P19", "Scranton", "Dublin")])
    with pytest.raises(ValueError, match="semantics: 'one-step' is not one of"):
        derive(edits, BIDEN_RULES, BIDEN, RELATIONS, semantics="one-step")
