"""kebench's probes as datasets other tools read (``kebench export``, docs/export.md).

Three layouts of the same probes:

- ``knowedit``: KnowEdit's JSON records, which EasyEdit's ``KnowEditDataset`` reads;
- ``rippleedits``: RippleEdits' example records, test queries per category, a probe's
  known-premise facts in its test's ``condition_queries``;
- ``hf``: a Hugging Face dataset on disk, one row per probe, with a dataset card.

A case's edit is its direct probe (what the editing pipeline edits). Every export
carries its provenance (``ExportProvenance``): kebench's version, the source, the
parameters that made the probes, and the licences of what it holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from kebench.atomic import atomic_path
from kebench.kg.edit_cases import RelationCatalog
from kebench.qa.premises import entailed_fact_ids

EXPORT_FORMATS = ("knowedit", "rippleedits", "hf")

# kebench's deductive kinds as KnowEdit's portability categories: another name of the
# subject (Subject_Aliasing), a chain through the new object (Reasoning: KnowEdit's
# multi-hop questions), what a relation's logic forces (Logical_Generalization).
KNOWEDIT_PORTABILITY = {
    "subject_alias": "Subject_Aliasing",
    "composition": "Reasoning",
    "inverse": "Logical_Generalization",
    "symmetric": "Logical_Generalization",
    "axiom": "Logical_Generalization",
}
# RippleEdits' categories (Cohen et al., 2024) of the same kinds. A composition is
# Compositionality_I when its chain starts at the edited subject (the edit is its
# first hop), Compositionality_II when it reaches the edited subject from another
# entity (``ripple_category``).
RIPPLE_CATEGORY = {
    "subject_alias": "Subject_Aliasing",
    "inverse": "Logical_Generalization",
    "symmetric": "Logical_Generalization",
    "axiom": "Logical_Generalization",
}
RIPPLE_CATEGORIES = (
    "Relation_Specificity",
    "Logical_Generalization",
    "Subject_Aliasing",
    "Compositionality_I",
    "Compositionality_II",
    "Forgetfulness",
)
# The inductive tier (rules a KG suggests, not logic) never joins a format's own
# categories: it has a field of its own in every layout.
INDUCTIVE_FIELD = "kebench_inductive"
# an hf export's full provenance, beside its dataset card
HF_PROVENANCE_FILE = "kebench_export.json"
PROVENANCE_FIELD = "kebench"


class ExportError(ValueError):
    """An export that cannot be made: a missing table, a bad format or risk."""


@dataclass(frozen=True)
class ExportTables:
    """The QA pipelines' outputs an export reads."""

    probes: pd.DataFrame
    premise_probes: pd.DataFrame
    entailed_facts: pd.DataFrame
    entailed_questions: pd.DataFrame
    edit_requests: pd.DataFrame


@dataclass(frozen=True)
class ExportProvenance:
    """What made an export: written beside it (``<out>.meta.json``) and into the
    dataset card."""

    kebench_version: str
    source: str
    source_spec: dict[str, Any]
    risks: list[str]
    format: str
    command: str
    parameters: dict[str, Any]
    licences: dict[str, str]
    counts: dict[str, Any] = field(default_factory=dict)


def _names(value: Any) -> list[str]:
    """A JSON list column's names ([] for null)."""
    return [] if value is None or pd.isna(value) else list(json.loads(value))


def _text(value: Any) -> str | None:
    return None if value is None or pd.isna(value) else str(value)


def probe_rows(tables: ExportTables, risks: Sequence[str]) -> pd.DataFrame:
    """The probes of ``risks``, one row each, with what an export needs beside the
    probe table: the derivation of an entailed probe (``property_path``, ``path``,
    ``chain_subject``), its premises as asked (``premises``), and its case's edit
    (``edit_*``, from the case's direct probe and edit request)."""
    probes = tables.probes[tables.probes["risk"].isin(risks)].copy()
    if probes.empty:
        raise ExportError(
            f"no probes of risk {', '.join(risks)}; the table has "
            f"{', '.join(sorted(tables.probes['risk'].unique()))}"
        )
    fact_of = entailed_fact_ids(probes, tables.entailed_questions)
    facts = tables.entailed_facts.set_index("fact_id")
    fact_ids = probes["probe_id"].map(fact_of)
    known = fact_ids.notna()
    probes["property_path"] = fact_ids.map(facts["relation"]).where(known, None)
    probes["path"] = fact_ids.map(facts["path"]).where(known, None)
    probes["chain_subject"] = fact_ids.map(facts["subject_uri"]).where(known, None)
    probes["answer_new_uri"] = fact_ids.map(facts["answer_new_uri"]).where(known, None)
    premises = tables.premise_probes.groupby("probe_id").apply(
        lambda rows: [
            {
                "kind": row.kind,
                "subject": row.subject,
                "relation": row.relation,
                "prompt": row.prompt,
                "direction": row.direction,
                "answer": row.answer,
                "aliases": _names(row.aliases),
            }
            for row in rows.itertuples()
        ],
        include_groups=False,
    )
    probes["premises"] = probes["probe_id"].map(premises)
    probes["premises"] = probes["premises"].map(
        lambda found: found if isinstance(found, list) else []
    )
    direct = probes[probes["probe_type"] == "direct"].drop_duplicates("case_id")
    edit = direct.set_index("case_id")
    asked = [_cloze(row) for row in direct.itertuples()]
    probes["edit_prompt"] = probes["case_id"].map(dict(zip(direct["case_id"], asked)))
    probes["edit_target_new"] = probes["case_id"].map(edit["answer_new"])
    probes["edit_target_true"] = probes["case_id"].map(edit["answer_old"])
    requests = tables.edit_requests.set_index("case_id")
    for column in ("relation_id", "subject_uri", "target_true_uri", "target_new_uri"):
        probes[f"edit_{column}"] = probes["case_id"].map(requests[column])
    return probes.reset_index(drop=True)


def _answers(row: Any, which: str) -> list[str]:
    """KnowEdit's ground truth of one answer: its names, the first canonical."""
    return [getattr(row, f"answer_{which}"), *_names(getattr(row, f"aliases_{which}"))]


def _cloze(row: Any) -> str:
    """What a probe asks, as another tool would put it to a model: a cloze's prompt,
    else its natural question (not kebench's QA format)."""
    return row.prompt if row.form == "cloze" else (_text(row.question) or row.prompt)


def _provenance(row: Any) -> dict[str, Any]:
    return {
        "case_id": row.case_id,
        "source": row.source,
        "risk": row.risk,
        "relation_id": _text(row.edit_relation_id),
    }


def _case_groups(rows: pd.DataFrame) -> list[tuple[Any, pd.DataFrame]]:
    """Each case with a direct probe (an edit to export), with its probes, in order."""
    edited = rows[rows["edit_prompt"].notna()]
    return [
        (group.iloc[0], group) for _, group in edited.groupby("case_id", sort=False)
    ]


def knowedit_records(rows: pd.DataFrame) -> list[dict[str, Any]]:
    """One KnowEdit record per edit (``KNOWEDIT_PORTABILITY``; docs/export.md).

    Ground truths are lists of names per answer (``[[answer, alias, ...]]``), as in
    KnowEdit's WikiData files. Every record has ``locality`` (EasyEdit's loader reads
    it unconditionally). An echo probe (passing it needs no reasoning) carries
    ``echo: true``; the inductive tier goes in ``kebench_inductive``.
    """
    records = []
    for first, group in _case_groups(rows):
        portability: dict[str, list[dict]] = {}
        inductive, specificity = [], []
        for row in group.itertuples():
            if row.probe_type == "relation_specificity":
                item = {"prompt": _cloze(row), "ground_truth": [_answers(row, "old")]}
                specificity.append(item)
                continue
            if row.probe_type != "entailed" or row.tier not in {
                "deductive",
                "inductive",
            }:
                continue
            item = {
                "prompt": _cloze(row),
                "ground_truth": [_answers(row, "new")],
                "kind": row.kind,
                "echo": bool(row.echo),
                "hops": int(row.hops),
            }
            if row.tier == "inductive":
                inductive.append(item | {"rule_id": row.rule_id})
            else:
                portability.setdefault(KNOWEDIT_PORTABILITY[row.kind], []).append(item)
        paraphrases = group[group["probe_type"] == "paraphrase"]
        record = {
            "subject": first.subject,
            "prompt": first.edit_prompt,
            "target_new": first.edit_target_new,
            "ground_truth": _text(first.edit_target_true),
            "portability": portability,
            "locality": ({"Relation_Specificity": specificity} if specificity else {}),
        }
        if not paraphrases.empty:
            record["rephrase"] = _cloze(next(paraphrases.itertuples()))
        records.append(
            record | {INDUCTIVE_FIELD: inductive, PROVENANCE_FIELD: _provenance(first)}
        )
    return records


def ripple_category(row: Any) -> str | None:
    """The RippleEdits category of a probe (``RIPPLE_CATEGORY``); None for one no
    category holds (paraphrases, other subjects' facts, a dataset's own tests)."""
    if row.probe_type == "relation_specificity":
        return "Relation_Specificity"
    if row.probe_type != "entailed" or row.tier != "deductive":
        return None
    if row.kind == "composition":
        starts_at_edit = row.chain_subject == row.edit_subject_uri
        return "Compositionality_I" if starts_at_edit else "Compositionality_II"
    return RIPPLE_CATEGORY[row.kind]


def _ripple_query(  # noqa: PLR0913 - one query's fields
    prompt: str,
    answer: str,
    aliases: list[str],
    *,
    subject: str | None,
    relation: str | None,
    hops: int = 1,
) -> dict[str, Any]:
    # ``phrase`` holds the prompt: RippleEdits marks a query it did not phrase with
    # its relation's own phrase so, and kebench's reader learns no phrase from it
    return {
        "prompt": prompt,
        "answers": [{"value": answer, "aliases": aliases}],
        "query_type": "two_hop" if hops >= 2 else "regular",  # noqa: PLR2004
        "subject_id": subject,
        "relation": relation,
        "target_ids": [],
        "phrase": prompt,
    }


def _ripple_test(row: Any, which: str) -> dict[str, Any]:
    """A probe as a RippleEdits test: its query, and its premises as conditions."""
    query = _ripple_query(
        _cloze(row),
        getattr(row, f"answer_{which}"),
        _names(getattr(row, f"aliases_{which}")),
        subject=_text(row.chain_subject) or _text(row.fact_subject_uri),
        relation=_text(row.property_path) or _text(row.fact_relation),
        hops=int(row.hops),
    ) | {"kind": _text(row.kind), "echo": bool(row.echo)}
    conditions = [
        _ripple_query(
            premise["prompt"],
            premise["answer"],
            premise["aliases"],
            subject=premise["subject"],
            relation=premise["relation"],
        )
        for premise in row.premises
        if premise["kind"] == "premise"
    ]
    return {
        "test_queries": [query],
        # RippleEdits runs a test only where the unedited model knows every condition
        "test_condition": "AND" if conditions else "OR",
        "condition_queries": conditions,
    }


@dataclass
class RippleExport:
    """RippleEdits records, and the edits no RippleEdits record can state."""

    records: list[dict[str, Any]]
    skipped: dict[str, str]  # case_id -> why


def rippleedits_records(rows: pd.DataFrame, relations: RelationCatalog) -> RippleExport:
    """One RippleEdits example per edit (``ripple_category``; docs/export.md).

    The edit reads ``<phrase(subject)> <target>.`` with the relation's phrase
    (``RelationCatalog.ripple_phrase``), as RippleEdits' files and kebench's reader
    state it. An edit of a relation no phrase is known for, or with no relation (an
    injected claim), cannot be stated so and is skipped with its reason.
    """
    export = RippleExport([], {})
    for first, group in _case_groups(rows):
        relation_id = _text(first.edit_relation_id)
        named = relations.ripple_phrase(relation_id) if relation_id else None
        if named is None:
            export.skipped[first.case_id] = (
                f"relation {relation_id} has no phrase in rippleedits_relations or "
                "relations.<id>.prompts"
                if relation_id
                else "an injected claim states no relation"
            )
            continue
        name, phrase = named
        stem = f"{phrase.before}{first.subject}{phrase.after}"
        edit = {
            "prompt": f"{stem} {first.edit_target_new}.",
            "subject_id": _text(first.edit_subject_uri),
            "relation": name,
            "target_id": _text(first.edit_target_new_uri),
        }
        old = _text(first.edit_target_true)
        if old is not None:
            edit["original_fact"] = {
                "prompt": f"{stem} {old}.",
                "subject_id": edit["subject_id"],
                "relation": name,
                "target_id": _text(first.edit_target_true_uri),
            }
        # RippleEdits reads "random" and "popular" examples as replaced facts,
        # "recent" ones as added facts
        record: dict[str, Any] = {
            "example_type": "random" if old is not None else "recent",
            "edit": edit,
        }
        record |= {category: [] for category in RIPPLE_CATEGORIES}
        inductive = []
        for row in group.itertuples():
            category = ripple_category(row)
            if category == "Relation_Specificity":
                record[category].append(_ripple_test(row, "old"))
            elif category is not None:
                record[category].append(_ripple_test(row, "new"))
            elif row.probe_type == "entailed" and row.tier == "inductive":
                inductive.append(_ripple_test(row, "new") | {"rule_id": row.rule_id})
        record[INDUCTIVE_FIELD] = inductive
        record[PROVENANCE_FIELD] = _provenance(first)
        export.records.append(record)
    return export


# The columns of the hf layout, in order: the probe, its derivation, its case's edit.
HF_COLUMNS = (
    "probe_id",
    "case_id",
    "source",
    "risk",
    "probe_type",
    "tier",
    "kind",
    "echo",
    "form",
    "prompt",
    "question",
    "answer_old",
    "answer_new",
    "aliases_old",
    "aliases_new",
    "hops",
    "rule_id",
    "property_path",
    "path",
    "premises",
    "subject",
    "edit_prompt",
    "edit_target_true",
    "edit_target_new",
    "edit_relation_id",
)


def hf_frame(rows: pd.DataFrame) -> pd.DataFrame:
    """The hf layout's rows (``HF_COLUMNS``), JSON columns as lists."""
    frame = rows[list(HF_COLUMNS)].copy()
    for column in ("aliases_old", "aliases_new"):
        frame[column] = frame[column].map(_names)
    frame["path"] = frame["path"].map(_names)
    frame["echo"] = frame["echo"].astype(bool)
    frame["hops"] = frame["hops"].astype(int)
    return frame.astype(object).where(frame.notna(), None)


def counts(rows: pd.DataFrame) -> dict[str, Any]:
    """Probes per type, and per tier and kind of the entailed ones; edits."""
    entailed = rows[rows["probe_type"] == "entailed"]
    return {
        "probes": len(rows),
        "edits": int(rows.loc[rows["edit_prompt"].notna(), "case_id"].nunique()),
        "by_probe_type": rows["probe_type"].value_counts().sort_index().to_dict(),
        "by_tier_and_kind": {
            f"{tier}/{kind}": int(n)
            for (tier, kind), n in entailed.groupby(["tier", "kind"]).size().items()
        },
        "echo": int(rows["echo"].sum()),
    }


def dataset_card(
    frame: pd.DataFrame, provenance: ExportProvenance, dataset_info: dict[str, Any]
) -> str:
    """The hf layout's README.md: the hub's YAML front matter (licences, size, the
    features as ``datasets`` types them, kebench's provenance) and a body with the
    licences, the counts per tier and kind, the schema and the command."""
    from huggingface_hub import DatasetCardData  # noqa: PLC0415 - with the hf extra

    card = DatasetCardData(
        license="other",
        license_name="mixed: see license_details",
        license_details=provenance.licences,
        language=["en"],
        pretty_name=f"kebench probes of {provenance.source}",
        size_categories=[_size_category(len(frame))],
        task_categories=["question-answering"],
        tags=["knowledge-editing", "kebench", "ripple-effects"],
        dataset_info={
            **dataset_info,
            "splits": [{"name": "train", "num_examples": len(frame)}],
        },
        # the parameters are long: they stay in kebench_export.json beside the card
        kebench=json.loads(
            json.dumps(
                {k: v for k, v in asdict(provenance).items() if k != "parameters"},
                default=str,
            )
        ),
    )
    tiers = provenance.counts.get("by_tier_and_kind", {})
    lines = [
        "---",
        card.to_yaml(),
        "---",
        "",
        f"# kebench probes of `{provenance.source}`",
        "",
        "Questions a knowledge edit's logical consequences answer: one row per probe.",
        "The deductive tier is what logic forces after the edit; the inductive tier is",
        "what rules mined from the KG (as AMIE 3 does) suggest. They are never one",
        "number. `echo` marks a probe passed without reasoning (it names the edited",
        "subject and asks the edit's own new object).",
        "",
        f"Made by `{provenance.command}` with kebench {provenance.kebench_version};",
        f"the parameters that made the probes are in `{HF_PROVENANCE_FILE}`.",
        "",
        "## Licences",
        "",
        *(f"- {what}: {licence}" for what, licence in provenance.licences.items()),
        "",
        "## Counts",
        "",
        f"{provenance.counts.get('probes')} probes of "
        f"{provenance.counts.get('edits')} edits; {provenance.counts.get('echo')} "
        "of the probes are echoes.",
        "",
        "| tier/kind | probes |",
        "|---|---|",
        *(f"| {key} | {n} |" for key, n in tiers.items()),
        "",
        "| probe type | probes |",
        "|---|---|",
        *(
            f"| {key} | {n} |"
            for key, n in provenance.counts.get("by_probe_type", {}).items()
        ),
        "",
        "## Schema",
        "",
        *(f"- `{column}`: {HF_DESCRIPTIONS[column]}" for column in frame.columns),
        "",
    ]
    return "\n".join(lines)


def _size_category(n: int) -> str:
    for limit, name in ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K")):
        if n < limit:
            return name
    return "n>100K"


HF_DESCRIPTIONS = {
    "probe_id": "the probe's id, `<case_id>/<probe_type>/<n>`",
    "case_id": "the edit it belongs to",
    "source": "the dataset source of the edit",
    "risk": "benign_update, counterfactual, misinformation or bias",
    "probe_type": "direct, paraphrase, entailed, multihop, locality or "
    "relation_specificity",
    "tier": "entailed probes: deductive, inductive, or dataset (a dataset's own test)",
    "kind": "the tier's kind: composition, inverse, symmetric, subject_alias, axiom "
    "or rule",
    "echo": "true where passing the probe needs no reasoning",
    "form": "cloze (a text to continue) or question",
    "prompt": "the text scored: a cloze, or the question in kebench's QA format",
    "question": "the natural question, where there is one",
    "answer_old": "the answer before the edit (null where none is known)",
    "answer_new": "the answer after the edit",
    "aliases_old": "other names of answer_old",
    "aliases_new": "other names of answer_new",
    "hops": "KG facts between the edited subject and the answer",
    "rule_id": "entailed probes: the mined rule, or the derivation `<kind>:<path>`",
    "property_path": "entailed probes: the KG property path from the probe's subject "
    "to its answer (`^` walks a triple backwards)",
    "path": "entailed probes: the triples walked, `[subject, relation, object]`",
    "premises": "the facts the probe rests on, as asked of the unedited model",
    "subject": "the edited subject",
    "edit_prompt": "the edit, as its direct probe asks it",
    "edit_target_true": "the edit's old object (null for an injected claim)",
    "edit_target_new": "the edit's new object",
    "edit_relation_id": "the edited relation's Wikidata id (null for an injected claim)",
}


def _write_json(payload: Any, path: Path) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(
            json.dumps(payload, ensure_ascii=False, indent=1, default=str),
            encoding="utf-8",
        )


def write_export(
    rows: pd.DataFrame,
    export_format: str,
    out: Path,
    provenance: ExportProvenance,
    relations: RelationCatalog,
) -> dict[str, Any]:
    """Write ``rows`` to ``out`` in ``export_format`` with their provenance; a
    summary of what was written (records, rows, skipped edits)."""
    provenance = replace(provenance, counts=counts(rows))
    summary: dict[str, Any] = {"format": export_format, "out": str(out)}
    if export_format == "knowedit":
        records = knowedit_records(rows)
        _write_json(records, out)
        summary["records"] = len(records)
    elif export_format == "rippleedits":
        export = rippleedits_records(rows, relations)
        _write_json(export.records, out)
        summary |= {"records": len(export.records), "skipped": export.skipped}
    elif export_format == "hf":
        _write_hf(hf_frame(rows), out, provenance)
        summary["rows"] = len(rows)
    else:
        raise ExportError(
            f"unknown export format {export_format!r}; known: {list(EXPORT_FORMATS)}"
        )
    meta = {**asdict(provenance), "written": summary}
    if export_format == "hf":
        _write_json(meta, out / HF_PROVENANCE_FILE)
    else:
        _write_json(meta, metadata_path(out))
    return summary


def metadata_path(out: Path) -> Path:
    """Where a JSON export's provenance goes: beside it, ``<name>.meta.json``."""
    return out.with_name(f"{out.stem}.meta.json")


def _write_hf(frame: pd.DataFrame, folder: Path, provenance: ExportProvenance) -> None:
    try:
        import datasets  # noqa: PLC0415 - optional: the hf extra
    except ImportError as error:
        raise ExportError(
            "the hf format needs the datasets package: pip install 'kebench[hf]'"
        ) from error
    dataset = datasets.Dataset.from_list(frame.to_dict("records"))
    dataset.info.description = json.dumps(asdict(provenance), default=str)
    dataset.info.license = ", ".join(sorted(set(provenance.licences.values())))
    # written whole in a sibling folder, then moved: a reader never sees half of it
    staging = folder.with_name(f".{folder.name}.partial")
    dataset.save_to_disk(str(staging))
    # the features block the hub reads, as datasets writes it when it pushes a
    # dataset (no public call gives it for a dataset saved to disk)
    info = dataset.info._to_yaml_dict()  # noqa: SLF001
    card = dataset_card(frame, provenance, {"features": info["features"]})
    (staging / "README.md").write_text(card, "utf-8")
    if folder.exists():
        _replace_folder(staging, folder)
    else:
        os.replace(staging, folder)


def _replace_folder(staging: Path, folder: Path) -> None:
    import shutil  # noqa: PLC0415

    old = folder.with_name(f".{folder.name}.old")
    shutil.rmtree(old, ignore_errors=True)
    os.replace(folder, old)
    os.replace(staging, folder)
    shutil.rmtree(old)


def licences(
    source_spec: Mapping[str, Any], risks: Sequence[str], injection_licence: str
) -> dict[str, str]:
    """What each part of an export is licensed under: the source's edits and KG
    (``sources.<name>.licence``), and EditAttack's injected claims where the export
    holds misinformation or bias probes."""
    found = {
        "source": str(source_spec.get("licence") or "not stated: see the source's own")
    }
    if {"misinformation", "bias"} & set(risks):
        found["editattack_injections"] = injection_licence
    return found
