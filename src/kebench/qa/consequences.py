"""Derive the logical consequences of an edit from Horn rules over the KG.

An edit a = (s, r, o) -> a' = (s, r, o'). For each rule with an atom of relation r in
its body, the edited atom is unified with that body atom under the new object, the rest
of the body is satisfied by KG facts (the KG with the edit applied), and the head gives
the consequence (s_c, r_c, o'_c). The old answer o_c is derived the same way from the
old object on the unedited KG, else read from the KG.

Entities and relations are handled as AMIE local names, the names rules are mined on.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pandas as pd

from kebench.kg.amie_export import amie_term, local_name

Atom = tuple[str, str, str]


@dataclass(frozen=True)
class Entity:
    """A KG entity: its local name (as in rules), IRI and label."""

    local: str
    iri: str
    label: str


class KgIndex:
    """Subject and object indexes of the KG's triples, by relation local name.

    Objects are named as in AMIE's input (``amie_term``), so literal objects take part
    when the rules were mined with literals (e.g. ``leaderName  Eric_Adams``).
    """

    def __init__(self, kg_triples: pd.DataFrame) -> None:
        self.forward: dict[str, dict[str, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self.backward: dict[str, dict[str, set[str]]] = defaultdict(
            lambda: defaultdict(set)
        )
        self.entities: dict[str, Entity] = {}
        for s, p, o, is_literal, s_label, o_label in zip(
            kg_triples["s"],
            kg_triples["p_local"],
            kg_triples["o"],
            kg_triples["o_is_literal"],
            kg_triples["s_label"],
            kg_triples["o_label"],
            strict=True,
        ):
            s_local, o_local = local_name(s), amie_term(o, is_literal)
            self.forward[p][s_local].add(o_local)
            self.backward[p][o_local].add(s_local)
            self.entities.setdefault(s_local, Entity(s_local, s, s_label))
            self.entities.setdefault(o_local, Entity(o_local, o, o_label))

    def relations(self) -> set[str]:
        return set(self.forward)

    def objects(self, subject: str, relation: str) -> set[str]:
        return self.forward.get(relation, {}).get(subject, set())

    def subjects(self, obj: str, relation: str) -> set[str]:
        return self.backward.get(relation, {}).get(obj, set())

    def has(self, subject: str, relation: str, obj: str) -> bool:
        return obj in self.objects(subject, relation)


@dataclass(frozen=True)
class EditedFact:
    """The edited triple, in local names: (subject, relation, old object, new object).

    ``retracted_new`` and ``retracted_old`` are the stored facts that state the
    replaced value again (its symmetric twin, inverse, sub- or equivalent property:
    ``kebench.qa.deduction.WorldStore.changes``), absent from the new world and from
    the old one: no consequence rests on them.
    """

    subject: str
    relation: str
    old: str
    new: str
    retracted_new: frozenset[tuple[str, str, str]] = frozenset()
    retracted_old: frozenset[tuple[str, str, str]] = frozenset()


@dataclass
class EditedKg:
    """The KG in one world of an edit: (s, r) has exactly the edit's value there.

    In the new world (s, r, old) is removed and (s, r, new) added; in the old world the
    reverse. Both are needed because a KG may already hold either fact (DBpedia holds
    the post-update value of MQuAKE-T's temporal edits).
    """

    kg: KgIndex
    edit: EditedFact | None = None
    use_new: bool = True

    @property
    def _value(self) -> str:
        assert self.edit is not None
        return self.edit.new if self.use_new else self.edit.old

    def objects(self, subject: str, relation: str) -> set[str]:
        objects = self.kg.objects(subject, relation)
        if self.edit is None or (subject, relation) != (
            self.edit.subject,
            self.edit.relation,
        ):
            return objects
        return (objects - {self.edit.old, self.edit.new}) | {self._value}

    def facts(self, relation: str) -> Iterator[Atom]:
        for subject in sorted(self.kg.forward.get(relation, {})):
            for obj in sorted(self.objects(subject, relation)):
                yield subject, relation, obj

    def subjects(self, obj: str, relation: str) -> set[str]:
        found = set(self.kg.subjects(obj, relation))
        if self.edit is not None and relation == self.edit.relation:
            if obj in (self.edit.old, self.edit.new):
                found.discard(self.edit.subject)
            if obj == self._value:
                found.add(self.edit.subject)
        return found


@dataclass(frozen=True)
class Derivation:
    """One consequence of an edit under one rule."""

    rule_id: str
    matched_atom: int
    bindings: dict[str, str]
    head: Atom  # bound: (subject, relation, object)
    path: tuple[Atom, ...]  # bound body atoms, the edited one included


def _bind(atom: Atom, bindings: dict[str, str]) -> Atom:
    s, r, o = atom
    return (bindings.get(s, s), r, bindings.get(o, o))


class World(Protocol):
    """What ``solve`` reads: a KG as it stands in one world."""

    def objects(self, subject: str, relation: str) -> set[str]: ...

    def subjects(self, obj: str, relation: str) -> set[str]: ...

    def facts(self, relation: str) -> Iterator[Atom]: ...


def solve(
    atoms: Sequence[Atom], bindings: dict[str, str], world: World
) -> Iterator[dict[str, str]]:
    """Every extension of ``bindings`` under which all ``atoms`` hold in ``world``."""
    if not atoms:
        yield bindings
        return
    # an atom with a bound variable first: the others would scan a whole relation
    first = next(
        (i for i, (sv, _, ov) in enumerate(atoms) if sv in bindings or ov in bindings),
        0,
    )
    s_var, relation, o_var = atoms[first]
    rest = [*atoms[:first], *atoms[first + 1 :]]
    s, o = bindings.get(s_var), bindings.get(o_var)
    if s is not None and o is not None:
        pairs = [(s, o)] if o in world.objects(s, relation) else []
    elif s is not None:
        pairs = [(s, obj) for obj in sorted(world.objects(s, relation))]
    elif o is not None:
        pairs = [(subj, o) for subj in sorted(world.subjects(o, relation))]
    else:  # only when no atom shares a bound variable
        pairs = [(f[0], f[2]) for f in world.facts(relation)]
    for subj, obj in pairs:
        if s_var == o_var and subj != obj:
            continue
        yield from solve(rest, {**bindings, s_var: subj, o_var: obj}, world)


@dataclass
class ConsequenceFinder:
    """Applies rules to edits over one KG."""

    kg: KgIndex
    rules: pd.DataFrame  # the `rules` table: rule_id, body, head
    max_per_rule: int = 20
    skipped: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self) -> None:
        self._by_relation: dict[str, list[tuple[str, list[Atom], Atom]]] = defaultdict(
            list
        )
        known = self.kg.relations()
        for rule_id, body, head in zip(
            self.rules["rule_id"], self.rules["body"], self.rules["head"], strict=True
        ):
            atoms = [tuple(atom) for atom in body]
            if any(atom[1] not in known for atom in [*atoms, tuple(head)]):
                self.skipped["rule names a relation absent from the KG"] += 1
                continue
            for relation in {atom[1] for atom in atoms}:
                self._by_relation[relation].append((rule_id, atoms, tuple(head)))

    def derive(self, edit: EditedFact, use_new: bool = True) -> list[Derivation]:
        """Consequences of ``edit`` (under the new object, or the old one on the unedited KG)."""
        world = EditedKg(self.kg, edit, use_new)
        value = edit.new if use_new else edit.old
        derivations = []
        for rule_id, atoms, head in self._by_relation.get(edit.relation, []):
            for index, (s_var, relation, o_var) in enumerate(atoms):
                if relation != edit.relation or s_var == o_var:
                    continue
                rest = atoms[:index] + atoms[index + 1 :]
                seed = {s_var: edit.subject, o_var: value}
                for count, bindings in enumerate(solve(rest, seed, world)):
                    if count >= self.max_per_rule:
                        break
                    derivations.append(
                        Derivation(
                            rule_id=rule_id,
                            matched_atom=index,
                            bindings=bindings,
                            head=_bind(head, bindings),
                            path=tuple(_bind(atom, bindings) for atom in atoms),
                        )
                    )
        return derivations


def subject_chain(
    atoms: Sequence[Atom], start: str, goal: str
) -> list[tuple[str, str, str]] | None:
    """How to walk from variable ``start`` to ``goal`` over body atoms.

    Returns:
        ``[(relation, "out" | "in", variable reached), ...]`` (``out``: follow s -> o),
        ``[]`` when the two are the same variable, or None when no path joins them.
    """
    frontier: list[tuple[str, list[tuple[str, str, str]]]] = [(start, [])]
    seen = {start}
    while frontier:
        var, steps = frontier.pop(0)
        if var == goal:
            return steps
        for s_var, relation, o_var in atoms:
            for here, there, direction in ((s_var, o_var, "out"), (o_var, s_var, "in")):
                if here == var and there not in seen:
                    seen.add(there)
                    frontier.append((there, [*steps, (relation, direction, there)]))
    return None


@dataclass(frozen=True)
class EntailedFact:
    """A consequence whose answer changes with the edit: o_c (old) -> o'_c (new)."""

    rule_id: str
    bindings: dict[str, str]
    subject: str  # the consequence's subject (local name)
    relation: str  # the consequence's relation (local name)
    answer_old: str
    answer_new: str
    # (relation, "out" | "in" | "named", entity) from the edit's subject; only "out"
    # steps are described in the question, the others name their entity.
    chain: list[tuple[str, str, str]]
    path: tuple[Atom, ...]  # supporting facts, the edited one included
    # the KG facts the derivation rests on (neither the edit nor a derived fact)
    premises: tuple[Atom, ...] = ()
    status: str = "entailed"  # see kebench.qa.closure.STATUSES
    reason: str | None = None
    depth: int = 1  # rule applications from the edit


def entailed_facts(
    finder: ConsequenceFinder,
    edit: EditedFact,
    rules_by_id: dict[str, tuple[list[Atom], Atom]],
) -> list[EntailedFact]:
    """The consequences of ``edit`` whose answer differs between the old and new worlds.

    A consequence about an entity reached from the edited subject is asked through that
    chain ("the country of citizenship of the spouse of X"); its old answer is the same
    rule applied in the old world (same rule, same unified atom, same consequence
    subject), preferring a value the KG also states, else the KG's fact. A consequence
    about the new object itself (e.g. citizenship(new head of state, country)) is asked
    about that entity by name, and its old answer is the KG's fact.
    """
    old_derivations = finder.derive(edit, use_new=False)
    facts: dict[tuple[str, str, str], EntailedFact] = {}
    for new in finder.derive(edit, use_new=True):
        atoms, head = rules_by_id[new.rule_id]
        matched_s, matched_relation, matched_o = atoms[new.matched_atom]
        subject, relation, answer = new.head
        in_kg = set(finder.kg.objects(subject, relation))
        olds = in_kg
        if head[0] == matched_o:
            chain = [(matched_relation, "named", subject)]
        else:
            steps = subject_chain(atoms, matched_s, head[0])
            if steps is None:
                finder.skipped["consequence not reachable from the edited subject"] += 1
                continue
            chain = [
                (rel, direction, new.bindings[var]) for rel, direction, var in steps
            ]
            olds = {
                old.head[2]
                for old in old_derivations
                if (old.rule_id, old.matched_atom, old.head[0])
                == (new.rule_id, new.matched_atom, subject)
            } or in_kg
        if not olds:
            finder.skipped["no old answer"] += 1
        elif answer in olds:
            finder.skipped["answer unchanged"] += 1
        else:
            facts.setdefault(
                new.head,
                EntailedFact(
                    rule_id=new.rule_id,
                    bindings=new.bindings,
                    subject=subject,
                    relation=relation,
                    answer_old=sorted(olds & in_kg or olds)[0],
                    answer_new=answer,
                    chain=chain,
                    path=new.path,
                    premises=tuple(
                        atom
                        for atom in new.path
                        if atom != (edit.subject, edit.relation, edit.new)
                    ),
                ),
            )
    return list(facts.values())
