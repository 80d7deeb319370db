"""IKE: in-context knowledge editing (Zheng et al., 2023), the memory-based baseline.

No weight changes: the new fact goes into the prompt. The delta is a text prefix of
``k`` demonstrations, then the new fact; every probe of the edited model is asked after
it. Demonstrations come from the run's other edits, most similar first (shared words
with the edited prompt), alternating two kinds, as in the paper:
    copy: ``New Fact: <their fact, new answer>`` then the same prompt with that answer;
    retain: ``New Fact: <their fact, new answer>`` then an unrelated prompt with its
        old, unchanged answer, so that the model learns to leave other facts alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kebench.editing.delta import Delta
from kebench.editing.registry import EditContext, HyperParams, register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel
from kebench.scoring.logprobs import answer_text


@dataclass
class IKEHyperParams(HyperParams):
    """IKE's hparams (EasyEdit's keys): ``k`` demonstrations."""

    k: int = 16


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def _fact(request: EditRequest, answer: str) -> str:
    return request.text + answer_text(request.text, answer)


def demonstrations(request: EditRequest, pool: list[EditRequest], k: int) -> list[str]:
    """``k`` demonstrations from ``pool`` (other subjects), most similar first."""
    others = [
        r for r in pool if r.case_id != request.case_id and r.subject != request.subject
    ]
    words = _words(request.text)
    ranked = sorted(others, key=lambda r: -len(words & _words(r.text)))
    # an unrelated demonstration states a true fact: injected claims have none
    with_truth = [r for r in ranked if r.target_true is not None]
    demos = []
    for i, demo in enumerate(ranked[:k]):
        new_fact = f"New Fact: {_fact(demo, demo.target_new)}\n"
        if i % 2 == 0:
            demos.append(f"{new_fact}Prompt: {_fact(demo, demo.target_new)}\n\n")
        else:
            unrelated = with_truth[-1 - i // 2]
            demos.append(
                f"{new_fact}Prompt: {_fact(unrelated, unrelated.target_true)}\n\n"
            )
    return demos


@register("IKE", IKEHyperParams)
def ike(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: IKEHyperParams,
    context: EditContext,
) -> Delta:
    """A prefix of demonstrations and ``requests[0]``'s new fact; no weight changes."""
    (request,) = requests
    demos = demonstrations(request, list(context.pool), hparams.k)
    prefix = (
        "".join(demos) + f"New Fact: {_fact(request, request.target_new)}\nPrompt: "
    )
    return Delta(prefix=prefix, meta={"demonstrations": str(len(demos))})
