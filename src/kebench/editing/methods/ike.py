"""IKE: in-context knowledge editing (Zheng et al., 2023), the memory-based baseline.

No weight changes: the new fact goes into the prompt. The delta is a text prefix of
``k`` demonstrations, then the new fact; every probe of the edited model is asked after
it. Demonstrations come from the run's other edits, most similar first (shared words
with the edited prompt), alternating two kinds, as in the paper:
    copy: ``New Fact: <their fact, new answer>`` then the same prompt with that answer;
    retain: ``New Fact: <their fact, new answer>`` then an unrelated prompt with its
        old, unchanged answer, so that the model learns to leave other facts alone.

A demonstration never touches a fact of the edited case (``EditContext.facts``): one
whose edit changes, or whose unrelated prompt states, a fact that the case's edit
changes or one of its probes asks is skipped, since it would contradict the probe or
give its answer away. The delta keeps its parts in ``meta["ike"]`` (the new fact, the
demonstrations with the facts each touches, the case's facts), so that edits acting
together (a sequential run, mitigation's extra edits) get one well-formed prefix,
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
from kebench.scoring.logprobs import answer_text

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


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _fact(request: EditRequest, answer: str) -> str:
    return request.text + answer_text(request.text, answer)


def compose_prefix(demonstrations: Sequence[str], new_facts: Sequence[str]) -> str:
    """The prompt prefix: the demonstrations, every new fact, then ``Prompt: ``."""
    facts = "".join(f"New Fact: {fact}\n" for fact in new_facts)
    return "".join(demonstrations) + facts + "Prompt: "


def demonstrations(
    request: EditRequest,
    pool: Sequence[EditRequest],
    k: int,
    facts: Mapping[str, CaseFacts] | None = None,
) -> list[Demonstration]:
    """Up to ``k`` demonstrations from ``pool`` (other subjects), most similar first,
    none touching a fact of ``request``'s case (``facts``: case_id -> its facts)."""
    facts = facts or {}
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
    demos: list[Demonstration] = []
    for demo in ranked:
        if len(demos) == k:
            break
        changed = facts.get(demo.case_id, NO_FACTS).rewritten
        if changed & avoid:
            continue
        new_fact = f"New Fact: {_fact(demo, demo.target_new)}\n"
        if len(demos) % 2 == 0:
            text = f"{new_fact}Prompt: {_fact(demo, demo.target_new)}\n\n"
            demos.append(Demonstration(text, changed))
            continue
        # its true fact must hold under the demonstration's own edit too
        other = next(
            (
                u
                for u in unused
                if u.case_id != demo.case_id
                and not facts.get(u.case_id, NO_FACTS).edited & (avoid | changed)
            ),
            None,
        )
        if other is None:
            continue
        unused.remove(other)
        stated = facts.get(other.case_id, NO_FACTS).edited
        text = f"{new_fact}Prompt: {_fact(other, other.target_true)}\n\n"
        demos.append(Demonstration(text, changed | stated))
    return demos


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
    demos = demonstrations(request, list(context.pool), hparams.k, context.facts)
    new_fact = _fact(request, request.target_new)
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
