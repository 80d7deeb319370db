"""One SPARQL interface over an embedded pyoxigraph store or a remote HTTP endpoint.

Both endpoints take the same SPARQL text. Every IRI and literal that goes into a
query is serialised by pyoxigraph (``iri_term``/``literal_term``), which validates
IRIs and escapes literals, so user-supplied labels cannot inject SPARQL.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pyoxigraph as ox

logger = logging.getLogger(__name__)

RDFS_LABEL = "http://www.w3.org/2000/01/rdf-schema#label"


class SparqlError(RuntimeError):
    """A SPARQL endpoint failed, timed out, or returned something unusable."""


@dataclass(frozen=True)
class Term:
    """An RDF term as returned by a SELECT query."""

    value: str
    is_literal: bool = False
    lang: str | None = None
    datatype: str | None = None


def iri_term(iri: str) -> str:
    """Serialise an IRI for SPARQL, rejecting anything that is not a valid IRI.

    Raises:
        ValueError: if ``iri`` is not a valid IRI (e.g. it contains ``>`` or spaces).
    """
    return str(ox.NamedNode(iri))


def literal_term(text: str, lang: str | None = None) -> str:
    """Serialise a string literal for SPARQL with every special character escaped."""
    return str(ox.Literal(text, language=lang) if lang else ox.Literal(text))


def values_block(variable: str, terms: Iterable[str]) -> str:
    """A ``VALUES ?var { ... }`` block over already-serialised terms."""
    return f"VALUES ?{variable} {{ {' '.join(terms)} }}"


def redact_url(url: str) -> str:
    """The endpoint URL without user info, safe to log and to put in errors."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class SparqlEndpoint(ABC):
    """A place to send SELECT queries. Counts the queries it sends."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.queries_sent = 0

    def select(self, query: str) -> list[dict[str, Term]]:
        """Run a SELECT query and return its rows as ``{variable: Term}`` dicts."""
        self.queries_sent += 1
        return self._select(query)

    @abstractmethod
    def _select(self, query: str) -> list[dict[str, Term]]: ...

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


def _term_from_oxigraph(term: ox.NamedNode | ox.Literal | ox.BlankNode) -> Term:
    if isinstance(term, ox.Literal):
        datatype = term.datatype.value if term.datatype else None
        return Term(term.value, True, term.language, datatype)
    return Term(term.value)


class EmbeddedEndpoint(SparqlEndpoint):
    """An in-process pyoxigraph store loaded from RDF files."""

    def __init__(self, store: ox.Store, name: str = "embedded") -> None:
        super().__init__(name)
        self.store = store

    @classmethod
    def from_files(cls, paths: Sequence[str | Path]) -> EmbeddedEndpoint:
        """Load N-Triples/Turtle files, or DBpedia-style TSV dumps, into a new store."""
        from kebench.kg.amie_export import read_dbpedia_tsv, triples_to_quads  # noqa: PLC0415

        store = ox.Store()
        for path in map(Path, paths):
            if not path.is_file():
                raise FileNotFoundError(f"KG file not found: {path}")
            if path.suffix == ".tsv":
                store.bulk_extend(triples_to_quads(read_dbpedia_tsv(path)))
            else:
                store.bulk_load(
                    path=str(path), format=ox.RdfFormat.from_extension(path.suffix[1:])
                )
        names = ", ".join(p.name for p in map(Path, paths))
        return cls(store, name=f"embedded[{names}]")

    def _select(self, query: str) -> list[dict[str, Term]]:
        try:
            solutions = self.store.query(query)
        except SyntaxError as err:
            raise SparqlError(f"{self.name}: invalid SPARQL: {err}") from err
        variables = [v.value for v in solutions.variables]
        return [
            {
                var: _term_from_oxigraph(sol[var])
                for var in variables
                if sol[var] is not None
            }
            for sol in solutions
        ]


class HttpEndpoint(SparqlEndpoint):
    """A remote SPARQL 1.1 endpoint queried through SPARQLWrapper, with bounded retries."""

    def __init__(  # noqa: PLR0913 - endpoint settings are keyword-only
        self,
        url: str,
        *,
        timeout_s: float = 60.0,
        max_attempts: int = 4,
        backoff_s: float = 1.0,
        user: str | None = None,
        password: str | None = None,
    ) -> None:
        super().__init__(redact_url(url))
        if urlsplit(url).username or urlsplit(url).password:
            # A URL travels into logs and MLflow tags; secrets must not ride along.
            raise ValueError(
                f"SPARQL endpoint {self.name}: put credentials in conf/local/credentials.yml "
                "or KEBENCH_SPARQL_USER/KEBENCH_SPARQL_PASSWORD, not in the URL"
            )
        from SPARQLWrapper import JSON, POST, SPARQLWrapper  # noqa: PLC0415

        self._client = SPARQLWrapper(url)
        self._client.setReturnFormat(JSON)
        # POST: batched VALUES queries outgrow the URL length limits of GET.
        self._client.setMethod(POST)
        self._client.setTimeout(int(timeout_s))
        if user:
            self._client.setCredentials(user, password or "")
        self.max_attempts = max_attempts
        self.backoff_s = backoff_s

    def _select(self, query: str) -> list[dict[str, Term]]:
        from SPARQLWrapper.SPARQLExceptions import (  # noqa: PLC0415
            EndPointInternalError,
            SPARQLWrapperException,
        )

        self._client.setQuery(query)
        last_error: Exception | None = None
        for attempt in range(1, self.max_attempts + 1):
            try:
                result = self._client.queryAndConvert()
            # Transient: refused, reset, timed out, or a 5xx from the server.
            except (OSError, EndPointInternalError) as err:
                last_error = err
            # Permanent: bad query, 401/403, 404, URI too long.
            except SPARQLWrapperException as err:
                raise SparqlError(
                    f"SPARQL endpoint {self.name} rejected the query: {err}"
                ) from err
            else:
                try:
                    return [
                        _row_from_json(row) for row in result["results"]["bindings"]
                    ]
                except (TypeError, KeyError) as err:
                    raise SparqlError(
                        f"SPARQL endpoint {self.name} returned no SPARQL JSON results"
                    ) from err
            if attempt < self.max_attempts:
                delay = self.backoff_s * 2 ** (attempt - 1)
                logger.warning(
                    "SPARQL endpoint %s failed (attempt %d/%d: %s); retrying in %.1f s",
                    self.name,
                    attempt,
                    self.max_attempts,
                    type(last_error).__name__,
                    delay,
                )
                time.sleep(delay)
        raise SparqlError(
            f"SPARQL endpoint {self.name} failed after {self.max_attempts} attempts: {last_error}"
        )


def _row_from_json(row: dict[str, dict[str, str]]) -> dict[str, Term]:
    terms = {}
    for var, cell in row.items():
        is_literal = cell["type"] in ("literal", "typed-literal")
        terms[var] = Term(
            cell["value"], is_literal, cell.get("xml:lang"), cell.get("datatype")
        )
    return terms


def open_endpoint(spec: dict, credentials: dict | None = None) -> SparqlEndpoint:
    """Build an endpoint from its configuration.

    Args:
        spec: ``{"kind": "embedded", "files": [...]}`` or
            ``{"kind": "http", "url": ..., "timeout_s": ..., "max_attempts": ...,
            "backoff_s": ...}``.
        credentials: optional ``{"user": ..., "password": ...}`` from conf/local.
    """
    kind = spec.get("kind")
    if kind == "embedded":
        return EmbeddedEndpoint.from_files(spec["files"])
    if kind == "http":
        credentials = credentials or {}
        return HttpEndpoint(
            spec["url"],
            timeout_s=spec.get("timeout_s", 60.0),
            max_attempts=spec.get("max_attempts", 4),
            backoff_s=spec.get("backoff_s", 1.0),
            user=credentials.get("user"),
            password=credentials.get("password"),
        )
    raise ValueError(f"sparql endpoint kind must be 'embedded' or 'http', got {kind!r}")
