"""Entity mentions in edit cases, found with spaCy and taken from the dataset's fields."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pandas as pd

from kebench.kg.sparql import RDFS_LABEL, SparqlEndpoint
from kebench.schemas import MENTIONS

if TYPE_CHECKING:
    from spacy.language import Language

# Dataset fields that name an entity outright, and fields whose text is searched.
ENTITY_FIELDS = ("subject", "target_true", "target_new")
TEXT_FIELDS = ("prompt", "question")


def fetch_kg_labels(
    endpoint: SparqlEndpoint, limit: int, lang: str = "en"
) -> list[str]:
    """Distinct entity labels of the KG (in ``lang`` or untagged), at most ``limit``."""
    rows = endpoint.select(
        f"SELECT DISTINCT ?label WHERE {{ ?entity <{RDFS_LABEL}> ?label . "
        f'FILTER(lang(?label) = "" || langMatches(lang(?label), "{lang}")) }} LIMIT {int(limit)}'
    )
    return sorted({row["label"].value for row in rows if "label" in row})


def build_entity_ruler(
    labels: Iterable[str], spacy_model: str | None = None
) -> Language:
    """spaCy pipeline whose EntityRuler matches the given labels (case-insensitive).

    Args:
        labels: entity names to match, e.g. KG labels plus the dataset's own entities.
        spacy_model: a trained pipeline to load instead of blank English; the ruler
            runs before its statistical NER so that KG labels win.
    """
    # imported here: every kedro run imports every pipeline's nodes, and spaCy takes
    # seconds to import from a cold disk
    import spacy  # noqa: PLC0415

    nlp = spacy.load(spacy_model) if spacy_model else spacy.blank("en")
    placement = {"before": "ner"} if "ner" in nlp.pipe_names else {}
    ruler = nlp.add_pipe(
        "entity_ruler", config={"phrase_matcher_attr": "LOWER"}, **placement
    )
    ruler.add_patterns(
        [{"label": "KG_ENTITY", "pattern": label} for label in sorted(set(labels))]
    )
    return nlp


def extract_mentions(edit_requests: pd.DataFrame, nlp: Language) -> pd.DataFrame:
    """Mentions per case: the dataset's entity fields plus spaCy entities in its texts."""
    rows = [
        {"case_id": case_id, "field": field, "mention": value, "origin": "dataset"}
        for field in ENTITY_FIELDS
        for case_id, value in zip(
            edit_requests["case_id"], edit_requests[field], strict=True
        )
        if isinstance(value, str)  # an added fact has no old target
    ]
    for field in TEXT_FIELDS:
        texts = [
            _fill_subject(text, subject) if field == "prompt" else text
            for text, subject in zip(
                edit_requests[field], edit_requests["subject"], strict=True
            )
        ]
        present = [
            (case, text)
            for case, text in zip(edit_requests["case_id"], texts, strict=True)
            if isinstance(text, str)
        ]
        docs = nlp.pipe(text for _, text in present)
        rows.extend(
            {
                "case_id": case_id,
                "field": field,
                "mention": ent.text.strip(),
                "origin": "spacy",
            }
            for (case_id, _), doc in zip(present, docs, strict=True)
            for ent in doc.ents
            if ent.text.strip()
        )
    mentions = pd.DataFrame(rows, columns=list(MENTIONS.columns))
    return MENTIONS.validate(mentions.drop_duplicates(ignore_index=True))


def _fill_subject(prompt: str, subject: str) -> str:
    return prompt.replace("{}", subject)
