"""The deductive tier: what a perfect reasoner must conclude from an edit.

A perfect reasoner accepts the edit (s, p, o) -> (s, p, o'), the world's unchanged
facts and the logic of the vocabulary (``kebench.kg.vocabulary``); it accepts no
mined correlation. Each consequence is a *walk*: a property path from a start entity,
over stored KG triples and the edit's new triple, to the answer. Its kinds:

- ``composition`` (RippleEdits' Compositionality I and II): the edit's triple and at
  least one unchanged KG triple, before it ("the country of citizenship of the spouse
  of Y", where Y's spouse is s: ``spouse/citizenship`` from Y) or after it ("the
  capital of the country of citizenship of s": ``citizenship/capital`` from s);
- ``symmetric`` / ``inverse`` (Logical Generalization): the edit's triple walked
  backward from o' (``^spouse``), where an axiom makes p symmetric or names its
  inverse (the question then asks that inverse: "Sydney is the capital of");
- ``subject_alias``: the edited question asked of another name of s;
- ``axiom``: a mined rule that the axioms entail (a sub-, equivalent or inverse
  property, a symmetric or transitive one), applied to the edit: deductive whatever
  its confidence.

**Answers come from a real engine.** A walk's answer is the answer of its property
path, each step widened by the axioms (``Vocabulary.implying``: a step of p also
crosses p's sub- and equivalent properties, its inverses backward, p backward when
symmetric), run as a SPARQL 1.1 query on a pyoxigraph store that holds the edited
world: the KG with the edit's new triple inserted, and the replaced triple deleted
together with every stored fact that states it again (its symmetric twin, its inverse,
its sub- and equivalent properties; every value of (s, p) when p is functional). The
old answer is the same query on the old world, the reverse edit: a KG may already
hold the new value (DBpedia states MQuAKE-T's post-update leaders).

**One answer per probe.** Every prefix of the path, and the question it asks, has
exactly one value in the edited world; otherwise the row is ``additive`` and is not
probed. A walked triple whose subject (or object) has types none of which fits the
relation's domain (range) is ``ill_typed``. A consequence whose answer does not change
is counted, not kept; one whose old world has no single answer keeps
``answer_old`` empty and is scored under its own protocol.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from itertools import pairwise

import pandas as pd
import pyoxigraph as ox

from kebench.kg.amie_export import local_name, triples_to_quads
from kebench.kg.vocabulary import Step, Vocabulary

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Term:
    """An entity (IRI) or a literal, by its value."""

    value: str
    literal: bool = False

    def node(self) -> ox.NamedNode | ox.Literal:
        return ox.Literal(self.value) if self.literal else ox.NamedNode(self.value)


@dataclass(frozen=True)
class Triple:
    """A stored triple, or the edit's new one."""

    s: str
    p: str
    o: Term


@dataclass(frozen=True)
class EditTriples:
    """An edit as KG triples: subject, the predicates that state the relation, the
    replaced and the new object."""

    subject: str
    predicates: tuple[str, ...]
    old: Term
    new: Term


@dataclass(frozen=True)
class Walk:
    """One consequence: from ``start`` along ``steps`` over ``triples`` (as stored, one
    per step), asked as ``asked`` (the steps its question names, when they differ)."""

    kind: str
    start: str
    steps: tuple[Step, ...]
    triples: tuple[Triple, ...]
    asked: tuple[Step, ...]
    rule_id: str | None = None
    start_label: str | None = None  # another name of the start (subject_alias)

    @property
    def end(self) -> Term:
        triple, (_, backward) = self.triples[-1], self.steps[-1]
        return Term(triple.s) if backward else triple.o


@dataclass
class Deduction:
    """A walk, judged: its status, and its answers in the new and the old world."""

    walk: Walk
    status: str
    reason: str | None
    answer_new: Term
    answer_old: Term | None
    # the class of each node the walk reaches (Deducer.node_class), for the wording
    node_classes: tuple[str | None, ...] = ()


@dataclass(frozen=True)
class DeductionSettings:
    """``qa_generation.deductive`` (qa_generation.yml)."""

    composition_steps: int = 1  # unchanged KG triples a composition walks, at most
    max_aliases: int = 3  # other names of the subject asked, per edit
    max_per_kind: int = 6  # probed consequences per edit and kind (seeded choice)
    max_candidates: int = 400  # walks judged per edit and kind (seeded choice)
    seed: int = 0
    # entities whose local name holds it are no walk's node (DBpedia's intermediate
    # nodes: X__Tenure__5, X__CareerStation__1)
    intermediate_node_marker: str = "__"
    # a step before the edit names one entity only over a relation at least this
    # functional on the KG (Deducer._designates)
    designating_functionality: float = 0.9


def _names(classes: Iterable[str]) -> str:
    return "/".join(sorted(local_name(c) for c in classes))


def path_text(steps: Sequence[Step]) -> str:
    """A walk's property path as ``entailed_facts.relation`` writes it: local names
    joined by ``/``, ``^`` for a step walked against its stored triple."""
    return "/".join(("^" if back else "") + local_name(p) for p, back in steps)


@dataclass(frozen=True)
class AxiomRule:
    """A mined rule the axioms entail, by the body atoms that entail its head.

    ``premises``: the KG predicates of the entailing atom's relation; ``conclusion``:
    a predicate of the head's; ``flipped``: the atom's arguments are the head's,
    swapped (an inverse, a symmetric property); ``transitive``: two atoms of one
    transitive predicate chain the head's arguments.
    """

    rule_id: str
    premises: frozenset[str]
    conclusion: str
    flipped: bool = False
    transitive: bool = False


Atom = tuple[str, str, str]


def axiom_rule(
    rule_id: str,
    body: Sequence[Atom],
    head: Atom,
    vocabulary: Vocabulary,
    iris: Mapping[str, set[str]],
) -> AxiomRule | None:
    """The rule as an ``AxiomRule`` when the axioms alone entail its head from one of
    its body atoms (the other atom, if any, is then redundant), or from a chain of a
    transitive predicate; None for a rule the axioms do not entail (an inductive one).

    Rules are mined on local names; ``iris`` maps each to its factual predicates, and
    an atom entails when one of them does.
    """
    a, relation, b = head
    for conclusion in sorted(iris.get(relation, ())):
        for s_var, premise, o_var in body:
            if (s_var, o_var) not in ((a, b), (b, a)):
                continue
            flipped = (s_var, o_var) == (b, a)
            premises = frozenset(
                p
                for p in iris.get(premise, ())
                if vocabulary.entails(p, flipped, conclusion)
            )
            if premises:
                return AxiomRule(rule_id, premises, conclusion, flipped)
        if len(body) == 2 and body[0][1] == body[1][1]:  # noqa: PLR2004
            chained = {(body[0][0], body[0][2]), (body[1][0], body[1][2])}
            middles = {v for atom in body for v in (atom[0], atom[2])} - {a, b}
            if len(middles) == 1:
                (z,) = middles
                premises = frozenset(
                    p
                    for p in iris.get(body[0][1], ())
                    if p in vocabulary.transitive
                    and vocabulary.entails(p, False, conclusion)
                )
                if premises and chained == {(a, z), (z, b)}:
                    return AxiomRule(rule_id, premises, conclusion, transitive=True)
    return None


class WorldStore:
    """The factual KG in a pyoxigraph store, edited in place for one edit at a time."""

    def __init__(self, triples: pd.DataFrame, vocabulary: Vocabulary) -> None:
        self.store = ox.Store()
        self.store.bulk_extend(triples_to_quads(triples))
        self.vocabulary = vocabulary
        self.by_name: dict[str, set[str]] = defaultdict(set)
        for predicate in set(triples["p"]):
            self.by_name[local_name(predicate)].add(predicate)
        self._alternatives: dict[Step, str] = {}

    def stating(self, subject: str, predicate: str, obj: Term | None) -> list[ox.Quad]:
        """The stored quads that state ``predicate``(subject, obj) (any object when
        ``obj`` is None), directly or through an axiom."""
        found = []
        for other, flipped in self.vocabulary.implying(predicate):
            pattern = (
                (None, ox.NamedNode(other), ox.NamedNode(subject))
                if flipped
                else (ox.NamedNode(subject), ox.NamedNode(other), None)
            )
            for quad in self.store.quads_for_pattern(*pattern, None):
                value = quad.subject if flipped else quad.object
                if obj is None or value.value == obj.value:
                    found.append(quad)
        return found

    def changes(
        self, edit: EditTriples, use_new: bool = True
    ) -> tuple[set[ox.Quad], set[ox.Quad]]:
        """(removed, added): the stored quads that state the value the edit replaces
        (every value of (s, p) when p is functional), and the edit's triples."""
        value, other = (edit.new, edit.old) if use_new else (edit.old, edit.new)
        removed: set[ox.Quad] = set()
        for predicate in edit.predicates:
            if predicate in self.vocabulary.functional:
                removed.update(self.stating(edit.subject, predicate, None))
            removed.update(self.stating(edit.subject, predicate, other))
        stated = {
            ox.Quad(ox.NamedNode(edit.subject), ox.NamedNode(p), value.node())
            for p in edit.predicates
        }
        return removed - stated, {quad for quad in stated if quad not in self.store}

    @contextmanager
    def world(self, edit: EditTriples, use_new: bool = True) -> Iterator[None]:
        """The store as the world after the edit (or, ``use_new=False``, before it)."""
        removed, added = self.changes(edit, use_new)
        for quad in removed:
            self.store.remove(quad)
        for quad in added:
            self.store.add(quad)
        try:
            yield
        finally:
            for quad in added:
                self.store.remove(quad)
            for quad in removed:
                self.store.add(quad)

    def step_expression(self, step: Step) -> str:
        """A step as a SPARQL path: over every factual predicate of its local name
        (``entailed_facts.relation`` names steps by local name), widened by the
        axioms (``Vocabulary.implying``)."""
        if step not in self._alternatives:
            predicate, backward = step
            parts = sorted(
                {
                    ("^" if flipped != backward else "") + str(ox.NamedNode(other))
                    for named in self.by_name.get(local_name(predicate), {predicate})
                    for other, flipped in self.vocabulary.implying(named)
                }
            )
            self._alternatives[step] = "(" + "|".join(parts) + ")"
        return self._alternatives[step]

    def answers(self, start: str, steps: Sequence[Step]) -> set[Term]:
        """The values of the property path ``steps`` from ``start``, in the store as
        it stands."""
        path = "/".join(self.step_expression(step) for step in steps)
        query = f"SELECT DISTINCT ?x WHERE {{ {ox.NamedNode(start)} {path} ?x }}"
        return {
            Term(row["x"].value, isinstance(row["x"], ox.Literal))
            for row in self.store.query(query)
        }


class TripleIndex:
    """Stored factual triples by subject and by object, in IRIs, for the steps a walk
    may take between KG entities: those in ``walkable`` (a question can word them),
    never through an entity whose local name holds ``skip_marker`` (DBpedia's
    intermediate nodes, ``X__Tenure__5``, name no real-world entity)."""

    def __init__(
        self, triples: pd.DataFrame, walkable: frozenset[Step], skip_marker: str
    ) -> None:
        self.walkable = walkable
        self.out: dict[str, list[Triple]] = defaultdict(list)
        self.into: dict[str, list[Triple]] = defaultdict(list)
        for s, p, o, literal in zip(
            triples["s"],
            triples["p"],
            triples["o"],
            triples["o_is_literal"],
            strict=True,
        ):
            if skip_marker and skip_marker in local_name(s) + (
                "" if literal else local_name(o)
            ):
                continue
            triple = Triple(s, p, Term(o, bool(literal)))
            self.out[s].append(triple)
            if not literal:
                self.into[o].append(triple)

    def steps_from(self, entity: str) -> Iterator[tuple[Step, Triple]]:
        """Each walkable step out of ``entity`` over one stored triple."""
        for triple in self.out.get(entity, ()):
            if (triple.p, False) in self.walkable:
                yield (triple.p, False), triple
        for triple in self.into.get(entity, ()):
            if (triple.p, True) in self.walkable:
                yield (triple.p, True), triple

    def steps_into(self, entity: str) -> Iterator[tuple[str, Step, Triple]]:
        """Each (start, step, triple) whose walkable step reaches ``entity``."""
        for triple in self.into.get(entity, ()):
            if (triple.p, False) in self.walkable:
                yield triple.s, (triple.p, False), triple
        for triple in self.out.get(entity, ()):
            if (triple.p, True) in self.walkable and not triple.o.literal:
                yield triple.o.value, (triple.p, True), triple


def _seeded_order(items: Iterable[Walk], case_id: str, seed: int) -> list[Walk]:
    """``items`` in a fixed pseudo-random order that takes one walk of each property
    path before a second of any: a capped set covers as many paths as it can (one
    "the capital of the country of citizenship of X", not six of them)."""

    def key(walk: Walk) -> str:
        text = (
            f"{seed}|{case_id}|{walk.start}|{walk.start_label}|{path_text(walk.steps)}"
        )
        return hashlib.sha256(text.encode()).hexdigest()

    shuffled = sorted(items, key=key)
    rank: Counter = Counter()
    ranked = []
    for walk in shuffled:
        path = path_text(walk.asked)
        ranked.append((rank[path], walk))
        rank[path] += 1
    return [walk for _, walk in sorted(ranked, key=lambda pair: pair[0])]


@dataclass
class Deducer:
    """Derives and judges the deductive consequences of edits over one KG.

    Args:
        triples: the factual KG triples (``kg_triples`` columns s, p, o,
            o_is_literal, o_lang).
        vocabulary: the axioms.
        walkable: the steps a walk may take over unchanged KG triples (a question
            can word them: a template names the relation, or its converse).
        classed: predicates whose wording names the class of the entity a step
            reaches ("the city where Y has its headquarters"), with those classes: a
            step before the edit over one names one entity only when the entity is
            of one of them ("the place where Y has its headquarters" could be its
            city or its country).
        types: entity IRI -> its rdf:type classes.
        aliases: entity IRI -> its other names.
    """

    triples: pd.DataFrame
    vocabulary: Vocabulary
    walkable: frozenset[Step] = frozenset()
    classed: Mapping[str, frozenset[str]] = field(default_factory=dict)
    types: Mapping[str, set[str]] = field(default_factory=dict)
    aliases: Mapping[str, Sequence[str]] = field(default_factory=dict)
    settings: DeductionSettings = field(default_factory=DeductionSettings)
    skipped: Counter = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.index = TripleIndex(
            self.triples, self.walkable, self.settings.intermediate_node_marker
        )
        self.store = WorldStore(self.triples, self.vocabulary)
        # what each fact says of its entities' classes (Deducer._not_of)
        self._evidence: dict[str, list[tuple[Triple, frozenset[str]]]] = defaultdict(
            list
        )
        for s, p, o, literal in zip(
            self.triples["s"],
            self.triples["p"],
            self.triples["o"],
            self.triples["o_is_literal"],
            strict=True,
        ):
            triple = Triple(s, p, Term(o, bool(literal)))
            if domain := self.vocabulary.domains.get(p):
                self._evidence[s].append((triple, domain))
            if not literal and (range_ := self.vocabulary.ranges.get(p)):
                self._evidence[o].append((triple, range_))
        facts = self.triples.drop_duplicates(["s", "p", "o"]).groupby("p")
        self._functionality: dict[str, tuple[float, float]] = defaultdict(
            lambda: (0.0, 0.0),
            {
                str(p): (
                    rows["s"].nunique() / len(rows),
                    rows["o"].nunique() / len(rows),
                )
                for p, rows in facts
            },
        )

    # -- the walks --------------------------------------------------------------

    def _after(self, walk: Walk, budget: int, edited: set[Triple]) -> Iterator[Walk]:
        """``walk`` extended by up to ``budget`` unchanged KG steps after its end."""
        if budget == 0 or walk.end.literal:
            return
        visited = (
            {walk.start}
            | {t.s for t in walk.triples}
            | {t.o.value for t in walk.triples}
        )
        for step, triple in self.index.steps_from(walk.end.value):
            reached = triple.s if step[1] else triple.o.value
            if triple in edited or reached in visited:
                continue
            longer = replace(
                walk,
                steps=(*walk.steps, step),
                triples=(*walk.triples, triple),
                asked=(*walk.asked, step),
            )
            yield longer
            yield from self._after(longer, budget - 1, edited)

    def compositions(self, edit: EditTriples) -> Iterator[Walk]:
        """Walks over the edit's new triple and at least one unchanged KG triple."""
        budget = self.settings.composition_steps
        edited = self._edited_triples(edit)
        for predicate in edit.predicates:
            step = (predicate, False)
            new = Triple(edit.subject, predicate, edit.new)
            seed = Walk("composition", edit.subject, (step,), (new,), (step,))
            yield from self._after(seed, budget, edited)
            # before the edit: entities whose walk reaches the subject
            frontier = [(edit.subject, (), ())]
            for used in range(1, budget + 1):
                reached = []
                for entity, steps, walked in frontier:
                    for start, before, triple in self.index.steps_into(entity):
                        if (
                            triple in edited
                            or start == edit.subject
                            or not self._designates(before, entity)
                        ):
                            continue
                        path = ((before, *steps), (triple, *walked))
                        reached.append((start, *path))
                        walk = Walk(
                            "composition",
                            start,
                            (*path[0], step),
                            (*path[1], new),
                            (*path[0], step),
                        )
                        yield walk
                        yield from self._after(walk, budget - used, edited)
                frontier = reached

    def _designates(self, step: Step, reached: str) -> bool:
        """Whether a step before the edit, reaching ``reached``, names one entity
        ("the spouse of Y"): its relation is functional by an axiom, or nearly so on
        the KG (its AMIE functionality, #subjects / #facts, or for a backward step
        #objects / #facts, reaches ``designating_functionality``). The start of such
        a step is seldom an entity whose every fact the KG holds (a 1-hop subgraph
        has only its edges to the edited entities), so a single stored value does
        not show a single value in the world: Adidas serves many regions, the
        subgraph of Chad states one. A ``classed`` relation also needs the class of
        ``reached`` its wording names (a headquarters is a city, a region and a
        country at once)."""
        predicate, backward = step
        wanted = self.classed.get(predicate)
        if (
            wanted is not None
            and not backward
            and self.node_class(reached) not in wanted
        ):
            self.skipped["deductive: designating step reaches no worded class"] += 1
            return False
        if not backward and predicate in self.vocabulary.functional:
            return True
        return (
            self._functionality[predicate][int(backward)]
            >= self.settings.designating_functionality
        )

    def _edited_triples(self, edit: EditTriples) -> set[Triple]:
        """The stored triples the edit removes, in the new world or the old one: no
        walk may rest on them."""
        replaced = set()
        for use_new in (True, False):
            for quad in self.store.changes(edit, use_new)[0]:
                obj = quad.object
                replaced.add(
                    Triple(
                        quad.subject.value,
                        quad.predicate.value,
                        Term(obj.value, isinstance(obj, ox.Literal)),
                    )
                )
        return replaced

    def converses(self, edit: EditTriples) -> Iterator[Walk]:
        """The edit's triple walked backward from its new object, where an axiom
        makes the relation symmetric or names its inverse."""
        if edit.new.literal:
            return
        for predicate in edit.predicates:
            new = Triple(edit.subject, predicate, edit.new)
            back = (predicate, True)
            if predicate in self.vocabulary.symmetric:
                yield Walk(
                    "symmetric", edit.new.value, (back,), (new,), ((predicate, False),)
                )
            for inverse in sorted(self.vocabulary.inverses.get(predicate, ())):
                yield Walk(
                    "inverse", edit.new.value, (back,), (new,), ((inverse, False),)
                )

    def subject_aliases(self, edit: EditTriples) -> Iterator[Walk]:
        """The edited question asked of the subject's other names."""
        names = list(self.aliases.get(edit.subject, ()))[: self.settings.max_aliases]
        for predicate in edit.predicates:
            step = (predicate, False)
            new = Triple(edit.subject, predicate, edit.new)
            for name in names:
                yield Walk(
                    "subject_alias",
                    edit.subject,
                    (step,),
                    (new,),
                    (step,),
                    start_label=name,
                )

    def axiom_rules(
        self, edit: EditTriples, rules: Sequence[AxiomRule]
    ) -> Iterator[Walk]:
        """Mined rules the axioms entail (``axiom_rule``), applied to the edit: the
        head asked of the subject (a sub- or equivalent property), of the new object
        (an inverse, a symmetric property), or through one more stored triple (a
        transitive one)."""
        edited = self._edited_triples(edit)
        for rule in rules:
            for predicate in edit.predicates:
                if predicate not in rule.premises:
                    continue
                new = Triple(edit.subject, predicate, edit.new)
                asked = ((rule.conclusion, False),)
                if rule.transitive:
                    seed = Walk(
                        "axiom", edit.subject, ((predicate, False),), (new,), asked
                    )
                    for longer in self._after(seed, 1, edited):
                        if longer.steps[-1] == (predicate, False):
                            yield replace(longer, asked=asked, rule_id=rule.rule_id)
                elif not rule.flipped:
                    yield Walk(
                        "axiom",
                        edit.subject,
                        ((predicate, False),),
                        (new,),
                        asked,
                        rule.rule_id,
                    )
                elif not edit.new.literal:
                    yield Walk(
                        "axiom",
                        edit.new.value,
                        ((predicate, True),),
                        (new,),
                        asked,
                        rule.rule_id,
                    )

    # -- judging ----------------------------------------------------------------

    def judge(self, edit: EditTriples, walks: Sequence[Walk]) -> list[Deduction]:
        """Each walk's status and answers, in the edited and the old world."""
        judged: list[tuple[Walk, str, str | None, Term | None]] = []
        with self.store.world(edit, use_new=True):
            for walk in walks:
                judged.append((walk, *self._judge_new(walk)))
        results = []
        with self.store.world(edit, use_new=False):
            for walk, status, reason, answer in judged:
                if answer is None:
                    continue
                olds = self.store.answers(walk.start, walk.asked)
                old = next(iter(olds)) if len(olds) == 1 else None
                if old is not None and old.value == answer.value:
                    self.skipped["deductive: answer unchanged"] += 1
                    continue
                classes = tuple(
                    None
                    if t.o.literal and not back
                    else self.node_class(t.s if back else t.o.value)
                    for t, (_, back) in zip(walk.triples, walk.steps, strict=True)
                )
                results.append(Deduction(walk, status, reason, answer, old, classes))
        return results

    def _judge_new(self, walk: Walk) -> tuple[str, str | None, Term | None]:
        """(status, reason, answer) in the edited world; answer None when the walk
        itself is not in the edited world (counted)."""
        for length, (triple, (_, backward)) in enumerate(
            zip(walk.triples, walk.steps, strict=True), start=1
        ):
            node = Term(triple.s) if backward else triple.o
            values = self.store.answers(walk.start, walk.steps[:length])
            if node not in values:
                self.skipped["deductive: walk not in the edited world"] += 1
                return "additive", None, None
            if len(values) > 1:
                return (
                    "additive",
                    f"additive: {path_text(walk.steps[:length])} has {len(values)} "
                    "values in the edited world",
                    walk.end,
                )
        asked = self.store.answers(walk.start, walk.asked)
        if asked != {walk.end}:
            return (
                "additive",
                f"additive: the question's relation {path_text(walk.asked)} has "
                f"{len(asked)} values in the edited world",
                walk.end,
            )
        bad = self._ill_typed(walk)
        if bad:
            return "ill_typed", f"ill_typed: {bad}", walk.end
        return "entailed", None, walk.end

    def _ill_typed(self, walk: Walk) -> str | None:
        """Why the walk's question is ill-typed, or None: a walked triple whose
        subject (object) is not of its predicate's domain (range), or a node where
        the class one step implies (a range) and the class the next step needs (a
        domain) are neither the same nor one below the other ("the leader of the
        mouth mountain of a creek")."""
        vocabulary = self.vocabulary
        for triple in walk.triples:
            ends = [(triple.s, vocabulary.domains.get(triple.p, frozenset()))]
            if not triple.o.literal:
                ends.append(
                    (triple.o.value, vocabulary.ranges.get(triple.p, frozenset()))
                )
            for entity, wanted in ends:
                bad = self._not_of(entity, wanted, set(walk.triples))
                if bad:
                    return (
                        f"{local_name(entity)} {bad}, as {local_name(triple.p)} needs"
                    )
        for (before, back_before), (after, back_after) in pairwise(walk.steps):
            reached = (vocabulary.domains if back_before else vocabulary.ranges).get(
                before, frozenset()
            )
            needed = (vocabulary.ranges if back_after else vocabulary.domains).get(
                after, frozenset()
            )
            if not vocabulary.compatible(reached, needed):
                return (
                    f"{local_name(before)} reaches {_names(reached)}, "
                    f"{local_name(after)} needs {_names(needed)}"
                )
        return None

    def _not_of(
        self, entity: str, wanted: frozenset[str], walked: set[Triple]
    ) -> str | None:
        """Why ``entity`` is not of the ``wanted`` classes, or None.

        An entity the KG types (rdf:type) is judged by its types
        (``Vocabulary.conforms``). An untyped one (the paper's DBpedia dump states no
        rdf:type) by what its other facts say of it, the domains of the relations it
        is the subject of and the ranges of those it is the object of (RDFS's
        reading of a relation's domain and range): it is not of a wanted class when
        more of those facts name a class that cannot be it (neither the same nor one
        above or below it) than name it or a class below it. One stray fact does not
        outvote an entity's others: Mongolia, the object of 40 `country` facts, is
        not the City that "the capital of Xianbei state" needs.
        """
        vocabulary = self.vocabulary
        if not wanted:
            return None
        types = self.types.get(entity)
        if types:
            if vocabulary.conforms(types, wanted):
                return None
            return f"is {_names(types)}, not {_names(wanted)}"
        evidence: Counter = Counter()
        for triple, classes in self._evidence.get(entity, ()):
            if triple not in walked:
                evidence.update(classes)
        for needed in wanted:
            below = sum(
                n
                for cls, n in evidence.items()
                if cls == needed or needed in vocabulary.super_classes.get(cls, ())
            )
            against = {
                cls: n
                for cls, n in evidence.items()
                if not vocabulary.compatible({cls}, {needed})
            }
            if sum(against.values()) > below:
                named = ", ".join(f"{local_name(c)} by {n}" for c, n in against.items())
                return f"is named {named} of its facts, {local_name(needed)} by {below}"
        return None

    def node_class(self, entity: str) -> str | None:
        """The one most specific class the KG types ``entity`` with (rdf:type), or
        None: a question may word a step by it ("the city where Apple Inc. has its
        headquarters"). What an untyped entity's facts say of it is evidence enough
        to refuse a class (``_not_of``), not to name one: in the paper's DBpedia
        subgraph Jersey would be a city."""
        supers = self.vocabulary.super_classes
        types = self.types.get(entity, set())
        specific = [
            cls for cls in types if not any(cls in supers.get(o, ()) for o in types)
        ]
        return specific[0] if len(specific) == 1 else None

    def edited_values(self, edit: EditTriples) -> int:
        """How many values the edited relation has for the subject in the edited
        world, by its predicate with fewest (more than one: every walk through the
        edit is additive)."""
        with self.store.world(edit, use_new=True):
            return min(
                len(self.store.answers(edit.subject, [(p, False)]))
                for p in edit.predicates
            )

    def deduce(
        self,
        case_id: str,
        edit: EditTriples,
        axiom_rules: Sequence[AxiomRule] = (),
    ) -> list[Deduction]:
        """Every deductive consequence of ``edit``: at most ``max_candidates`` walks
        of each kind judged, at most ``max_per_kind`` of each kind probed (both in a
        seeded order), the others kept with their status."""
        by_kind: dict[str, dict[tuple, Walk]] = defaultdict(dict)
        sources = [
            self.compositions(edit),
            self.converses(edit),
            self.subject_aliases(edit),
            self.axiom_rules(edit, axiom_rules),
        ]
        seen: set[tuple] = set()
        for source in sources:
            for walk in source:
                key = (walk.start, walk.start_label, walk.asked)
                if key not in seen:
                    seen.add(key)
                    by_kind[walk.kind][key] = walk
        results = []
        for kind, walks in sorted(by_kind.items()):
            ordered = _seeded_order(walks.values(), case_id, self.settings.seed)
            if len(ordered) > self.settings.max_candidates:
                self.skipped[f"deductive {kind}: walks beyond max_candidates"] += (
                    len(ordered) - self.settings.max_candidates
                )
            judged = self.judge(edit, ordered[: self.settings.max_candidates])
            probed = 0
            for item in judged:
                if item.status == "entailed":
                    if probed == self.settings.max_per_kind:
                        self.skipped[f"deductive {kind}: beyond max_per_kind"] += 1
                        continue
                    probed += 1
                results.append(item)
        return results
