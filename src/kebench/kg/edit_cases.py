"""Readers that turn knowledge-editing datasets into ``edit_requests`` rows.

Formats:
    mquake: MQuAKE's full JSON schema (``requested_rewrite`` lists), of MQuAKE-CF-3k,
        MQuAKE-CF-3k-v2 and MQuAKE-T; the demo uses it.
    flat_mquake: the paper's flattened MQuAKE-T records (prompt, subject, target_true,
        target_new, question), as JSON or CSV.
    mlake: the paper's MLaKE records, whose prompt is a sentence stating the old fact.
    counterfact: ROME's ``counterfact.json`` (one ``requested_rewrite`` object).
    zsre: MEND's ``zsre_mem_eval.json`` (a question, its rephrase, an NQ locality
        question).
    rippleedits: RippleEdits' ``popular``, ``random`` and ``recent`` files.

Besides the edit requests, ``dataset_probes`` reads each dataset's own probes (MQuAKE's
multi-hop questions, CounterFact's paraphrase and neighbourhood prompts, zsRE's
rephrase and locality question, RippleEdits' tests), with their answers' aliases.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kebench.schemas import COUNTERFACT_PROMPTS, DATASET_PROBES, EDIT_REQUESTS

logger = logging.getLogger(__name__)

UNKNOWN_RELATION = "unknown"


class EditCaseError(ValueError):
    """An edit-case file or record cannot be read; the message names file and record."""


@dataclass(frozen=True)
class RawEditCases:
    """Records of one source's edit-case files, as loaded, with where they came from.

    ``origins`` holds each record's file and its index there when the source reads
    several files (``path`` then lists them); empty, every record is ``path``'s.
    """

    source: str
    format: str
    risk: str
    path: str
    records: list[dict[str, Any]]
    skip_invalid: bool = False
    origins: tuple[tuple[str, int], ...] = ()

    def origin(self, index: int) -> tuple[str, int]:
        """The file of record ``index`` and its index in that file."""
        return self.origins[index] if self.origins else (self.path, index)


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


def load_edit_case_files(
    paths: Sequence[str | Path],
) -> tuple[list[dict[str, Any]], tuple[tuple[str, int], ...]]:
    """The records of several edit-case files in order, and each one's origin."""
    records: list[dict[str, Any]] = []
    origins: list[tuple[str, int]] = []
    for path in paths:
        loaded = load_edit_case_file(path)
        records.extend(loaded)
        origins.extend((str(path), index) for index in range(len(loaded)))
    return records, tuple(origins)


@dataclass(frozen=True)
class RelationPhrase:
    """The text a RippleEdits relation puts before and after its subject."""

    before: str
    after: str


@dataclass(frozen=True)
class RippleRelation:
    """A relation of RippleEdits' table (``rippleedits_relations`` parameters)."""

    wikidata: str | None
    phrase: RelationPhrase


def _phrase(text: str, where: str) -> RelationPhrase:
    """The phrase of a cloze with ``{}`` for the subject, once, and text after it."""
    before, subject, after = text.partition("{}")
    # text after the subject is what tells the subject from the target
    if not subject or "{}" in after or not after.strip():
        raise ValueError(
            f"{where}: phrase {text!r} must hold {{}} (the subject) once, with text "
            "after it"
        )
    return RelationPhrase(before, after)


def _ripple_table(table: Mapping[str, Mapping[str, Any]]) -> dict[str, RippleRelation]:
    """``rippleedits_relations``: ``{CAPITAL: {wikidata: P36, phrase: "... {} is"}}``."""
    return {
        name: RippleRelation(
            spec.get("wikidata"),
            _phrase(str(spec["phrase"]), f"rippleedits_relations.{name}"),
        )
        for name, spec in table.items()
    }


@dataclass(frozen=True)
class RelationCatalog:
    """Relation ids, their labels, and the cloze prompts that identify them (the
    ``by_prompt`` of flat datasets, RippleEdits' phrases in ``ripple``)."""

    labels: dict[str, str]
    by_prompt: dict[str, str]
    ripple: dict[str, RippleRelation]

    def ripple_phrase(self, relation_id: str) -> tuple[str, RelationPhrase] | None:
        """How a RippleEdits file names and phrases relation ``relation_id`` (a
        Wikidata id): RippleEdits' own name and phrase where its table has the
        relation, else the id itself with the relation's first kebench prompt (which
        the reader reads back: ``_ripple_phrases_of``); None where neither knows it."""
        for name, known in self.ripple.items():
            if known.wikidata == relation_id:
                return name, known.phrase
        prompt = next(
            (p for p, rid in self.by_prompt.items() if rid == relation_id), None
        )
        if prompt is None:
            return None
        try:
            return relation_id, _phrase(prompt, f"relations.{relation_id}.prompts")
        except ValueError:  # a prompt that ends with its subject phrases no edit
            return None

    def own_phrases(self) -> dict[str, RelationPhrase]:
        """The phrases of the relations an export names by their Wikidata id (those
        ``ripple_phrase`` finds outside RippleEdits' table)."""
        found = (self.ripple_phrase(rid) for rid in set(self.by_prompt.values()))
        return {
            name: phrase
            for name, phrase in filter(None, found)
            if name not in self.ripple
        }

    @classmethod
    def from_config(
        cls,
        relations: Mapping[str, Mapping[str, Any]],
        rippleedits: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> RelationCatalog:
        """Build from ``relations`` parameters (``{P27: {label: ..., prompts: [...]}}``)
        and ``rippleedits_relations`` ones."""
        labels = {rid: spec.get("label", rid) for rid, spec in relations.items()}
        by_prompt = {
            prompt: rid
            for rid, spec in relations.items()
            for prompt in spec.get("prompts", [])
        }
        return cls(labels, by_prompt, _ripple_table(rippleedits or {}))

    def label(self, relation_id: str) -> str:
        return self.labels.get(relation_id, relation_id)

    def ripple_label(self, name: str) -> str:
        """A RippleEdits relation's label: that of its Wikidata id (or of the name
        itself, a Wikidata id) where ``labels`` has it, as other datasets name it;
        else its name in words."""
        known = self.ripple.get(name)
        wikidata = known.wikidata if known is not None else name
        return self.labels.get(wikidata or "", name.lower().replace("_", " "))


# no relation known: readers whose format names none
NO_RELATIONS = RelationCatalog({}, {}, {})


def read_source(name: str, spec: Mapping[str, Any]) -> RawEditCases:
    """The raw records of a configured source (``globals.yml``'s ``sources.<name>``):
    its ``edit_cases`` entry's ``filepath`` (one file, or a list read in order),
    ``format``, ``risk`` and optional ``skip_invalid``."""
    cases = spec["edit_cases"]
    filepath = cases["filepath"]
    if isinstance(filepath, str):
        records, origins, path = load_edit_case_file(filepath), (), filepath
    else:
        records, origins = load_edit_case_files(list(filepath))
        path = ", ".join(str(file) for file in filepath)
    return RawEditCases(
        source=name,
        format=cases["format"],
        risk=cases["risk"],
        path=path,
        records=records,
        skip_invalid=cases.get("skip_invalid", False),
        origins=origins,
    )


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


def _cloze(record: Mapping[str, Any], where: str) -> str:
    """The record's ``prompt``: a cloze with ``{}`` once, where the subject goes."""
    prompt = _require(record, "prompt", where)
    if prompt.count("{}") != 1:
        raise EditCaseError(
            f"{where}: field 'prompt' must hold {{}} once, where the subject goes "
            f'(e.g. "The capital of {{}} is"), got {prompt!r}'
        )
    return prompt


def _record_where(raw: RawEditCases, index: int, record: Any) -> str:
    label = ""
    if isinstance(record, dict):
        ident = record.get("case_id", record.get("subject"))
        label = f" ({ident!r})" if ident is not None else ""
    path, local = raw.origin(index)
    return f"{path}: record #{local}{label}"


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
                "prompt": _cloze(rewrite, sub_where),
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
    prompt = _cloze(record, where)
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


def _aliases(value: Any) -> list[str]:
    """A list of alias strings (MQuAKE's ``answer_alias``); [] when absent."""
    if not isinstance(value, list):
        return []
    return [text for text in (_text(item) for item in value) if text is not None]


def _rows_counterfact(
    raw: RawEditCases, index: int, record: dict, relations: RelationCatalog
) -> list[dict]:
    """CounterFact: one ``requested_rewrite`` object per record."""
    where = _record_where(raw, index, record)
    rewrite = record.get("requested_rewrite")
    if not isinstance(rewrite, dict):
        raise EditCaseError(f"{where}: field 'requested_rewrite' must be an object")
    relation_id = _require(rewrite, "relation_id", where)
    return [
        {
            "case_id": f"{raw.source}-{record.get('case_id', index)}",
            "subject": _require(rewrite, "subject", where),
            "relation_id": relation_id,
            "relation_label": relations.label(relation_id),
            "prompt": _cloze(rewrite, where),
            "target_true": _require(rewrite, "target_true", where),
            "target_new": _require(rewrite, "target_new", where),
            "question": None,
        }
    ]


def _zsre_fields(record: dict, where: str) -> tuple[str, str, str, str]:
    """A zsRE record's subject, question as a prompt ({} for the subject), old and
    new answer. The old answer is ``answers[0]``, as EasyEdit reads it (``pred`` is
    a model's prediction, not the truth)."""
    subject = _require(record, "subject", where)
    question = _require(record, "src", where)
    if subject not in question:
        raise EditCaseError(
            f"{where}: field 'src' ({question!r}) does not name subject {subject!r}"
        )
    answers = _aliases(record.get("answers"))
    if not answers:
        raise EditCaseError(f"{where}: missing or empty field 'answers'")
    return (
        subject,
        question.replace(subject, "{}", 1),
        answers[0],
        _require(record, "alt", where),
    )


def _rows_zsre(
    raw: RawEditCases, index: int, record: dict, relations: RelationCatalog
) -> list[dict]:
    """zsRE: the question is the edit's prompt, scored as it is (as EasyEdit does)."""
    where = _record_where(raw, index, record)
    subject, prompt, old, new = _zsre_fields(record, where)
    return [
        {
            "case_id": f"{raw.source}-{index}",
            "subject": subject,
            "relation_id": UNKNOWN_RELATION,
            "relation_label": relations.label(UNKNOWN_RELATION),
            "prompt": prompt,
            "target_true": old,
            "target_new": new,
            "question": None,
        }
    ]


RowReader = Callable[[RawEditCases, int, dict, RelationCatalog], list[dict]]

# RippleEdits' test categories and the probe type each one is (Cohen et al., 2024):
# other facts of the subject, and old targets of one-to-many relations, must stay;
# the edit asked through an alias of the subject is a paraphrase; a logical
# constraint's consequence is entailed; a fact through the new target is two hops.
RIPPLE_TESTS: dict[str, str] = {
    "Relation_Specificity": "locality",
    "Forgetfulness": "locality",
    "Subject_Aliasing": "paraphrase",
    "Logical_Generalization": "entailed",
    "Compositionality_I": "multihop",
    "Compositionality_II": "multihop",
}
# RippleEdits' README example spells one category differently from its data files: a
# file written after it reads the same.
RIPPLE_TEST_SPELLINGS = {"Relation_Specificity": ("Relation_Specifity",)}
# How many subjects a relation's plain queries need before its phrase is trusted.
RIPPLE_MIN_SUBJECTS = 3
# The example types whose edit replaces a fact (RippleEdits' counterfactual files);
# the recent examples add one.
RIPPLE_REPLACING = ("popular", "random")


def _ripple_tests(record: Mapping[str, Any], name: str) -> list[Any]:
    """The tests of category ``name`` of a RippleEdits example, under either spelling
    (``RIPPLE_TEST_SPELLINGS``)."""
    tests: list[Any] = []
    for key in (name, *RIPPLE_TEST_SPELLINGS.get(name, ())):
        tests += record.get(key) or []
    return tests


def _ripple_queries(record: Mapping[str, Any]) -> Iterator[dict]:
    """Every query of a RippleEdits example: its tests' and their conditions'."""
    for name in RIPPLE_TESTS:
        for test in _ripple_tests(record, name):
            if not isinstance(test, dict):
                continue
            queries = (test.get("test_queries") or []) + (
                test.get("condition_queries") or []
            )
            yield from (query for query in queries if isinstance(query, dict))


def ripple_phrases(
    records: Sequence[Any], known: Collection[str] = ()
) -> dict[str, RelationPhrase]:
    """The phrase of each relation not ``known`` already, learnt from the files.

    RippleEdits phrases every plain query of a relation (``phrase`` null) the same
    way around the subject's label, and its files store only the phrased prompts: the
    text all such prompts of a relation share before and after their subjects, cut at
    word boundaries, is the relation's phrase. A relation seen with fewer than
    ``RIPPLE_MIN_SUBJECTS`` subjects has none.
    """
    prompts: dict[str, dict[str, str]] = {}
    for record in records:
        if not isinstance(record, dict):
            continue
        for query in _ripple_queries(record):
            relation, prompt = _text(query.get("relation")), _text(query.get("prompt"))
            plain = query.get("query_type") == "regular" and query.get("phrase") is None
            if plain and relation and prompt and query.get("subject_id"):
                prompts.setdefault(relation, {})[str(query["subject_id"])] = prompt
    phrases = {}
    for relation, by_subject in prompts.items():
        if relation in known or len(by_subject) < RIPPLE_MIN_SUBJECTS:
            continue
        texts = list(by_subject.values())
        before = os.path.commonprefix(texts)
        before = before[: before.rfind(" ") + 1]
        after = os.path.commonprefix([text[::-1] for text in texts])[::-1]
        # a phrase that ends with its subject cannot tell the subject from the target
        if " " in after:
            phrases[relation] = RelationPhrase(before, after[after.find(" ") :])
    return phrases


def _ripple_fact(
    phrase: RelationPhrase,
    new_prompt: str,
    stated: Callable[[str], bool] | None,
    where: str,
) -> tuple[str, str, str]:
    """Subject, cloze ({} for the subject) and new target of an edit stated as
    ``<phrase(subject)> <new target>.``.

    The subject ends where the phrase goes on. ``stated(stem)`` says whether the
    example phrases the subject as ``stem`` (= ``phrase(subject)``) elsewhere too; of
    several such places (a subject that contains the phrase's words) the last is
    taken. With nothing to compare (``stated`` None) there must be one place.
    """
    start = len(phrase.before)
    ends = [
        end
        for end in range(start + 1, len(new_prompt))
        if new_prompt.startswith(phrase.after + " ", end)
        and (stated is None or stated(new_prompt[: end + len(phrase.after)]))
    ]
    if not (new_prompt.startswith(phrase.before) and ends):
        raise EditCaseError(
            f"{where}: cannot find the subject in {new_prompt!r} with its relation's "
            f"phrase {phrase.before!r} ... {phrase.after!r}"
        )
    if stated is None and len(ends) > 1:
        raise EditCaseError(
            f"{where}: the edit adds a fact and no query of the example names its "
            f"subject, and {new_prompt!r} holds its relation's phrase "
            f"{phrase.after.strip()!r} {len(ends)} times: the subject and the target "
            "cannot be told apart"
        )
    stem = ends[-1] + len(phrase.after) + 1
    return (
        new_prompt[start : ends[-1]],
        phrase.before + "{}" + phrase.after,
        new_prompt[stem:].removesuffix("."),
    )


def _ripple_phrases_of(
    raw: RawEditCases, relations: RelationCatalog
) -> dict[str, RelationPhrase]:
    """The phrase of each relation of a RippleEdits source: the table's
    (``relations.ripple``), else kebench's own prompt of a relation named by its
    Wikidata id (as ``kebench export`` names those outside the table), else learnt
    from all of its records (``ripple_phrases``)."""
    known = relations.own_phrases() | {
        name: relation.phrase for name, relation in relations.ripple.items()
    }
    return ripple_phrases(raw.records, known=known) | known


def _rippleedits_reader(raw: RawEditCases, relations: RelationCatalog) -> RowReader:
    """The reader of a RippleEdits source (its phrases: ``_ripple_phrases_of``)."""
    phrases = _ripple_phrases_of(raw, relations)

    def read(
        raw: RawEditCases, index: int, record: dict, relations: RelationCatalog
    ) -> list[dict]:
        where = _record_where(raw, index, record)
        subject, cloze, old, new = _ripple_edit(raw, record, phrases, where)
        relation = record["edit"]["relation"]
        return [
            {
                "case_id": _ripple_case_id(raw, index),
                "subject": subject,
                "relation_id": relation,
                "relation_label": relations.ripple_label(relation),
                "prompt": cloze,
                "target_true": old,
                "target_new": new,
                "question": None,
            }
        ]

    return read


def _ripple_case_id(raw: RawEditCases, index: int) -> str:
    path, local = raw.origin(index)
    return f"{raw.source}-{Path(path).stem}-{local}"


def _ripple_edit(
    raw: RawEditCases,
    record: dict,
    phrases: Mapping[str, RelationPhrase],
    where: str,
) -> tuple[str, str, str | None, str]:
    """Subject, cloze, old target and new target of a RippleEdits edit. The old target
    is None when the edit adds a fact (the recent examples: no ``original_fact``)."""
    edit = record.get("edit")
    if not isinstance(edit, dict):
        raise EditCaseError(f"{where}: field 'edit' must be an object")
    relation = _require(edit, "relation", where)
    if relation not in phrases:
        raise EditCaseError(
            f"{where}: relation {relation!r} is not in the rippleedits_relations "
            f"table and has plain queries of fewer than {RIPPLE_MIN_SUBJECTS} "
            f"subjects in {raw.path}: its phrase is unknown"
        )
    new_prompt = _require(edit, "prompt", where)
    previous = edit.get("original_fact")
    if previous is None:
        # read as an added fact, such an example would lose its old target unseen
        if record.get("example_type") in RIPPLE_REPLACING:
            raise EditCaseError(
                f"{where}: a {record['example_type']} example replaces a fact, but "
                "its edit has no 'original_fact'"
            )
        subject, cloze, new = _ripple_fact(
            phrases[relation], new_prompt, _added_fact_stems(record), where
        )
        return subject, cloze, None, new
    if not isinstance(previous, dict):
        raise EditCaseError(f"{where}: field 'edit.original_fact' must be an object")
    old_prompt = _require(previous, "prompt", f"{where}, original_fact")
    subject, cloze, new = _ripple_fact(
        phrases[relation],
        new_prompt,
        lambda stem: old_prompt.startswith(stem + " "),
        where,
    )
    stated = cloze.replace("{}", subject, 1)
    return subject, cloze, old_prompt[len(stated) + 1 :].removesuffix("."), new


def _added_fact_stems(record: dict) -> Callable[[str], bool] | None:
    """Where an added fact's subject may end, with no previous fact to compare: at a
    prompt of the example's own plain queries of the edit's subject and relation (its
    conditions restate the edit); None when it has none."""
    edit = record["edit"]
    own = {
        query.get("prompt")
        for query in _ripple_queries(record)
        if query.get("relation") == edit["relation"]
        and query.get("subject_id") == edit.get("subject_id")
        and query.get("phrase") is None
    }
    return own.__contains__ if own else None


READERS: dict[str, RowReader] = {
    "mquake": _rows_mquake,
    "flat_mquake": _rows_flat_mquake,
    "mlake": _rows_mlake,
    "counterfact": _rows_counterfact,
    "zsre": _rows_zsre,
}
# formats whose reader needs the whole file first
FILE_READERS: dict[str, Callable[[RawEditCases, RelationCatalog], RowReader]] = {
    "rippleedits": _rippleedits_reader,
}


def parse_edit_cases(raw: RawEditCases, relations: RelationCatalog) -> pd.DataFrame:
    """Turn raw records into validated ``edit_requests`` (URIs still empty).

    A record whose every field is empty is a placeholder and is skipped with a warning.
    Any other invalid record raises ``EditCaseError`` naming the file and record, or is
    skipped with a warning when the source sets ``skip_invalid``. Identical edits (same subject,
    prompt, old and new target) are kept once.
    """
    known = {**READERS, **FILE_READERS}
    if raw.format not in known:
        raise EditCaseError(
            f"{raw.path}: unknown edit-case format {raw.format!r}; known: {sorted(known)}"
        )
    read_rows = (
        FILE_READERS[raw.format](raw, relations)
        if raw.format in FILE_READERS
        else READERS[raw.format]
    )
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


def _probe(  # noqa: PLR0913 - one dataset probe's fields
    case_id: str,
    probe_type: str,
    origin: str,
    text: str,
    *,
    style: str,
    answers: tuple[str | None, str],
    aliases: tuple[list[str], list[str]] = ([], []),
    hops: int = 1,
    premises: Sequence[Mapping[str, Any]] = (),
) -> dict:
    return {
        "case_id": case_id,
        "probe_type": probe_type,
        "origin": origin,
        "text": text,
        "style": style,
        "answer_old": answers[0],
        "answer_new": answers[1],
        "aliases_old": json.dumps(aliases[0], ensure_ascii=False),
        "aliases_new": json.dumps(aliases[1], ensure_ascii=False),
        "hops": hops,
        "premises": json.dumps(list(premises), ensure_ascii=False),
    }


def _texts(record: Mapping[str, Any], field: str, where: str) -> list[str]:
    """The strings of a list field; [] when it is absent. Any other value (a string, a
    number) is an error: a string would otherwise be read as no prompts at all."""
    value = record.get(field)
    if value is None:
        return []
    if not isinstance(value, list) or not all(
        isinstance(item, str | dict) for item in value
    ):
        raise EditCaseError(
            f"{where}: field {field!r} must be a list of strings, got "
            f"{type(value).__name__}: {str(value)[:80]!r}"
        )
    return _aliases(value)


def _probes_mquake(raw: RawEditCases, index: int, record: dict) -> list[dict]:
    """MQuAKE's multi-hop ``questions``, with ``answer_alias`` / ``new_answer_alias``."""
    old, new = _text(record.get("answer")), _text(record.get("new_answer"))
    if old is None or new is None:
        return []
    case_id = f"{raw.source}-{record.get('case_id', index)}"
    aliases = (
        _aliases(record.get("answer_alias")),
        _aliases(record.get("new_answer_alias")),
    )
    hops = max(len(record.get("single_hops") or []), 2)
    return [
        _probe(
            case_id,
            "multihop",
            "questions",
            q,
            style="question",
            answers=(old, new),
            aliases=aliases,
            hops=hops,
        )
        for q in _texts(record, "questions", _record_where(raw, index, record))
    ]


def _probes_counterfact(raw: RawEditCases, index: int, record: dict) -> list[dict]:
    """CounterFact's ``paraphrase_prompts`` (the new answer) and
    ``neighborhood_prompts`` (other subjects that keep the old one)."""
    rewrite = record.get("requested_rewrite") or {}
    old, new = _text(rewrite.get("target_true")), _text(rewrite.get("target_new"))
    if old is None or new is None:
        return []
    case_id = f"{raw.source}-{record.get('case_id', index)}"
    where = _record_where(raw, index, record)
    return [
        _probe(
            case_id,
            "paraphrase",
            "paraphrase_prompts",
            text,
            style="as_is",
            answers=(old, new),
        )
        for text in _texts(record, "paraphrase_prompts", where)
    ] + [
        _probe(
            case_id,
            "locality",
            "neighborhood_prompts",
            text,
            style="as_is",
            answers=(old, old),
        )
        for text in _texts(record, "neighborhood_prompts", where)
    ]


def _probes_zsre(raw: RawEditCases, index: int, record: dict) -> list[dict]:
    """zsRE's ``rephrase`` and its NQ locality question ``loc`` (answer ``loc_ans``),
    as EasyEdit scores them: the text as it is."""
    where = _record_where(raw, index, record)
    _subject, _prompt, old, new = _zsre_fields(record, where)
    case_id = f"{raw.source}-{index}"
    probes = []
    if (rephrase := _text(record.get("rephrase"))) is not None:
        probes.append(
            _probe(
                case_id,
                "paraphrase",
                "rephrase",
                rephrase,
                style="as_is",
                answers=(old, new),
            )
        )
    loc, loc_answer = _text(record.get("loc")), _text(record.get("loc_ans"))
    if loc is not None and loc_answer is not None:
        probes.append(
            _probe(
                case_id,
                "locality",
                "loc",
                loc,
                style="as_is",
                answers=(loc_answer, loc_answer),
            )
        )
    return probes


def _ripple_answers(query: Mapping[str, Any]) -> tuple[str, list[str]] | None:
    """A query's first answer, and every other answer and alias (any one is right)."""
    answers = [a for a in query.get("answers") or [] if isinstance(a, dict)]
    values = [_text(a.get("value")) for a in answers]
    names = [v for v in values if v is not None]
    if not names:
        return None
    others = names[1:] + [
        alias for a in answers for alias in _aliases(a.get("aliases"))
    ]
    return names[0], list(dict.fromkeys(o for o in others if o != names[0]))


def _ripple_conditions(test: Mapping[str, Any]) -> list[dict]:
    """A RippleEdits test's ``condition_queries``: the facts RippleEdits checks on the
    unedited model before it runs the test (a test whose condition the model fails is
    not executed), as premises of the test's probes."""
    conditions = []
    for query in test.get("condition_queries") or []:
        found = _ripple_answers(query) if isinstance(query, dict) else None
        text = _text(query.get("prompt")) if isinstance(query, dict) else None
        if found is None or text is None:
            continue
        premise = {
            "subject": str(query.get("subject_id") or ""),
            "relation": _text(query.get("relation")) or UNKNOWN_RELATION,
            "prompt": text,
            "answer": found[0],
            "aliases": found[1],
        }
        if premise not in conditions:  # RippleEdits repeats some conditions
            conditions.append(premise)
    return conditions


def _ripple_probes_reader(raw: RawEditCases, relations: RelationCatalog) -> ProbeReader:
    """RippleEdits' test queries as probes (``RIPPLE_TESTS``). They state only the
    edited world's answer: the old one is known only where it must not change, and
    for the edit asked through an alias of its subject. Each carries its test's
    conditions as premises (``_ripple_conditions``)."""
    phrases = _ripple_phrases_of(raw, relations)

    def read(raw: RawEditCases, index: int, record: dict) -> list[dict]:
        where = _record_where(raw, index, record)
        old_target = _ripple_edit(raw, record, phrases, where)[2]
        case_id = _ripple_case_id(raw, index)
        probes = []
        for name, probe_type in RIPPLE_TESTS.items():
            for test in _ripple_tests(record, name):
                conditions = _ripple_conditions(test or {})
                for query in (test or {}).get("test_queries") or []:
                    found = _ripple_answers(query)
                    text = _text(query.get("prompt"))
                    if found is None or text is None:
                        continue
                    answer, aliases = found
                    old = {"locality": answer, "paraphrase": old_target}.get(probe_type)
                    probes.append(
                        _probe(
                            case_id,
                            probe_type,
                            name,
                            text,
                            style="as_is",
                            answers=(old, answer),
                            aliases=(aliases if old == answer else [], aliases),
                            hops=2 if probe_type == "multihop" else 1,
                            premises=conditions,
                        )
                    )
        return probes

    return read


ProbeReader = Callable[[RawEditCases, int, dict], list[dict]]
PROBE_READERS: dict[str, Callable[[RawEditCases, RelationCatalog], ProbeReader]] = {
    "mquake": lambda _raw, _relations: _probes_mquake,
    "counterfact": lambda _raw, _relations: _probes_counterfact,
    "zsre": lambda _raw, _relations: _probes_zsre,
    "rippleedits": _ripple_probes_reader,
}


def _record_rows(raw: RawEditCases, read: ProbeReader) -> list[dict]:
    """``read``'s rows of every record; a record the edit reader would skip (not an
    object, or invalid in a ``skip_invalid`` source) gives none."""
    rows: list[dict] = []
    for index, record in enumerate(raw.records):
        if not isinstance(record, dict):
            continue
        try:
            rows.extend(read(raw, index, record))
        except EditCaseError:
            if not raw.skip_invalid:
                raise
    return rows


def dataset_probes(
    raw: RawEditCases, relations: RelationCatalog = NO_RELATIONS
) -> pd.DataFrame:
    """The dataset's own probes of each case (the module docstring); empty for
    formats that have none. Records the edit reader skips give none. ``relations``
    are those the edits were parsed with (RippleEdits' phrases)."""
    reader = PROBE_READERS.get(raw.format)
    rows = _record_rows(raw, reader(raw, relations)) if reader is not None else []
    return DATASET_PROBES.validate(
        pd.DataFrame(rows, columns=list(DATASET_PROBES.columns))
    )


# CounterFact's prompt fields, by the kind of prompt each one holds
COUNTERFACT_FIELDS = {
    "paraphrase_prompts": "paraphrase",
    "neighborhood_prompts": "neighborhood",
    "generation_prompts": "generation",
}


def _counterfact_prompt_rows(raw: RawEditCases, index: int, record: dict) -> list[dict]:
    """One CounterFact record's prompts of every kind (``COUNTERFACT_FIELDS``, and
    its rewrite prompt with the subject filled in)."""
    (row,) = _rows_counterfact(raw, index, record, NO_RELATIONS)
    target_new = record["requested_rewrite"]["target_new"]
    common = {
        "case_id": row["case_id"],
        "target_new": row["target_new"],
        "target_true": row["target_true"],
        "relation_id": row["relation_id"],
        "target_new_id": _text(target_new.get("id"))
        if isinstance(target_new, dict)
        else None,
    }
    rows = [
        common | {"kind": "rewrite", "prompt": row["prompt"].format(row["subject"])}
    ]
    for field, kind in COUNTERFACT_FIELDS.items():
        rows += [
            common | {"kind": kind, "prompt": text}
            for text in _texts(record, field, _record_where(raw, index, record))
        ]
    return rows


def counterfact_prompts(raw: RawEditCases) -> pd.DataFrame:
    """CounterFact's prompts of each edit, for its standard metrics
    (``kebench.scoring.counterfact``); empty for other formats. Records the edit
    reader skips give none."""
    rows = (
        _record_rows(raw, _counterfact_prompt_rows)
        if raw.format == "counterfact"
        else []
    )
    frame = pd.DataFrame(
        rows,
        columns=[c for c in COUNTERFACT_PROMPTS.columns if c not in ("source", "risk")],
    )
    frame.insert(1, "source", raw.source)
    frame.insert(2, "risk", raw.risk)
    return COUNTERFACT_PROMPTS.validate(frame)
