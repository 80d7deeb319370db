"""IKE: in-context knowledge editing (Zheng et al., 2023), the memory-based baseline.

No weight changes: the new fact goes into the prompt. The delta is a text prefix of
``k`` demonstrations, then the new fact; every probe of the edited model is asked after
it. EasyEdit's text: each demonstration is ``New Fact: <fact>\nPrompt: <text>\n\n``,
a fact is ``<prompt> <answer>`` (one space), and the prefix ends with ``New Fact:
<the edit's fact>\nPrompt: ``, before the probe. Each demonstrating edit gives up to
three demonstrations, in this order, as EasyEdit's ``encode_ike_facts`` builds them
from one record:
    copy: its fact, then the same fact;
    update: its fact, then a paraphrase of its prompt with its new answer (only when
        the edit has a paraphrase, as EasyEdit's record needs a ``rephrase_prompt``);
    retain: its fact, then an unrelated true fact (another edit's prompt with its old
        answer), so that the model learns to leave other facts alone.

Which edits demonstrate is kebench's choice (EasyEdit retrieves the k sentences
nearest to the edit with a sentence-embedding model over a training set): the run's
other edits (``EditContext.pool``, other subjects), most words shared with the edited
prompt first, and their demonstrations in order until there are ``k``. A demonstrating
edit never touches a fact of the edited case (``EditContext.facts``): one whose edit
changes a fact that the case's edit changes or one of its probes asks is skipped, and
a retain demonstration's unrelated fact is none of those nor one the demonstrating
edit changes, since it would contradict a probe or give its answer away. Unrelated
facts (those with a true answer, least similar first) are used once each; an edit
left without one has no retain demonstration.

The delta keeps its parts in ``meta["ike"]`` (the new fact, the demonstrations with
the facts each touches, the case's facts), so that edits acting together (a
sequential run, mitigation's extra edits) get one well-formed prefix,
``joint_prefix``: every new fact after demonstrations that touch none of their facts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kebench.editing.delta import Delta
from kebench.editing.interface import EditContext, HyperParams
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel
from kebench.qa.probes import CaseFacts, FactKey

NO_FACTS = CaseFacts()


@dataclass
class IKEHyperParams(HyperParams):
    """IKE's hparams (EasyEdit's keys): ``k`` demonstrations."""

    k: int = 16


@dataclass(frozen=True)
class Demonstration:
    """One demonstration's text and the KG facts it states or changes."""

    text: str
    facts: frozenset[FactKey]


@dataclass(frozen=True)
class DemonstratingEdit:
    """An edit that demonstrates, with what its update and retain demonstrations say:
    the fields of EasyEdit's record of it (``prompt``, ``target_new``,
    ``rephrase_prompt``, ``locality_prompt`` and ``locality_ground_truth``).

    ``changes``: the KG facts its edit changes; ``states``: those its unrelated true
    fact states.
    """

    request: EditRequest
    paraphrase: str | None = None
    unrelated: EditRequest | None = None
    changes: frozenset[FactKey] = frozenset()
    states: frozenset[FactKey] = frozenset()

    def demonstrations(self) -> list[Demonstration]:
        """Its copy, update and retain demonstrations, those it has, in that order."""
        request = self.request
        new_fact = fact(request.text, request.target_new)
        demos = [Demonstration(demonstration(new_fact, new_fact), self.changes)]
        if self.paraphrase is not None:
            said = fact(self.paraphrase, request.target_new)
            demos.append(Demonstration(demonstration(new_fact, said), self.changes))
        if self.unrelated is not None:
            said = fact(self.unrelated.text, self.unrelated.target_true)
            demos.append(
                Demonstration(demonstration(new_fact, said), self.changes | self.states)
            )
        return demos


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def fact(prompt: str, answer: str) -> str:
    """A fact as EasyEdit writes it: the prompt, one space, the answer."""
    return f"{prompt} {answer}"


def demonstration(new_fact: str, text: str) -> str:
    """One demonstration: the fact it teaches, then what is said under it."""
    return f"New Fact: {new_fact}\nPrompt: {text}\n\n"


def compose_prefix(demonstrations: Sequence[str], new_facts: Sequence[str]) -> str:
    """The prompt prefix: the demonstrations, every new fact, then ``Prompt: ``."""
    facts = "".join(f"New Fact: {new_fact}\n" for new_fact in new_facts)
    return "".join(demonstrations) + facts + "Prompt: "


def demonstrating_edits(
    request: EditRequest,
    pool: Sequence[EditRequest],
    k: int,
    facts: Mapping[str, CaseFacts] | None = None,
    paraphrases: Mapping[str, Sequence[str]] | None = None,
) -> list[DemonstratingEdit]:
    """The edits of ``pool`` whose demonstrations make ``request``'s first ``k``, most
    similar first (``facts``: case_id -> its facts; ``paraphrases``: case_id -> the
    texts of prompts that ask its edited fact in other words)."""
    facts = facts or {}
    paraphrases = paraphrases or {}
    own = facts.get(request.case_id, NO_FACTS)
    avoid = own.rewritten | own.asked
    others = [
        r for r in pool if r.case_id != request.case_id and r.subject != request.subject
    ]
    words = _words(request.text)
    ranked = sorted(others, key=lambda r: -len(words & _words(r.text)))
    # a retain demonstration states a true fact (injected claims have none), taken
    # from the least similar end, each once
    unused = [r for r in reversed(ranked) if r.target_true is not None]
    chosen: list[DemonstratingEdit] = []
    count = 0
    for demo in ranked:
        if count >= k:
            break
        changed = facts.get(demo.case_id, NO_FACTS).rewritten
        if changed & avoid:
            continue
        # its true fact must hold under the demonstration's own edit too
        unrelated = next(
            (
                u
                for u in unused
                if u.case_id != demo.case_id
                and not facts.get(u.case_id, NO_FACTS).edited & (avoid | changed)
            ),
            None,
        )
        stated: frozenset[FactKey] = frozenset()
        if unrelated is not None:
            unused.remove(unrelated)
            stated = facts.get(unrelated.case_id, NO_FACTS).edited
        said = paraphrases.get(demo.case_id, ())
        edit = DemonstratingEdit(
            demo, said[0] if said else None, unrelated, changed, stated
        )
        chosen.append(edit)
        count += len(edit.demonstrations())
    return chosen


def demonstrations(
    request: EditRequest,
    pool: Sequence[EditRequest],
    k: int,
    facts: Mapping[str, CaseFacts] | None = None,
    paraphrases: Mapping[str, Sequence[str]] | None = None,
) -> list[Demonstration]:
    """Up to ``k`` demonstrations for ``request``: those of ``demonstrating_edits``, in
    order, cut at ``k``."""
    edits = demonstrating_edits(request, pool, k, facts, paraphrases)
    return [d for edit in edits for d in edit.demonstrations()][:k]


def _keys(facts: frozenset[FactKey]) -> list[list[str]]:
    return sorted([list(key) for key in facts])


@register("IKE", IKEHyperParams)
def ike(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: IKEHyperParams,
    context: EditContext,
) -> Delta:
    """A prefix of demonstrations and ``requests[0]``'s new fact; no weight changes."""
    (request,) = requests
    demos = demonstrations(
        request, list(context.pool), hparams.k, context.facts, context.paraphrases
    )
    new_fact = fact(request.text, request.target_new)
    own = context.facts.get(request.case_id, NO_FACTS)
    parts = {
        "k": hparams.k,
        "new_fact": new_fact,
        "demonstrations": [[d.text, _keys(d.facts)] for d in demos],
        "facts": _keys(own.rewritten | own.asked),
    }
    return Delta(
        prefix=compose_prefix([d.text for d in demos], [new_fact]),
        meta={"demonstrations": str(len(demos)), "ike": json.dumps(parts)},
    )


def joint_prefix(deltas: Sequence[Delta]) -> str:
    """The one prefix of several edits applied together.

    Weight deltas have none. Several IKE prefixes are not glued together (that gives
    ``...Prompt: New Fact: ...``): they become one, with every new fact in order,
    after up to ``k`` of their demonstrations (in order, each once) that touch no fact
    of any of the edits.
    """
    prefixed = [d for d in deltas if d.prefix]
    if len(prefixed) <= 1:
        return prefixed[0].prefix if prefixed else ""
    unstructured = [d.label() for d in prefixed if "ike" not in d.meta]
    if unstructured:
        raise ValueError(
            f"the in-context prefixes of {unstructured} cannot be combined with "
            "others: they were stored without their parts; edit them again with "
            "this version of IKE"
        )
    parts = [json.loads(d.meta["ike"]) for d in prefixed]
    touched = {tuple(key) for part in parts for key in part["facts"]}
    kept = dict.fromkeys(
        text
        for part in parts
        for text, keys in part["demonstrations"]
        if not {tuple(key) for key in keys} & touched
    )
    k = max(part["k"] for part in parts)
    return compose_prefix(list(kept)[:k], [part["new_fact"] for part in parts])
