"""A real local SPARQL server: ``oxigraph serve-read-only`` over a store built from files.

Used to test and benchmark the HTTP endpoint path, and by ``kebench serve-kg``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pyoxigraph as ox

from kebench.kg.amie_export import read_dbpedia_tsv, triples_to_quads


class OxigraphServerError(RuntimeError):
    """The oxigraph server could not be started."""


def oxigraph_binary() -> str:
    """The ``oxigraph`` CLI installed beside this Python (PyPI package ``oxigraph``)."""
    beside = Path(sys.executable).with_name("oxigraph")
    found = str(beside) if beside.is_file() else shutil.which("oxigraph")
    if not found:
        raise OxigraphServerError(
            "the `oxigraph` command is missing: pip install oxigraph"
        )
    return found


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def to_ntriples(path: str | Path, target: str | Path) -> Path:
    """An N-Triples copy of a KG file (the paper's DBpedia TSV, Turtle, ...)."""
    path, target = Path(path), Path(target)
    if path.suffix == ".tsv":
        triples = (q.triple for q in triples_to_quads(read_dbpedia_tsv(path)))
    else:
        triples = ox.parse(
            path=str(path), format=ox.RdfFormat.from_extension(path.suffix[1:])
        )
    ox.serialize(triples, output=str(target), format=ox.RdfFormat.N_TRIPLES)
    return target


def load_store(files: Sequence[str | Path], location: str | Path) -> Path:
    """Build an on-disk Oxigraph store at ``location`` from KG files."""
    location = Path(location)
    location.mkdir(parents=True, exist_ok=True)
    for index, path in enumerate(map(Path, files)):
        nt = (
            path
            if path.suffix == ".nt"
            else to_ntriples(path, location.parent / f"{location.name}.{index}.nt")
        )
        subprocess.run(
            [oxigraph_binary(), "load", "--location", str(location), "--file", str(nt)],
            check=True,
            capture_output=True,
        )
    return location


def _wait_for_port(
    host: str, port: int, process: subprocess.Popen, timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise OxigraphServerError(
                f"oxigraph exited with code {process.returncode} at start"
            )
        with socket.socket() as sock:
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise OxigraphServerError(
        f"oxigraph did not listen on {host}:{port} within {timeout_s} s"
    )


@contextmanager
def serve(
    location: str | Path,
    host: str = "127.0.0.1",
    port: int | None = None,
    timeout_s: float = 30.0,
) -> Iterator[str]:
    """Serve a store read-only; yield its SPARQL query URL; stop the process group after."""
    port = port or free_port(host)
    process = subprocess.Popen(
        [
            oxigraph_binary(),
            "serve-read-only",
            "--location",
            str(location),
            "--bind",
            f"{host}:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        _wait_for_port(host, port, process, timeout_s)
        yield f"http://{host}:{port}/query"
    finally:
        stop_process_group(process)


def stop_process_group(process: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """Stop a server started with ``start_new_session``: its whole group, then wait."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
