"""Unit tests of the rule miner: input rules, formatting, semantics, parameters."""

from __future__ import annotations

import itertools
import logging
import random

import pytest

from kebench.rules import (
    KnowledgeBase,
    MiningParams,
    RuleMiningError,
    mine_rules,
    read_amie_tsv,
    to_frame,
)
from kebench.rules.amie_format import java_decimal, sorted_body
from kebench.rules.model import Rule

from .helpers import by_canonical_text


def _kb(text: str, tmp_path) -> KnowledgeBase:
    path = tmp_path / "kb.tsv"
    path.write_bytes(text.encode("utf-8"))
    return read_amie_tsv(path)


def _facts(kb: KnowledgeBase) -> set[tuple[int, str, int]]:
    return {
        (int(s), kb.relation_names[r], int(o))
        for s, r, o in zip(kb.subjects, kb.relations, kb.objects, strict=True)
    }


def _mine(
    facts: list[tuple[str, str, str]], params: MiningParams | None = None
) -> list[Rule]:
    subjects, relations, objects = (list(column) for column in zip(*facts, strict=True))
    return mine_rules(KnowledgeBase.from_triples(subjects, relations, objects), params)


def _lines(rules: list[Rule]) -> set[str]:
    return {f"{text}\t{columns}" for text, columns in by_canonical_text(rules).items()}


# --- input --------------------------------------------------------------------------


def test_lines_are_read_as_amie_reads_them(tmp_path, caplog):
    text = (
        "a\tr\tb .\n"  # trailing dot and space
        "a\tr\tb\n"  # duplicate
        "c\tr\td\t.\r\n"  # dot field, CRLF
        "id7\te\tr\tf\r"  # four fields: the first is an id; CR line end
        "g\tr\n"  # two fields: skipped
        "h\tr\ti\tj\tk\n"  # five fields: skipped
        "\n"  # blank: skipped
        '"x"^^<xsd:string>\tr\t"1990"^^<xsd:int>\n'
        " \x1f l \t r \t\u00a0m\n"  # Java trim strips <= U+0020 only ...
        "l\tr\tm\n"  # ... so this is another fact
    )
    with caplog.at_level(logging.WARNING, logger="kebench.rules.kb"):
        kb = _kb(text, tmp_path)
    assert kb.skipped_lines == 3
    assert "skipped 3 line(s)" in caplog.text
    assert kb.relation_names == ("r",)
    assert kb.size == 6  # a-b, c-d, e-f, "x"-"1990", l-\u00a0m, l-m


def test_typed_literal_is_cut_after_its_quote(tmp_path):
    kb = _kb('"x"^^<t>\tp\ty\n"x"\tp\ty\n', tmp_path)
    assert kb.size == 1


def test_entities_are_shared_between_subject_and_object_positions(tmp_path):
    kb = _kb("a\tp\tb\nb\tp\ta\n", tmp_path)
    assert kb.entity_count == 2 and len(_facts(kb)) == 2


def test_empty_kb_is_a_clear_error(tmp_path):
    with pytest.raises(
        RuleMiningError, match=r"kb\.tsv: the knowledge base has no fact"
    ):
        _kb("only\ttwo fields\n\n", tmp_path)


def test_unreadable_kb_is_a_clear_error(tmp_path):
    with pytest.raises(RuleMiningError, match="cannot read"):
        read_amie_tsv(tmp_path / "missing.tsv")


# --- number format and rule text --------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (1.0, "1"),
        (0.8, "0.8"),
        (2 / 3, "0.666666667"),
        (0.1, "0.1"),
        (1 / 1024, "0.000976562"),  # exact tie ...5 rounds to the even digit (down)
        (3 / 1024, "0.002929688"),  # exact tie ...75 rounds to the even digit (up)
        (1e-10, "0"),
        (123456789.0, "123456789"),
        (0.0, "0"),
    ],
)
def test_java_decimal_format(value, text):
    assert java_decimal(value) == text


def test_body_atoms_sort_by_java_string_order():
    # UTF-16 order puts a supplementary character (a surrogate pair) before U+FFFF.
    body = [
        ("?a", "\uffff", "?b"),
        ("?a", "\U00010000", "?b"),
        ("?b", "p", "?a"),
        ("?a", "p", "?b"),
    ]
    assert sorted_body(body) == (
        ("?b", "p", "?a"),  # same relation: by object, then subject
        ("?a", "p", "?b"),
        ("?a", "\U00010000", "?b"),
        ("?a", "\uffff", "?b"),
    )


# --- semantics ------------------------------------------------------------------------


def test_single_relation_kb():
    rules = _mine([("a", "r", "b"), ("b", "r", "c"), ("c", "r", "a"), ("b", "r", "a")])
    assert {rule.head[1] for rule in rules} == {"r"}
    assert any(len(rule.body) == 2 for rule in rules)
    frame = to_frame(rules)
    assert list(frame.columns)[:3] == ["rule_id", "body", "head"]
    assert frame["rule_id"].is_unique


def test_no_rule_above_thresholds_is_an_empty_list_and_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="kebench.rules.miner"):
        assert _mine([("a", "p", "b"), ("c", "q", "d")]) == []
    assert "no rule reaches the mining thresholds" in caplog.text


def _rules_of(head: str, facts, params: MiningParams | None = None) -> dict:
    return {rule.body: rule for rule in _mine(facts, params) if rule.head[1] == head}


def test_pca_threshold_is_inclusive_and_functional_variable_ties_go_to_a():
    facts = [(f"x{i}", "body", f"y{i}") for i in range(10)] + [("x0", "head", "y0")]
    (rule,) = _rules_of("head", facts).values()
    assert (rule.support, rule.pca_body_size, rule.functional_variable) == (1, 1, "?a")
    facts += [(f"x{i}", "head", "other") for i in range(1, 10)]
    (rule,) = _rules_of("head", facts).values()
    assert (rule.pca_body_size, rule.pca_confidence) == (10, 0.1)


def test_skyline_needs_strictly_higher_pca_than_both_parents():
    head = [("x0", "h", "y0"), ("x1", "h", "y1"), ("x2", "h", "w2"), ("x3", "h", "w3")]
    p = [(f"x{i}", "p", f"y{i}") for i in (0, 1, 2)]  # PCA 2/3
    p_and_q = (("?a", "p", "?b"), ("?a", "q", "?b"))
    q = [(f"x{i}", "q", f"y{i}") for i in (0, 1, 3)]  # PCA 2/3; p ∧ q: PCA 1
    assert _rules_of("h", head + p + q)[p_and_q].pca_confidence == 1.0
    q = [
        (f"x{i}", "q", f"y{i}") for i in (0, 1, 2, 3)
    ]  # p ∧ q = p: PCA 2/3, not higher
    assert p_and_q not in _rules_of("h", head + p + q)
    q = [(f"x{i}", "q", f"y{i}") for i in (0, 1)]  # q is perfect: never beaten
    assert p_and_q not in _rules_of("h", head + p + q)


def test_recursivity_limit_and_max_depth():
    facts = [
        ("a", "r", "b"),
        ("b", "r", "c"),
        ("a", "r", "c"),
        ("c", "r", "d"),
        ("b", "r", "d"),
        ("b", "r", "a"),
    ]
    transitive = sorted_body([("?a", "r", "?h"), ("?h", "r", "?b")])
    assert transitive in _rules_of("r", facts)
    assert transitive not in _rules_of("r", facts, MiningParams(recursivity_limit=2))
    assert {len(body) for body in _rules_of("r", facts, MiningParams(max_depth=2))} == {
        1
    }
    with pytest.raises(ValueError, match="at most 3 atoms"):
        _mine(facts, MiningParams(max_depth=4))


def test_amie_options_map_to_parameters():
    assert MiningParams.from_amie_options(mins=1) == MiningParams()
    hc = MiningParams.from_amie_options(minhc=0.5)
    assert (hc.pruning_metric, hc.min_initial_support) == ("head_coverage", 100)
    both = MiningParams.from_amie_options(mins=2, minhc=0.5)  # AMIE: head coverage wins
    assert both.pruning_metric == "head_coverage"
    assert list(hc.support_thresholds([10, 1])) == [5.0, 1.0]
    with pytest.raises(ValueError, match="unknown AMIE option"):
        MiningParams.from_amie_options(minsupport=1)


def test_head_coverage_mode_prunes_small_heads_and_low_coverage():
    facts = [(f"x{i}", "p", f"y{i}") for i in range(4)] + [
        ("x0", "h", "y0"),
        ("x1", "h", "y9"),
    ]
    params = MiningParams(pruning_metric="head_coverage", min_head_coverage=0.5)
    assert {rule.head[1] for rule in _mine(facts, params)} == {"h"}
    assert (
        _mine(
            facts, MiningParams(pruning_metric="head_coverage", min_initial_support=5)
        )
        == []
    )


# --- brute force cross-check ------------------------------------------------------------


def _brute_force(facts: list[tuple[str, str, str]]) -> set[str]:
    """AMIE -mins 1 semantics (design.md §4) by plain enumeration over Python sets."""
    relations = sorted({p for _, p, _ in facts})
    pairs = {r: {(s, o) for s, p, o in facts if p == r} for r in relations}
    labels = [(r, inverse) for r in relations for inverse in (False, True)]

    def pairs_of(label):
        relation, inverse = label
        return {(o, s) for s, o in pairs[relation]} if inverse else pairs[relation]

    def atom(label, left, right):
        relation, inverse = label
        return (right, relation, left) if inverse else (left, relation, right)

    lines: list[Rule] = []
    for head in relations:
        facts_of_head = pairs[head]
        subjects = {s for s, _ in facts_of_head}
        objects = {o for _, o in facts_of_head}
        functional_a = len(subjects) >= len(objects)

        def rule(body_atoms, body, head=head, facts_of_head=facts_of_head):
            support = len(body & facts_of_head)
            pca_body = [
                p
                for p in body
                if (p[0] in subjects if functional_a else p[1] in objects)
            ]
            if support == 0 or support / len(pca_body) < 0.1:  # noqa: PLR2004
                return None
            return Rule(
                tuple(body_atoms), ("?a", head, "?b"), support / len(facts_of_head),
                support / len(body), support / len(pca_body), support, len(body),
                len(pca_body), "?a" if functional_a else "?b",
            )  # fmt: skip

        two = {}
        for label in labels:
            if label != (head, False):
                two[label] = rule([atom(label, "?a", "?b")], pairs_of(label))
        lines += [r for r in two.values() if r]
        for first, second in itertools.combinations(two, 2):
            body = pairs_of(first) & pairs_of(second)
            candidate = rule([atom(first, "?a", "?b"), atom(second, "?a", "?b")], body)
            parents = [two[first], two[second]]
            if candidate and all(
                p is None or candidate.pca_confidence > p.pca_confidence
                for p in parents
            ):
                lines.append(candidate)
        for first, second in itertools.product(labels, labels):
            body = {
                (a, b)
                for a, z in pairs_of(first)
                for z2, b in pairs_of(second)
                if z == z2
            }
            candidate = rule([atom(first, "?a", "?z"), atom(second, "?z", "?b")], body)
            if candidate:
                lines.append(candidate)
    return _lines(lines)


@pytest.mark.parametrize("seed", range(12))
def test_miner_agrees_with_brute_force_on_random_kbs(seed):
    rng = random.Random(seed)
    entities = [f"e{i}" for i in range(rng.randint(3, 9))]
    relations = [f"p{i}" for i in range(rng.randint(1, 4))]
    # Self-loops and pairs linked by several relations included.
    facts = sorted(
        {
            (rng.choice(entities), rng.choice(relations), rng.choice(entities))
            for _ in range(40)
        }
    )
    assert _lines(_mine(facts)) == _brute_force(facts)
