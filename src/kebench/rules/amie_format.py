"""AMIE 3's text output: number format, rule lines, header, and parsing them back."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from decimal import ROUND_HALF_EVEN, Decimal

from kebench.rules.model import FRESH_AS_OBJECT, FRESH_AS_SUBJECT, Atom, Rule

HEADER = "\t".join(
    (
        "Rule",
        "Head Coverage",
        "Std Confidence",
        "PCA Confidence",
        "Positive Examples",
        "Body size",
        "PCA Body size",
        "Functional variable",
    )
)
_NINE_DECIMALS = Decimal("1e-9")
_VARIABLE = r"\?[a-z][0-9]*"
_ATOM = re.compile(rf"({_VARIABLE})  (.*?)  ({_VARIABLE})  ")
_RULE_TEXT = re.compile(
    rf"(?P<body>(?:{_VARIABLE}  .*?  {_VARIABLE}  )+) => "
    rf"(?P<subject>{_VARIABLE})  (?P<relation>.*)  (?P<object>{_VARIABLE})"
)
_FIELD_COUNT = 8
_CANONICAL_FRESH = "?z"


@functools.lru_cache(maxsize=1 << 16)
def java_decimal(value: float) -> str:
    """Format like Java ``new DecimalFormat("#.#########").format(value)``.

    At most nine decimals, HALF_EVEN rounding of the exact binary value (Java 8+),
    no trailing zeros: 1.0 -> ``1``, 0.8 -> ``0.8``, 2/3 -> ``0.666666667``.
    """
    if not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("-∞" if value < 0 else "∞")
    text = f"{Decimal(value).quantize(_NINE_DECIMALS, rounding=ROUND_HALF_EVEN):f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


# Rules repeat a few relation and variable names many times over: memoised, their
# keys and texts are computed once per process rather than once per comparison.
@functools.cache
def java_order_key(text: str) -> bytes:
    """Sort key equal to Java's ``String.compareTo`` (UTF-16 code unit order)."""
    return text.encode("utf-16-be", "surrogatepass")


def sorted_body(body: Iterable[Atom]) -> tuple[Atom, ...]:
    """Body atoms in AMIE's print order: by relation, then object, then subject."""
    return tuple(
        sorted(
            body,
            key=lambda atom: (
                java_order_key(atom[1]),
                java_order_key(atom[2]),
                java_order_key(atom[0]),
            ),
        )
    )


def format_rule_text(body: Iterable[Atom], head: Atom) -> str:
    """``s  r  o  `` for each body atom, then `` => `` and the head, as AMIE prints."""
    return _rule_text(tuple(body), head)


@functools.lru_cache(maxsize=1 << 16)
def _rule_text(body: tuple[Atom, ...], head: Atom) -> str:
    atoms = "".join(f"{s}  {r}  {o}  " for s, r, o in sorted_body(body))
    return f"{atoms} => {head[0]}  {head[1]}  {head[2]}"


def canonical_rule_text(body: Iterable[Atom], head: Atom) -> str:
    """Rule text with the fresh variable renamed, equal for rules equal up to renaming."""

    def rename(variable: str) -> str:
        return (
            _CANONICAL_FRESH
            if variable in (FRESH_AS_SUBJECT, FRESH_AS_OBJECT)
            else variable
        )

    return format_rule_text([(rename(s), r, rename(o)) for s, r, o in body], head)


def format_rule_line(rule: Rule) -> str:
    """The full AMIE output line of a rule (rule text and seven tab-separated columns)."""
    return "\t".join(
        (
            format_rule_text(rule.body, rule.head),
            java_decimal(rule.head_coverage),
            java_decimal(rule.std_confidence),
            java_decimal(rule.pca_confidence),
            java_decimal(float(rule.support)),
            str(rule.body_size),
            java_decimal(float(rule.pca_body_size)),
            rule.functional_variable,
        )
    )


def parse_rule_line(line: str) -> Rule | None:
    """A Rule from one AMIE output line, or None if the line is not a rule line."""
    fields = line.rstrip("\r\n").split("\t")
    if len(fields) != _FIELD_COUNT:
        return None
    match = _RULE_TEXT.fullmatch(fields[0])
    if match is None:
        return None
    body = tuple(
        (subject, relation, obj)
        for subject, relation, obj in _ATOM.findall(match["body"])
    )
    try:
        return Rule(
            body=body,
            head=(match["subject"], match["relation"], match["object"]),
            head_coverage=float(fields[1]),
            std_confidence=float(fields[2]),
            pca_confidence=float(fields[3]),
            support=int(fields[4]),
            body_size=int(fields[5]),
            pca_body_size=int(fields[6]),
            functional_variable=fields[7],
        )
    except ValueError:
        return None


def parse_amie_output(text: str) -> list[Rule]:
    """The rules of an AMIE run's stdout: every rule line after the header line.

    AMIE may print its header on the same line as an earlier progress message
    (``Starting the mining phase... Rule<TAB>Head Coverage...``), so the header is
    looked for anywhere in a line. Lines end at ``\n`` only, because a relation name
    may hold other line-break characters.
    """
    rules: list[Rule] = []
    header_seen = False
    for line in text.split("\n"):
        if not header_seen:
            header_seen = HEADER in line
            continue
        rule = parse_rule_line(line)
        if rule is not None:
            rules.append(rule)
    return rules
