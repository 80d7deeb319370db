"""A quick check of edits: EditSucc on the edited prompt and locality on unrelated ones.

EditSucc (design §5, the paper's equation 1) is 1[log P_edited(target_new | prompt) >
log P_base(target_true | prompt)], log-probs summed over the answer's tokens.
Locality is the share of answer positions of unrelated probes (other subjects' prompts,
teacher-forced with their true answers) where the edited model's argmax token is the
base model's. Tests and benchmarks use this; the evaluation pipeline scores probes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kebench.editing.delta import Delta, delta_applied
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import AnswerScore, score_answers


@dataclass(frozen=True)
class EditQuality:
    """How one edit did."""

    case_id: str
    edit_succ: bool
    logprob_new: float
    base_logprob_true: float
    locality: float


def _agreement(edited: Sequence[AnswerScore], base: Sequence[AnswerScore]) -> float:
    same = sum(
        a == b
        for e, o in zip(edited, base, strict=True)
        for a, b in zip(e.argmax_ids, o.argmax_ids, strict=True)
    )
    total = sum(o.n_tokens for o in base)
    return same / total if total else float("nan")


def measure_edits(
    lm: LoadedModel,
    requests: Sequence[EditRequest],
    deltas: Sequence[Delta],
    probes: Sequence[EditRequest],
) -> list[EditQuality]:
    """EditSucc and locality of each request's delta; ``probes`` about the request's own
    subject are left out of its locality (NaN without probes)."""
    model, tokenizer = lm.model, lm.tokenizer
    base_true = score_answers(
        model, tokenizer, [r.text for r in requests], [r.target_true for r in requests]
    )
    base_probe = dict(
        zip(
            [p.case_id for p in probes],
            score_answers(
                model,
                tokenizer,
                [p.text for p in probes],
                [p.target_true for p in probes],
            ),
            strict=True,
        )
    )
    results = []
    for request, delta, base in zip(requests, deltas, base_true, strict=True):
        unrelated = [p for p in probes if p.subject != request.subject]
        with delta_applied(model, delta):
            (new,) = score_answers(
                model,
                tokenizer,
                [request.text],
                [request.target_new],
                prefix=delta.prefix,
            )
            edited = score_answers(
                model,
                tokenizer,
                [p.text for p in unrelated],
                [p.target_true for p in unrelated],
                prefix=delta.prefix,
            )
        results.append(
            EditQuality(
                case_id=request.case_id,
                edit_succ=new.logprob > base.logprob,
                logprob_new=new.logprob,
                base_logprob_true=base.logprob,
                locality=_agreement(edited, [base_probe[p.case_id] for p in unrelated]),
            )
        )
    return results
