"""The edited world: the closure of KG + edits under the QA rules (``consistent`` semantics).

The paper applies each rule once, to "KG + this one edit", and never checks a
consequence against the edit's other consequences: "Joe Biden was born in Dublin"
yields both "Biden is a citizen of Ireland" and "Dublin is in the United States" (the
latter from Biden's *old* citizenship). Here the edited world is computed as a whole:

- **Forward chaining to a fixpoint.** Starting from the edits, every rule grounding
  that uses at least one *changed* fact (an edit, or a fact derived from one) concludes
  its head; derived facts are chained on, up to ``max_depth`` rule applications.
- **Functional relations are single-valued.** A relation is functional when AMIE's
  functionality, #distinct subjects / #facts, reaches ``functional_threshold`` on the
  KG. A derived value of a functional (subject, relation) *replaces* the KG's values.
- **No stale premise.** A KG fact whose functional (subject, relation) the edits change
  is not in the edited world, so no grounding may use it. Which keys change depends on
  which groundings are valid, so the closure is recomputed, with the changed keys of
  the previous round removed from the KG, until the set of changed keys is stable.
- **Status.** ``entailed``: the edit-dependent groundings of a functional (subject,
  relation) agree. ``conflicting``: they give it different values (the key is then
  removed from the world, and nothing is chained from it). ``contested``: groundings of
  the *same rule* that use no changed fact conclude another value for that (subject,
  relation), in at least ``contest_share`` of all its groundings there (other alumni of
  a university keep its country when one alumnus changes citizenship); a contested
  value is not applied to the world. ``additive``: the relation is not functional, so
  the old answer stays true beside the new one (it is a KG fact, or still derived) and
  new-vs-old is no test of it; a non-functional consequence whose old answer only the
  old world derives (the leader of a town, from its country's edited leader) is judged
  like any other.

Facts are (subject, relation, object) in AMIE local names, as the rules are mined on.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from kebench.qa.consequences import (
    Atom,
    EditedFact,
    EntailedFact,
    KgIndex,
    solve,
    subject_chain,
)

Fact = tuple[str, str, str]
Key = tuple[str, str]
Rule = tuple[str, list[Atom], Atom]  # rule_id, body, head

STATUSES = ("entailed", "conflicting", "contested", "additive")


def functional_relations(kg: KgIndex, threshold: float) -> set[str]:
    """Relations whose AMIE functionality (#subjects / #facts) is at least ``threshold``."""
    functional = set()
    for relation, by_subject in kg.forward.items():
        facts = sum(len(objects) for objects in by_subject.values())
        if facts and len(by_subject) / facts >= threshold:
            functional.add(relation)
    return functional


@dataclass(frozen=True)
class ClosureSettings:
    """How the edited world is computed (``consequences`` in qa_generation.yml)."""

    max_depth: int = 2
    functional_threshold: float = 0.9
    contest_share: float = 0.5
    max_rounds: int = 10
    max_groundings_per_rule: int = 20


@dataclass(frozen=True)
class Grounding:
    """One rule grounding whose premises hold in the edited world."""

    rule_id: str
    atoms: tuple[Atom, ...]  # the rule's body
    head_atom: Atom
    bindings: tuple[tuple[str, str], ...]
    premises: tuple[Fact, ...]  # the bound body atoms, in rule order
    trigger: int  # index of the changed premise it was derived from

    @property
    def head(self) -> Fact:
        bound = dict(self.bindings)
        s, r, o = self.head_atom
        return bound.get(s, s), r, bound.get(o, o)


@dataclass
class DerivedFact:
    """A fact of the edited world that the edits change, and how it was reached."""

    fact: Fact
    status: str
    reason: str | None
    depth: int
    grounding: Grounding | None  # None for an edit itself
    groundings: list[Grounding] = field(default_factory=list)
    # (relation, "out" | "in" | "named", entity) from the edited subject; None when
    # the fact's subject cannot be reached from it
    chain: list[tuple[str, str, str]] | None = None
    premises: tuple[Fact, ...] = ()  # the KG facts the derivation rests on
    fresh: bool = True  # the world did not already hold it
    contest: tuple[str, str | None] = ("entailed", None)  # see EditedWorld._contest


class _World:
    """KG with some keys removed and some facts added, read like ``KgIndex``."""

    def __init__(self, kg: KgIndex, removed_keys: set[Key], removed: set[Fact]):
        self.kg = kg
        self.removed_keys = removed_keys
        self.removed = removed
        self.added: dict[Key, set[str]] = defaultdict(set)
        self.added_backward: dict[tuple[str, str], set[str]] = defaultdict(set)

    def add(self, fact: Fact) -> None:
        s, r, o = fact
        self.added[(s, r)].add(o)
        self.added_backward[(o, r)].add(s)

    def is_changed(self, fact: Fact) -> bool:
        s, r, o = fact
        return o in self.added.get((s, r), ())

    def objects(self, subject: str, relation: str) -> set[str]:
        key = (subject, relation)
        base = set() if key in self.removed_keys else self.kg.objects(*key)
        base = {o for o in base if (subject, relation, o) not in self.removed}
        return base | self.added.get(key, set())

    def subjects(self, obj: str, relation: str) -> set[str]:
        base = {
            s
            for s in self.kg.subjects(obj, relation)
            if (s, relation) not in self.removed_keys
            and (s, relation, obj) not in self.removed
        }
        return base | self.added_backward.get((obj, relation), set())

    def facts(self, relation: str) -> Iterator[Fact]:
        subjects = set(self.kg.forward.get(relation, {})) | {
            s for s, r in self.added if r == relation
        }
        for s in sorted(subjects):
            for o in sorted(self.objects(s, relation)):
                yield s, relation, o


def _bind(atom: Atom, bindings: dict[str, str]) -> Fact:
    s, r, o = atom
    return bindings.get(s, s), r, bindings.get(o, o)


class EditedWorld:
    """The closure of a KG and a set of edits under rules (see the module docstring).

    Several edits may act together (a batch, a sequence): they are one world.
    """

    def __init__(
        self,
        kg: KgIndex,
        rules: Iterable[Rule],
        settings: ClosureSettings = ClosureSettings(),
        functional: set[str] | None = None,
    ) -> None:
        self.kg = kg
        self.settings = settings
        self.functional = (
            functional_relations(kg, settings.functional_threshold)
            if functional is None
            else functional
        )
        self.by_relation: dict[str, list[tuple[str, list[Atom], Atom]]] = defaultdict(
            list
        )
        for rule_id, body, head in rules:
            for relation in {atom[1] for atom in body}:
                self.by_relation[relation].append((rule_id, list(body), head))
        self.rules = {rule_id: (list(body), head) for rule_id, body, head in rules}
        self.notes: Counter = Counter()

    # -- one round: forward chaining with a fixed set of removed keys --------------

    def _groundings_from(self, fact: Fact, world: _World) -> Iterator[Grounding]:
        """Groundings of every rule that use ``fact`` for one of their body atoms."""
        subject, relation, obj = fact
        for rule_id, atoms, head in self.by_relation.get(relation, []):
            for index, (s_var, atom_relation, o_var) in enumerate(atoms):
                if atom_relation != relation or s_var == o_var:
                    continue
                rest = atoms[:index] + atoms[index + 1 :]
                found = solve(rest, {s_var: subject, o_var: obj}, world)
                for count, bindings in enumerate(found):
                    if count >= self.settings.max_groundings_per_rule:
                        self.notes["groundings capped per rule"] += 1
                        break
                    yield Grounding(
                        rule_id=rule_id,
                        atoms=tuple(atoms),
                        head_atom=head,
                        bindings=tuple(sorted(bindings.items())),
                        premises=tuple(_bind(a, bindings) for a in atoms),
                        trigger=index,
                    )

    def _independent_against(
        self, grounding: Grounding, value: str, world: _World
    ) -> int:
        """Groundings of the same rule for the same head subject that use no changed
        fact and conclude another value than ``value``."""
        head_s, _, head_o = grounding.head_atom
        subject = dict(grounding.bindings)[head_s]
        against = 0
        for bindings in solve(grounding.atoms, {head_s: subject}, world):
            premises = [_bind(a, bindings) for a in grounding.atoms]
            if not any(world.is_changed(p) for p in premises):
                against += bindings.get(head_o, head_o) != value
        return against

    def _round(
        self, edits: Sequence[EditedFact], removed_keys: set[Key]
    ) -> dict[Fact, DerivedFact]:
        """Forward chaining from ``edits`` with ``removed_keys`` out of the KG."""
        edit_keys = {(e.subject, e.relation) for e in edits}
        world = _World(
            self.kg,
            removed_keys | {k for k in edit_keys if k[1] in self.functional},
            {(e.subject, e.relation, e.old) for e in edits}.union(
                *(e.retracted_new for e in edits)
            ),
        )
        derived: dict[Fact, DerivedFact] = {}
        frontier = []
        for edit in edits:
            fact = (edit.subject, edit.relation, edit.new)
            world.add(fact)
            derived[fact] = DerivedFact(fact, "edit", None, 0, None, chain=[])
            frontier.append(fact)
        for depth in range(1, self.settings.max_depth + 1):
            by_key: dict[Key, dict[str, list[Grounding]]] = defaultdict(
                lambda: defaultdict(list)
            )
            for fact in frontier:
                for grounding in self._groundings_from(fact, world):
                    s, r, o = grounding.head
                    if (s, r) in edit_keys:
                        self.notes["consequence about an edited fact itself"] += 1
                    else:
                        by_key[(s, r)][o].append(grounding)
            frontier = [
                fact
                for key in sorted(by_key)
                for fact in self._settle(key, by_key[key], depth, world, derived)
            ]
            for fact in frontier:
                world.add(fact)
        self._inherit_status(derived)
        return derived

    def _settle(  # noqa: PLR0913 - one key's groundings and the round's state
        self,
        key: Key,
        values: dict[str, list[Grounding]],
        depth: int,
        world: _World,
        derived: dict[Fact, DerivedFact],
    ) -> list[Fact]:
        """Record each value derived for one (subject, relation) with its status.

        Values equal to what the world already says are recorded too (a KG may hold
        the post-edit world), but only new, entailed values are chained on. Returns
        the facts to add to the world.
        """
        current = world.objects(*key)
        for value, groundings in sorted(values.items()):
            fact = (*key, value)
            if fact not in derived:
                item = DerivedFact(
                    fact, "entailed", None, depth, groundings[0], list(groundings)
                )
                item.fresh = value not in current
                # judged once, in the world where it was first derived; another
                # value of a relation that is not functional contradicts nothing
                if key[1] in self.functional:
                    item.contest = self._contest(groundings, value, world)
                derived[fact] = item
        items = [
            derived[f] for f in sorted(derived) if f[:2] == key and derived[f].depth
        ]
        # a contested value is not believed, so it conflicts with nothing
        believed = [i for i in items if i.contest[0] == "entailed"]
        fresh = []
        for item in items:
            if item.contest[0] == "contested":
                item.status, item.reason = item.contest
            elif len(believed) > 1 and key[1] in self.functional:
                others = ", ".join(i.fact[2] for i in believed if i is not item)
                item.status, item.reason = "conflicting", f"also derived: {others}"
            if item.depth == depth and item.fresh and item.status == "entailed":
                fresh.append(item.fact)
        return fresh

    @staticmethod
    def _inherit_status(derived: dict[Fact, DerivedFact]) -> None:
        """A fact derived from a premise that turned out not to be entailed (a later
        depth found a conflict) is not entailed either."""
        for item in sorted(derived.values(), key=lambda i: i.depth):
            if item.grounding is None or item.status != "entailed":
                continue
            for premise in item.grounding.premises:
                if premise in derived and derived[premise].status not in (
                    "edit",
                    "entailed",
                ):
                    item.status = derived[premise].status
                    item.reason = f"rests on a {item.status} fact: {premise}"
                    break

    def _contest(
        self, groundings: list[Grounding], value: str, world: _World
    ) -> tuple[str, str | None]:
        """``contested`` when independent groundings of a deriving rule outweigh it."""
        by_rule: dict[str, list[Grounding]] = defaultdict(list)
        for grounding in groundings:
            by_rule[grounding.rule_id].append(grounding)
        for rule_id, own in sorted(by_rule.items()):
            against = self._independent_against(own[0], value, world)
            share = against / (against + len(own))
            if against and share >= self.settings.contest_share:
                return "contested", (
                    f"independent groundings: {against} of {against + len(own)} "
                    f"groundings of {rule_id} do not use the edit and conclude another "
                    "value"
                )
        return "entailed", None

    # -- the fixpoint over removed keys ----------------------------------------------

    def derive(self, edits: Sequence[EditedFact]) -> list[DerivedFact]:
        """The facts the edits change, each with its status, depth and derivation."""
        removed_keys: set[Key] = set()
        tried: list[set[Key]] = []
        for _ in range(self.settings.max_rounds):
            derived = self._round(edits, removed_keys)
            changed = self._changed_keys(derived)
            if changed == removed_keys:
                break
            if changed in tried:
                # Derivations that rest on each other's old values (two spouses taking
                # each other's citizenship) make the rounds cycle: keep the round that
                # sees the most derivations and mark what rests on a changed value.
                self.notes["rounds cycled (mutually stale derivations)"] += 1
                cycle = [*tried[tried.index(changed) :], removed_keys]
                derived = self._round(edits, min(cycle, key=len))
                break
            tried.append(removed_keys)
            removed_keys = changed
        else:
            self.notes["closure did not reach a fixpoint"] += 1
        self._mark_stale(derived)
        result = []
        for item in derived.values():
            if item.grounding is None:
                continue
            item.chain = self._chain(item, derived)
            item.premises = self._premises(item, derived)
            result.append(item)
        return result

    def _changed_keys(self, derived: dict[Fact, DerivedFact]) -> set[Key]:
        """Functional (subject, relation) pairs the round gives a new value."""
        return {
            fact[:2]
            for fact, item in derived.items()
            if item.depth
            and item.fresh
            and item.status in ("entailed", "conflicting")
            and fact[1] in self.functional
        }

    def _mark_stale(self, derived: dict[Fact, DerivedFact]) -> None:
        """An entailed fact whose derivation uses a KG value that the same edits change
        is not entailed (no consequence rests on a premise the edit changes)."""
        changed = self._changed_keys(derived)
        for item in sorted(derived.values(), key=lambda i: i.depth):
            if item.grounding is None or item.status != "entailed":
                continue
            for premise in item.grounding.premises:
                below = derived.get(premise)
                is_new = below is not None and (below.grounding is None or below.fresh)
                if not is_new and premise[:2] in changed:
                    item.status = "conflicting"
                    item.reason = f"rests on a value the edit changes: {premise}"
                    break
        self._inherit_status(derived)

    def _chain(
        self,
        item: DerivedFact,
        derived: dict[Fact, DerivedFact],
    ) -> list[tuple[str, str, str]] | None:
        """How the fact's subject is reached from the edited subject (see verbaliser)."""
        grounding = item.grounding
        assert grounding is not None
        trigger = grounding.premises[grounding.trigger]
        s_var, relation, o_var = grounding.atoms[grounding.trigger]
        subject = item.fact[0]
        head_var = grounding.head_atom[0]
        if head_var == o_var:
            return [(relation, "named", subject)]
        before = derived[trigger].chain
        steps = subject_chain(grounding.atoms, s_var, head_var)
        if before is None or steps is None:
            return None
        bindings = dict(grounding.bindings)
        return [*before, *((rel, d, bindings[var]) for rel, d, var in steps)]

    @staticmethod
    def _premises(
        item: DerivedFact, derived: dict[Fact, DerivedFact]
    ) -> tuple[Fact, ...]:
        """The KG facts under the derivation: premises that are neither an edit nor
        a new derived fact, gathered through the new premises' own derivations (a
        derived fact the KG already holds is a KG fact)."""
        leaves: list[Fact] = []
        stack, seen = [item], {item.fact}
        while stack:
            grounding = stack.pop().grounding
            if grounding is None:
                continue
            for premise in grounding.premises:
                below = derived.get(premise)
                if below is not None and (below.grounding is None or below.fresh):
                    if premise not in seen:
                        seen.add(premise)
                        stack.append(below)
                elif premise not in leaves:
                    leaves.append(premise)
        return tuple(leaves)


def _reverted(edit: EditedFact) -> EditedFact:
    """The same edit towards its old value: the old world's seed."""
    return EditedFact(
        edit.subject,
        edit.relation,
        edit.new,
        edit.old,
        retracted_new=edit.retracted_old,
        retracted_old=edit.retracted_new,
    )


def consistent_facts(
    world: EditedWorld, edits: Sequence[EditedFact], skipped: Counter
) -> list[EntailedFact]:
    """The consequences of ``edits`` whose answer differs between the old and new
    edited worlds, each with its status.

    The new answer is the new world's derived value; the old answer is the old
    world's (the closure from the edits' old values), else the KG's. Running both
    worlds handles a KG that already holds the new value (DBpedia and MQuAKE-T's
    temporal edits) as well as one that holds the old value.
    """
    old_world: dict[Key, set[str]] = defaultdict(set)
    for item in world.derive([_reverted(e) for e in edits]):
        if item.status == "entailed":
            old_world[item.fact[:2]].add(item.fact[2])
    new_world = world.derive(edits)
    new_values: dict[Key, set[str]] = defaultdict(set)
    for item in new_world:
        if item.status != "contested":
            new_values[item.fact[:2]].add(item.fact[2])
    facts = []
    for item in new_world:
        subject, relation, answer = item.fact
        in_kg = world.kg.objects(subject, relation)
        olds = old_world.get((subject, relation)) or in_kg
        status, reason = item.status, item.reason
        if relation not in world.functional and olds & (
            in_kg | new_values[(subject, relation)]
        ):
            status, reason = (
                "additive",
                (
                    "relation is not functional: the old answer stays true beside the new"
                ),
            )
        if not olds:
            skipped["no old answer"] += 1
        elif answer in olds:
            skipped["answer unchanged"] += 1
        elif item.chain is None:
            skipped["consequence not reachable from the edited subject"] += 1
        else:
            grounding = item.grounding
            assert grounding is not None
            facts.append(
                EntailedFact(
                    rule_id=grounding.rule_id,
                    bindings=dict(grounding.bindings),
                    subject=subject,
                    relation=relation,
                    answer_old=sorted(olds)[0],
                    answer_new=answer,
                    chain=item.chain,
                    path=grounding.premises,
                    premises=item.premises,
                    status=status,
                    reason=reason,
                    depth=item.depth,
                )
            )
    return facts
