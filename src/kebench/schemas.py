"""The one definition of each table that crosses a pipeline boundary (design §3).

Every schema is checked where its table is written: the node that produces it calls
``validate`` before returning.
"""

from __future__ import annotations

import pandera.pandas as pa

RISKS = ("benign_update", "counterfactual", "misinformation", "bias")

EDIT_REQUESTS = pa.DataFrameSchema(
    {
        "case_id": pa.Column(str, unique=True),
        "source": pa.Column(str),
        "risk": pa.Column(str, pa.Check.isin(RISKS)),
        "subject": pa.Column(str, pa.Check.str_length(min_value=1)),
        "relation_id": pa.Column(str),
        "relation_label": pa.Column(str),
        "prompt": pa.Column(str, pa.Check.str_contains(r"\{\}")),
        "target_true": pa.Column(str, pa.Check.str_length(min_value=1)),
        "target_new": pa.Column(str, pa.Check.str_length(min_value=1)),
        "question": pa.Column(str, nullable=True),
        "subject_uri": pa.Column(str, nullable=True),
        "target_true_uri": pa.Column(str, nullable=True),
        "target_new_uri": pa.Column(str, nullable=True),
    },
    strict=True,
    coerce=True,
    name="edit_requests",
)

MENTIONS = pa.DataFrameSchema(
    {
        "case_id": pa.Column(str),
        "field": pa.Column(str),
        "mention": pa.Column(str, pa.Check.str_length(min_value=1)),
        "origin": pa.Column(str, pa.Check.isin(["spacy", "dataset"])),
    },
    strict=True,
    coerce=True,
    name="mentions",
)

LINK_METHODS = ("label", "normalised_label", "iri_fallback", "unlinked")

ENTITY_LINKS = pa.DataFrameSchema(
    {
        "mention": pa.Column(str, unique=True),
        "uri": pa.Column(str, nullable=True),
        "method": pa.Column(str, pa.Check.isin(LINK_METHODS)),
        "reason": pa.Column(str, nullable=True),
        "n_cases": pa.Column(int, pa.Check.ge(1)),
    },
    checks=pa.Check(
        lambda df: df["uri"].isna() == (df["method"] == "unlinked"),
        error="a mention has a uri exactly when it is linked",
    ),
    strict=True,
    coerce=True,
    name="entity_links",
)

KG_TRIPLES = pa.DataFrameSchema(
    {
        "s": pa.Column(str),
        "p": pa.Column(str),
        "o": pa.Column(str),
        "o_is_literal": pa.Column(bool),
        "o_lang": pa.Column(str, nullable=True),
        "s_label": pa.Column(str),
        "p_local": pa.Column(str),
        "o_label": pa.Column(str),
    },
    unique=["s", "p", "o", "o_is_literal", "o_lang"],
    strict=True,
    coerce=True,
    name="kg_triples",
)
