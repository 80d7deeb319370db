"""Readers that turn knowledge-editing datasets into ``edit_requests`` rows.

Formats:
    mquake: MQuAKE's full JSON schema (``requested_rewrite`` lists); the demo uses it.
    flat_mquake: the paper's flattened MQuAKE-T records (prompt, subject, target_true,
        target_new, question), as JSON or CSV.
    mlake: the paper's MLaKE records, whose prompt is a sentence stating the old fact.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kebench.schemas import EDIT_REQUESTS

logger = logging.getLogger(__name__)

UNKNOWN_RELATION = "unknown"


class EditCaseError(ValueError):
    """An edit-case file or record cannot be read; the message names file and record."""


@dataclass(frozen=True)
class RawEditCases:
    """Records of one edit-case file, as loaded, with where they came from."""

    source: str
    format: str
    risk: str
    path: str
    records: list[dict[str, Any]]
    skip_invalid: bool = False


def load_edit_case_file(path: str | Path) -> list[dict[str, Any]]:
    """Load a JSON list or a CSV of edit records, with errors naming the file."""
    path = Path(path)
    if not path.is_file():
        raise EditCaseError(f"edit-case file not found: {path}")
    if path.suffix.lower() == ".csv":
        try:
            frame = pd.read_csv(path, dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, UnicodeDecodeError) as err:
            raise EditCaseError(f"{path}: not a readable CSV: {err}") from err
        return frame.to_dict(orient="records")
    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise EditCaseError(
            f"{path}: malformed JSON at line {err.lineno}, column {err.colno}: {err.msg}"
        ) from err
    except UnicodeDecodeError as err:
        raise EditCaseError(f"{path}: not UTF-8 text: {err}") from err
    if not isinstance(records, list):
        raise EditCaseError(
            f"{path}: expected a JSON list of records, got {type(records).__name__}"
        )
    return records


@dataclass(frozen=True)
class RelationCatalog:
    """Relation ids, their labels, and the cloze prompts that identify them."""

    labels: dict[str, str]
    by_prompt: dict[str, str]

    @classmethod
    def from_config(cls, relations: Mapping[str, Mapping[str, Any]]) -> RelationCatalog:
        """Build from ``relations`` parameters: ``{P27: {label: ..., prompts: [...]}}``."""
        labels = {rid: spec.get("label", rid) for rid, spec in relations.items()}
        by_prompt = {
            prompt: rid
            for rid, spec in relations.items()
            for prompt in spec.get("prompts", [])
        }
        return cls(labels, by_prompt)

    def label(self, relation_id: str) -> str:
        return self.labels.get(relation_id, relation_id)


def _text(value: Any) -> str | None:
    """A stripped string, or None for missing/empty values. MQuAKE nests {"str": ...}."""
    if isinstance(value, dict):
        value = value.get("str")
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _require(record: Mapping[str, Any], field: str, where: str) -> str:
    value = _text(record.get(field))
    if value is None:
        raise EditCaseError(f"{where}: missing or empty field '{field}'")
    return value


def _record_where(raw: RawEditCases, index: int, record: Any) -> str:
    label = ""
    if isinstance(record, dict):
        ident = record.get("case_id", record.get("subject"))
        label = f" ({ident!r})" if ident is not None else ""
    return f"{raw.path}: record #{index}{label}"


def _rows_mquake(
    raw: RawEditCases, index: int, record: dict, relations: RelationCatalog
) -> list[dict]:
    where = _record_where(raw, index, record)
    rewrites = record.get("requested_rewrite")
    if not isinstance(rewrites, list) or not rewrites:
        raise EditCaseError(f"{where}: missing or empty field 'requested_rewrite'")
    case_id = record.get("case_id", index)
    rows = []
    for j, rewrite in enumerate(rewrites):
        sub_where = f"{where}, requested_rewrite[{j}]"
        if not isinstance(rewrite, dict):
            raise EditCaseError(f"{sub_where}: expected an object")
        relation_id = _require(rewrite, "relation_id", sub_where)
        suffix = f".{j}" if len(rewrites) > 1 else ""
        rows.append(
            {
                "case_id": f"{raw.source}-{case_id}{suffix}",
                "subject": _require(rewrite, "subject", sub_where),
                "relation_id": relation_id,
                "relation_label": relations.label(relation_id),
                "prompt": _require(rewrite, "prompt", sub_where),
                "target_true": _require(rewrite, "target_true", sub_where),
                "target_new": _require(rewrite, "target_new", sub_where),
                "question": _text(rewrite.get("question")),
            }
        )
    return rows


def _rows_flat_mquake(
    raw: RawEditCases, index: int, record: dict, relations: RelationCatalog
) -> list[dict]:
    where = _record_where(raw, index, record)
    prompt = _require(record, "prompt", where)
    relation_id = relations.by_prompt.get(prompt, UNKNOWN_RELATION)
    return [
        {
            "case_id": f"{raw.source}-{index}",
            "subject": _require(record, "subject", where),
            "relation_id": relation_id,
            "relation_label": relations.label(relation_id),
            "prompt": prompt,
            "target_true": _require(record, "target_true", where),
            "target_new": _require(record, "target_new", where),
            "question": _text(record.get("question")),
        }
    ]


def _rows_mlake(
    raw: RawEditCases, index: int, record: dict, relations: RelationCatalog
) -> list[dict]:
    """MLaKE states the old fact as a sentence; the cloze is its text before the answer."""
    where = _record_where(raw, index, record)
    sentence = _require(record, "prompt", where)
    subject = _require(record, "subject", where)
    old = _require(record, "o_answer", where)
    prefix = sentence[: sentence.find(old)] if old in sentence else ""
    if subject not in prefix:
        raise EditCaseError(
            f"{where}: cannot derive a cloze: the sentence does not name subject {subject!r} "
            f"before answer {old!r}"
        )
    return [
        {
            "case_id": f"{raw.source}-{index}",
            "subject": subject,
            "relation_id": UNKNOWN_RELATION,
            "relation_label": relations.label(UNKNOWN_RELATION),
            "prompt": prefix.replace(subject, "{}", 1).rstrip(),
            "target_true": old,
            "target_new": _require(record, "target_new", where),
            "question": _text(record.get("question")),
        }
    ]


RowReader = Callable[[RawEditCases, int, dict, RelationCatalog], list[dict]]
READERS: dict[str, RowReader] = {
    "mquake": _rows_mquake,
    "flat_mquake": _rows_flat_mquake,
    "mlake": _rows_mlake,
}


def parse_edit_cases(raw: RawEditCases, relations: RelationCatalog) -> pd.DataFrame:
    """Turn raw records into validated ``edit_requests`` (URIs still empty).

    A record whose every field is empty is a placeholder and is skipped with a warning.
    Any other invalid record raises ``EditCaseError`` naming the file and record, or is
    skipped with a warning when the source sets ``skip_invalid``. Identical edits (same subject,
    prompt, old and new target) are kept once.
    """
    if raw.format not in READERS:
        raise EditCaseError(
            f"{raw.path}: unknown edit-case format {raw.format!r}; known: {sorted(READERS)}"
        )
    read_rows = READERS[raw.format]
    rows: list[dict] = []
    skipped = 0
    for index, record in enumerate(raw.records):
        if not isinstance(record, dict):
            raise EditCaseError(
                f"{_record_where(raw, index, record)}: expected a JSON object"
            )
        if all(_text(value) is None for value in record.values()):
            logger.warning(
                "%s: every field is empty; skipped", _record_where(raw, index, record)
            )
            skipped += 1
            continue
        try:
            rows.extend(read_rows(raw, index, record, relations))
        except EditCaseError as err:
            if not raw.skip_invalid:
                raise
            logger.warning("%s; skipped", err)
            skipped += 1
    if not rows:
        raise EditCaseError(f"{raw.path}: no usable edit records ({skipped} skipped)")
    frame = pd.DataFrame(rows)
    before = len(frame)
    frame = frame.drop_duplicates(["subject", "prompt", "target_true", "target_new"])
    logger.info(
        "%s: %d edit requests (%d duplicate records merged, %d skipped)",
        raw.path,
        len(frame),
        before - len(frame),
        skipped,
    )
    frame.insert(1, "source", raw.source)
    frame.insert(2, "risk", raw.risk)
    for column in ("subject_uri", "target_true_uri", "target_new_uri"):
        frame[column] = None
    return EDIT_REQUESTS.validate(frame.reset_index(drop=True))


def multihop_questions(raw: RawEditCases) -> pd.DataFrame:
    """MQuAKE's own multi-hop questions of each case (``questions``, ``answer``,
    ``new_answer``); empty for formats that have none.

    Returns:
        A frame with case_id, question, answer_old, answer_new, hops.
    """
    columns = ["case_id", "question", "answer_old", "answer_new", "hops"]
    if raw.format != "mquake":
        return pd.DataFrame(columns=columns)
    rows = []
    for index, record in enumerate(raw.records):
        old, new = _text(record.get("answer")), _text(record.get("new_answer"))
        if not isinstance(record, dict) or old is None or new is None:
            continue
        case_id = f"{raw.source}-{record.get('case_id', index)}"
        hops = max(len(record.get("single_hops") or []), 2)
        rows.extend(
            {
                "case_id": case_id,
                "question": question,
                "answer_old": old,
                "answer_new": new,
                "hops": hops,
            }
            for question in record.get("questions") or []
            if _text(question)
        )
    return pd.DataFrame(rows, columns=columns)
