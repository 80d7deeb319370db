"""The SPARQL endpoint a run queries: an embedded store or an HTTP URL."""

from __future__ import annotations

from typing import Any

from kedro.io import AbstractDataset, DatasetError

from kebench.datasets.edit_cases_dataset import source_spec
from kebench.kg.sparql import SparqlEndpoint, open_endpoint, redact_url


class SparqlEndpointDataset(AbstractDataset[None, SparqlEndpoint]):
    """Read-only handle on the source's KG endpoint, opened once per run.

    Args:
        source: the dataset source whose ``kg`` spec is used by default.
        sources: every configured source (``globals.yml``).
        url: an HTTP endpoint that overrides the source's KG (``--params endpoint=URL``);
            ``embedded`` or empty keeps the source's own.
        http: timeout and retry settings for HTTP endpoints.
        credentials: ``{"user": ..., "password": ...}`` from ``conf/local/credentials.yml``.
    """

    def __init__(  # noqa: PLR0913 - endpoint settings are keyword-only
        self,
        source: str,
        sources: dict[str, Any],
        *,
        url: str | None = None,
        http: dict[str, Any] | None = None,
        credentials: dict[str, Any] | None = None,
        metadata: dict | None = None,
    ) -> None:
        if url and url != "embedded":
            self._spec = {"kind": "http", "url": url, **(http or {})}
        else:
            self._spec = dict(source_spec(source, sources)["kg"])
            if self._spec.get("kind") == "http":
                self._spec = {**(http or {}), **self._spec}
        self._credentials = credentials
        self._endpoint: SparqlEndpoint | None = None
        self.metadata = metadata

    def load(self) -> SparqlEndpoint:
        # Loading an embedded store parses the KG; do it once, share the handle.
        if self._endpoint is None:
            try:
                self._endpoint = open_endpoint(self._spec, self._credentials)
            except (FileNotFoundError, ValueError) as err:
                raise DatasetError(f"cannot open the SPARQL endpoint: {err}") from err
        return self._endpoint

    def save(self, data: SparqlEndpoint) -> None:
        raise DatasetError("a SPARQL endpoint is read-only input")

    def _describe(self) -> dict[str, Any]:
        if self._spec["kind"] == "http":
            return {"kind": "http", "url": redact_url(self._spec["url"])}
        return {"kind": "embedded", "files": [str(f) for f in self._spec["files"]]}
