"""Link entity mentions to KG IRIs: exact label, normalised label, then a built IRI."""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence

import pandas as pd

from kebench.kg.sparql import (
    RDFS_LABEL,
    SparqlEndpoint,
    iri_term,
    literal_term,
    values_block,
)
from kebench.schemas import ENTITY_LINKS

logger = logging.getLogger(__name__)

# DBpedia keeps alternative names as redirect resources; follow them to the entity.
REDIRECTS = "http://dbpedia.org/ontology/wikiPageRedirects"
_LEADING_ARTICLE = re.compile(r"^(the|a|an)\s+", re.IGNORECASE)
_TRAILING_PUNCT = re.compile(r"[\s.,;:!?]+$")


def batched(items: Sequence[str], size: int) -> Iterator[Sequence[str]]:
    """Consecutive slices of at most ``size`` items."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def normalised_variants(mention: str) -> list[str]:
    """Spellings worth trying when the exact label is not in the KG."""
    base = " ".join(unicodedata.normalize("NFC", mention).split())
    base = _TRAILING_PUNCT.sub("", base)
    stripped = _LEADING_ARTICLE.sub("", base)
    variants = [base, stripped, stripped.title(), stripped[:1].upper() + stripped[1:]]
    return [v for v in dict.fromkeys(variants) if v and v != mention]


def _pick(candidates: Iterable[str], namespace: str) -> str:
    """Deterministic choice among entities sharing a label: own namespace, then shortest."""
    return min(
        candidates, key=lambda iri: (not iri.startswith(namespace), len(iri), iri)
    )


def _match_labels(
    endpoint: SparqlEndpoint,
    labels: Sequence[str],
    lang: str,
    batch_size: int,
    namespace: str,
) -> dict[str, str]:
    """Map each label that some KG entity carries (tagged ``lang`` or plain) to that entity."""
    found: dict[str, set[str]] = {}
    for batch in batched(labels, batch_size):
        terms = [
            t
            for label in batch
            for t in (literal_term(label, lang), literal_term(label))
        ]
        rows = endpoint.select(
            f"SELECT ?label ?entity WHERE {{ {values_block('label', terms)} "
            f"?entity <{RDFS_LABEL}> ?label . FILTER(isIRI(?entity)) }}"
        )
        for row in rows:
            found.setdefault(row["label"].value, set()).add(row["entity"].value)
    return {label: _pick(entities, namespace) for label, entities in found.items()}


def resource_iri(mention: str, namespace: str) -> str | None:
    """DBpedia-style IRI for a name (``Côte d'Ivoire`` -> ``.../Côte_d'Ivoire``), if valid."""
    name = "_".join(mention.split())
    name = name[:1].upper() + name[1:]
    try:
        iri_term(namespace + name)
    except ValueError:
        return None
    return namespace + name


def _existing(
    endpoint: SparqlEndpoint, iris: Sequence[str], batch_size: int
) -> dict[str, str]:
    """Map each IRI of ``iris`` that occurs in the KG to itself or its redirect target."""
    present: dict[str, str] = {}
    for batch in batched(iris, batch_size):
        rows = endpoint.select(
            f"SELECT ?entity ?target WHERE {{ {values_block('entity', map(iri_term, batch))} "
            "FILTER(EXISTS { ?entity ?p ?o } || EXISTS { ?s ?q ?entity }) "
            f"OPTIONAL {{ ?entity {iri_term(REDIRECTS)} ?target }} }}"
        )
        for row in rows:
            target = row.get("target")
            present[row["entity"].value] = (
                target.value if target else row["entity"].value
            )
    return present


def link_mentions(
    mentions: pd.DataFrame,
    endpoint: SparqlEndpoint,
    resource_namespace: str,
    lang: str = "en",
    batch_size: int = 1000,
) -> pd.DataFrame:
    """Link each distinct mention to an IRI and say how, or why it stayed unlinked.

    Returns:
        ``entity_links``: mention, uri, method, reason, n_cases.
    """
    n_cases = mentions.groupby("mention")["case_id"].nunique()
    distinct = sorted(n_cases.index)
    links: dict[str, tuple[str, str]] = {
        m: (uri, "label")
        for m, uri in _match_labels(
            endpoint, distinct, lang, batch_size, resource_namespace
        ).items()
    }

    variants = {m: normalised_variants(m) for m in distinct if m not in links}
    by_variant = _match_labels(
        endpoint,
        sorted({v for vs in variants.values() for v in vs}),
        lang,
        batch_size,
        resource_namespace,
    )
    for mention, spellings in variants.items():
        hit = next((by_variant[v] for v in spellings if v in by_variant), None)
        if hit:
            links[mention] = (hit, "normalised_label")

    built = {m: resource_iri(m, resource_namespace) for m in distinct if m not in links}
    existing = _existing(
        endpoint, sorted({iri for iri in built.values() if iri}), batch_size
    )
    reasons: dict[str, str] = {}
    for mention, iri in built.items():
        if iri in existing:
            links[mention] = (existing[iri], "iri_fallback")
        elif iri is None:
            reasons[mention] = (
                "no KG label matches and the name does not form a valid IRI"
            )
        else:
            reasons[mention] = f"no KG label matches and <{iri}> is not in the KG"

    frame = pd.DataFrame(
        {
            "mention": distinct,
            "uri": [links.get(m, (None,))[0] for m in distinct],
            "method": [links.get(m, (None, "unlinked"))[1] for m in distinct],
            "reason": [reasons.get(m) for m in distinct],
            "n_cases": [int(n_cases[m]) for m in distinct],
        }
    )
    logger.info(
        "linked %d of %d mentions (%s)",
        len(links),
        len(distinct),
        frame["method"].value_counts().to_dict(),
    )
    return ENTITY_LINKS.validate(frame)
