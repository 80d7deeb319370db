"""AMIE's TSV input read into an integer-encoded knowledge base.

AMIE 3 reads its input line by line (Java ``BufferedReader.readLine``: lines end at
``\\n``, ``\\r`` or ``\\r\\n``, malformed UTF-8 becomes U+FFFD). For each line it drops
one trailing ``.``, trims it (Java ``String.trim``: every char up to U+0020), splits it
on tabs and keeps lines of three fields (s, p, o) or four (an id, then s, p, o), each
field trimmed again. Any other line is skipped without a message. A term that contains
``"^^`` is cut after its closing quote (``"1990"^^<xsd:int>`` -> ``"1990"``).
Duplicate facts count once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

logger = logging.getLogger(__name__)

# Java's String.trim() removes every char whose code is at most U+0020.
_JAVA_TRIM_CHARS = "".join(chr(code) for code in range(0x21))
_DATATYPE_SUFFIX = r'"\^\^.*'


class RuleMiningError(Exception):
    """A rule-mining input or backend that cannot be used, with a message naming it."""


@dataclass(frozen=True)
class KnowledgeBase:
    """Distinct facts with entities and relations mapped to dense integer ids.

    Attributes:
        subjects: entity id of each fact's subject.
        relations: relation id of each fact.
        objects: entity id of each fact's object.
        relation_names: name of each relation id.
        entity_count: number of distinct entities (subjects and objects).
        skipped_lines: input lines AMIE would skip (wrong number of fields).
        source: where the facts came from, for messages.

    The fact arrays are sorted by (relation, subject, object) and hold no duplicate.
    """

    subjects: np.ndarray
    relations: np.ndarray
    objects: np.ndarray
    relation_names: tuple[str, ...]
    entity_count: int
    skipped_lines: int = 0
    source: str = "<memory>"

    @property
    def size(self) -> int:
        """Number of distinct facts."""
        return len(self.relations)

    @classmethod
    def from_triples(
        cls,
        subjects: pa.Array | list[str],
        relations: pa.Array | list[str],
        objects: pa.Array | list[str],
        skipped_lines: int = 0,
        source: str = "<memory>",
    ) -> KnowledgeBase:
        """Encode string triples as they are (no AMIE clean-up) and drop duplicates.

        Raises:
            RuleMiningError: if there is no fact.
        """
        subjects, relations, objects = (
            column if isinstance(column, pa.Array) else pa.array(column, pa.string())
            for column in (subjects, relations, objects)
        )
        if len(relations) == 0:
            raise RuleMiningError(f"{source}: the knowledge base has no fact")
        entity_codes = pc.dictionary_encode(pa.concat_arrays([subjects, objects]))
        entity_ids = _codes(entity_codes)
        relation_codes = pc.dictionary_encode(relations)
        relation_ids = _codes(relation_codes)
        subject_ids = entity_ids[: len(relations)]
        object_ids = entity_ids[len(relations) :]
        order = np.lexsort((object_ids, subject_ids, relation_ids))
        relation_ids, subject_ids, object_ids = (
            column[order] for column in (relation_ids, subject_ids, object_ids)
        )
        distinct = np.ones(len(order), dtype=bool)
        distinct[1:] = (
            (np.diff(relation_ids) != 0)
            | (np.diff(subject_ids) != 0)
            | (np.diff(object_ids) != 0)
        )
        return cls(
            subjects=subject_ids[distinct],
            relations=relation_ids[distinct],
            objects=object_ids[distinct],
            relation_names=tuple(relation_codes.dictionary.to_pylist()),
            entity_count=len(entity_codes.dictionary),
            skipped_lines=skipped_lines,
            source=source,
        )


def _java_lines(text: str) -> pa.Array:
    """Lines as Java's readLine returns them (no phantom line after a final break).

    Built from the text's bytes rather than a Python list: pyarrow imports pandas
    (half a second) to convert Python objects, and `kebench mine-rules` needs none.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if text.endswith("\n"):
        text = text[:-1]
    data = text.encode("utf-8")
    offsets = np.array([0, len(data)], dtype=np.int64)
    whole = pa.Array.from_buffers(
        pa.large_string(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    lines = pc.split_pattern(whole, "\n").flatten().cast(pa.string())
    return lines if text else lines.slice(0, 0)


def _codes(encoded: pa.DictionaryArray) -> np.ndarray:
    """A dictionary array's indices as int64, read from its buffer (``to_numpy``
    imports pandas, see ``_java_lines``); dictionary_encode leaves no nulls."""
    indices = encoded.indices
    width = indices.type.bit_width // 8
    values = np.frombuffer(
        indices.buffers()[1],
        dtype=np.dtype(f"<i{width}"),
        count=len(indices),
        offset=indices.offset * width,
    )
    return values.astype(np.int64)


def _int32(value: int) -> pa.Scalar:
    """An arrow int32 scalar, made without pyarrow's Python conversion (see
    ``_java_lines``)."""
    return pa.Array.from_buffers(
        pa.int32(), 1, [None, pa.py_buffer(np.array([value], dtype=np.int32))]
    )[0]


def _clean_term(terms: pa.Array) -> pa.Array:
    """Trim a field and cut a typed literal after its closing quote, as AMIE does."""
    trimmed = pc.utf8_trim(terms, characters=_JAVA_TRIM_CHARS)
    return pc.replace_substring_regex(
        trimmed, pattern=_DATATYPE_SUFFIX, replacement='"', max_replacements=1
    )


def read_amie_tsv(path: str | Path) -> KnowledgeBase:
    """Read an AMIE input file into a KnowledgeBase, skipping lines as AMIE does.

    Raises:
        RuleMiningError: if the file cannot be read or holds no fact.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        raise RuleMiningError(
            f"{path}: cannot read the knowledge base ({error})"
        ) from error
    lines = _java_lines(text)
    lines = pc.if_else(
        pc.ends_with(lines, "."), pc.utf8_slice_codeunits(lines, 0, -1), lines
    )
    fields = pc.split_pattern(pc.utf8_trim(lines, characters=_JAVA_TRIM_CHARS), "\t")
    field_counts = pc.list_value_length(fields)
    columns = []
    for field_count in (3, 4):
        rows = fields.filter(pc.equal(field_counts, _int32(field_count)))
        first = field_count - 3  # a fourth field is a leading fact id, dropped
        columns.append(
            [
                _clean_term(pc.list_element(rows, _int32(first + offset)))
                for offset in range(3)
            ]
        )
    kept = sum(len(group[0]) for group in columns)
    skipped = len(lines) - kept
    if skipped:
        logger.warning(
            "%s: skipped %d line(s) without 3 or 4 tab-separated fields", path, skipped
        )
    subjects, relations, objects = (
        pa.concat_arrays([group[position] for group in columns])
        for position in range(3)
    )
    return KnowledgeBase.from_triples(
        subjects, relations, objects, skipped_lines=skipped, source=str(path)
    )
