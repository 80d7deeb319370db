"""Other names of the KG's entities, so that a generated answer may use any of them.

A free generation (protocol ``wild``) is right when it names the answer or an alias,
and an edit must hold when its subject is called by another name. Datasets ship some
aliases (MQuAKE's ``answer_alias``); the KG knows more. For each entity that can be an
answer (an object of ``kg_triples``, an edit's target) and each edited subject, kebench
asks the endpoint for:

- ``label``: its labels and names (``rdfs:label``, ``foaf:name``, ... :
  ``kg_build.aliases.name_predicates``);
- ``redirect``: the labels of the pages that redirect to it (DBpedia's
  ``dbo:wikiPageRedirects``: "USA" for United_States);
- ``same_as``: the labels of the resources it is ``owl:sameAs`` (either direction).

Only literals in the run's language, or without one, are kept. The query is one per
batch of entities (``VALUES``), the same SPARQL text on every endpoint; every IRI is
escaped by ``kebench.kg.sparql.iri_term``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import pandas as pd
from tqdm.auto import tqdm

from kebench.kg.linking import batched
from kebench.kg.sparql import SparqlEndpoint, iri_term, values_block
from kebench.schemas import ENTITY_ALIASES

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class AliasSettings:
    """Which predicates give an entity's other names (the module docstring)."""

    name_predicates: tuple[str, ...]
    redirect_predicates: tuple[str, ...]
    same_as_predicates: tuple[str, ...]
    batch_size: int = 200
    lang: str = "en"

    @classmethod
    def from_params(cls, params: Mapping, lang: str) -> AliasSettings:
        """From ``kg_build.aliases`` and the run's language."""
        return cls(
            tuple(params["name_predicates"]),
            tuple(params["redirect_predicates"]),
            tuple(params["same_as_predicates"]),
            int(params["batch_size"]),
            lang,
        )


def _alternatives(predicates: Iterable[str]) -> str:
    return "|".join(iri_term(p) for p in predicates)


def aliases_query(entities: Sequence[str], settings: AliasSettings) -> str:
    """One SELECT of ``?e ?alias ?via`` for ``entities`` (the module docstring)."""
    names = _alternatives(settings.name_predicates)
    blocks = [f'{{ ?e {names} ?alias . BIND("label" AS ?via) }}']
    if settings.redirect_predicates:
        redirects = _alternatives(settings.redirect_predicates)
        blocks.append(
            f'{{ ?r {redirects} ?e . ?r {names} ?alias . BIND("redirect" AS ?via) }}'
        )
    if settings.same_as_predicates:
        same = _alternatives(settings.same_as_predicates)
        blocks.append(
            f"{{ {{ ?e {same} ?s }} UNION {{ ?s {same} ?e }} ?s {names} ?alias . "
            'BIND("same_as" AS ?via) }'
        )
    lang = str(settings.lang).replace('"', "")
    return (
        "SELECT DISTINCT ?e ?alias ?via WHERE { "
        + values_block("e", (iri_term(e) for e in entities))
        + " "
        + " UNION ".join(blocks)
        + f' FILTER(isLiteral(?alias) && (lang(?alias) = "" || '
        f'langMatches(lang(?alias), "{lang}"))) }}'
    )


def fetch_aliases(
    entities: Iterable[str], endpoint: SparqlEndpoint, settings: AliasSettings
) -> pd.DataFrame:
    """``entity_aliases``: every other name of ``entities`` the endpoint knows, with
    how it was found; none for an empty list."""
    entities = sorted(set(entities))
    rows = []
    for batch in tqdm(
        list(batched(entities, settings.batch_size)), desc="aliases", unit="batch"
    ):
        for row in endpoint.select(aliases_query(batch, settings)):
            alias = " ".join(row["alias"].value.split())
            if alias:
                rows.append(
                    {"uri": row["e"].value, "alias": alias, "via": row["via"].value}
                )
    table = pd.DataFrame(rows, columns=list(ENTITY_ALIASES.columns))
    table = table.drop_duplicates(["uri", "alias"]).sort_values(
        ["uri", "via", "alias"], ignore_index=True
    )
    logger.info(
        "%d aliases of %d of %d entities from %s",
        len(table),
        table["uri"].nunique(),
        len(entities),
        endpoint.name,
    )
    return ENTITY_ALIASES.validate(table)


def aliased_entities(kg_triples: pd.DataFrame, edit_requests: pd.DataFrame) -> set[str]:
    """The entities whose other names kebench fetches: those that can be a probe's
    answer (the KG's entity objects, the edits' targets) and the edited subjects."""
    objects = kg_triples.loc[~kg_triples["o_is_literal"], "o"]
    linked = pd.concat(
        [
            edit_requests["subject_uri"],
            edit_requests["target_true_uri"],
            edit_requests["target_new_uri"],
        ]
    ).dropna()
    return set(objects) | set(linked)


def aliases_by_label(
    entity_aliases: pd.DataFrame,
    kg_triples: pd.DataFrame,
    edit_requests: pd.DataFrame,
) -> dict[str, list[str]]:
    """Answer label -> the KG's other names of the one entity it labels.

    Probes state answers as labels; a label is mapped to the entities it labels in the
    KG (subject and object labels, the edits' targets). A label of two or more
    entities (Georgia the country and the state) gets none: their aliases would
    accept a name of the other one.
    """
    uris: dict[str, set[str]] = defaultdict(set)
    entities = kg_triples[~kg_triples["o_is_literal"]]
    for label, uri in zip(
        [*kg_triples["s_label"], *entities["o_label"]],
        [*kg_triples["s"], *entities["o"]],
        strict=True,
    ):
        uris[label].add(uri)
    for side in ("target_true", "target_new"):
        known = edit_requests.dropna(subset=[f"{side}_uri"])
        for label, uri in zip(known[side], known[f"{side}_uri"], strict=True):
            uris[label].add(uri)
    names = entity_aliases.groupby("uri")["alias"].agg(list).to_dict()
    ambiguous = sum(len(found) > 1 for found in uris.values())
    if ambiguous:
        logger.info("%d answer labels name several entities: no KG aliases", ambiguous)
    return {
        label: [a for a in names.get(next(iter(found)), []) if a != label]
        for label, found in uris.items()
        if len(found) == 1 and names.get(next(iter(found)))
    }
