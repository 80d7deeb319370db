"""Edit requests: what one edit asks of a model."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class EditRequest:
    """Make ``prompt`` with ``subject`` complete to ``target_new`` instead of ``target_true``.

    ``prompt`` is a cloze with ``{}`` where the subject goes (``{} is a citizen of``).
    ``target_true`` is None for an injected claim, whose old answer nobody states, and
    for an edit that adds a fact.
    """

    case_id: str
    prompt: str
    subject: str
    target_true: str | None
    target_new: str

    def __post_init__(self) -> None:
        if "{}" not in self.prompt:
            raise ValueError(
                f"{self.case_id}: prompt {self.prompt!r} has no {{}} for the subject"
            )

    @property
    def text(self) -> str:
        """The prompt with the subject filled in."""
        return self.prompt.replace("{}", self.subject, 1)

    @property
    def subject_span(self) -> tuple[int, int]:
        """Character span of the subject in ``text``."""
        start = self.prompt.index("{}")
        return start, start + len(self.subject)


def requests_from_frame(edit_requests: pd.DataFrame) -> list[EditRequest]:
    """One ``EditRequest`` per row of an ``edit_requests`` table, in table order."""
    return [
        EditRequest(
            case_id=str(row.case_id),
            prompt=row.prompt,
            subject=row.subject,
            target_true=None if pd.isna(row.target_true) else row.target_true,
            target_new=row.target_new,
        )
        for row in edit_requests.itertuples(index=False)
    ]


def requests_from_probes(probes: pd.DataFrame) -> list[EditRequest]:
    """One ``EditRequest`` per direct probe of a ``probes`` table, in table order.

    The probe's prompt becomes a cloze at the first mention of its subject; its old
    answer (None for an injected claim) and new answer are the targets.
    """
    direct = probes[probes["probe_type"] == "direct"]
    requests = []
    for row in direct.itertuples(index=False):
        if row.subject not in row.prompt:
            raise ValueError(
                f"direct probe {row.probe_id}: its subject {row.subject!r} is not in "
                f"its prompt {row.prompt!r}, so the edit has no subject to locate"
            )
        requests.append(
            EditRequest(
                case_id=str(row.case_id),
                prompt=row.prompt.replace(row.subject, "{}", 1),
                subject=row.subject,
                target_true=None if pd.isna(row.answer_old) else row.answer_old,
                target_new=row.answer_new,
            )
        )
    return requests
