"""The SPARQL layer: escaping, both endpoint kinds, failures of a remote endpoint."""

from __future__ import annotations

import socket
import threading

import pyoxigraph as ox
import pytest

from kebench.kg.sparql import (
    RDFS_LABEL,
    EmbeddedEndpoint,
    HttpEndpoint,
    SparqlError,
    iri_term,
    literal_term,
    open_endpoint,
    redact_url,
)
from tests.helpers import make_store

TRICKY = 'He said "hi" <b>\nthen left \\ } UNION { ?s ?p ?o }'


def test_iri_term_rejects_what_would_break_a_query():
    assert (
        iri_term("http://dbpedia.org/resource/Côte_d'Ivoire")
        == "<http://dbpedia.org/resource/Côte_d'Ivoire>"
    )
    for bad in ("http://x/a b", "http://x/a>b", "no scheme"):
        with pytest.raises(ValueError):
            iri_term(bad)


def test_literal_term_round_trips_through_a_query():
    store = make_store([("http://x/e", RDFS_LABEL, ox.Literal(TRICKY, language="en"))])
    endpoint = EmbeddedEndpoint(store)
    rows = endpoint.select(
        f"SELECT ?e WHERE {{ ?e <{RDFS_LABEL}> {literal_term(TRICKY, 'en')} }}"
    )
    assert [row["e"].value for row in rows] == ["http://x/e"]
    assert endpoint.queries_sent == 1


def test_redact_url_drops_credentials():
    assert (
        redact_url("https://me:secret@example.org:8890/sparql?x=1")
        == "https://example.org:8890/sparql"
    )


def test_credentials_in_the_url_are_refused():
    with pytest.raises(ValueError, match="not in the URL") as err:
        HttpEndpoint("https://me:secret@example.org/sparql")
    assert "secret" not in str(err.value)


def test_open_endpoint_rejects_unknown_kind():
    with pytest.raises(ValueError, match="embedded' or 'http'"):
        open_endpoint({"kind": "ftp"})


def test_embedded_endpoint_names_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.nt"):
        EmbeddedEndpoint.from_files([tmp_path / "missing.nt"])


def test_dead_endpoint_fails_after_bounded_retries(caplog):
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/query"
    endpoint = HttpEndpoint(
        url, timeout_s=2, max_attempts=3, backoff_s=0.01, user="me", password="pw"
    )
    with pytest.raises(SparqlError) as err:
        endpoint.select("SELECT * WHERE { ?s ?p ?o } LIMIT 1")
    message = str(err.value)
    assert f"http://127.0.0.1:{port}/query" in message and "3 attempts" in message
    assert "pw" not in message and "pw" not in caplog.text
    assert caplog.text.count("retrying") == 2


def test_hanging_endpoint_times_out():
    """A real server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept_and_hang() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept_and_hang, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.getsockname()[1]}/query"
    try:
        endpoint = HttpEndpoint(url, timeout_s=1, max_attempts=2, backoff_s=0.01)
        with pytest.raises(SparqlError, match=f"{url} failed after 2 attempts"):
            endpoint.select("SELECT * WHERE { ?s ?p ?o } LIMIT 1")
        assert len(accepted) == 2
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()
