"""Small real things that tests build: RDF stores from a few triples, project copies."""

from __future__ import annotations

import json
import random
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

import pyoxigraph as ox
import torch

from kebench.kg.oxigraph_server import stop_process_group
from kebench.project import PROJECT_ROOT


def make_store(triples: list[tuple[str, str, str | ox.Literal]]) -> ox.Store:
    """An in-memory store from (s, p, o) with IRIs as strings and literals as ox.Literal."""
    store = ox.Store()
    for s, p, o in triples:
        obj = o if isinstance(o, ox.Literal) else ox.NamedNode(o)
        store.add(ox.Quad(ox.NamedNode(s), ox.NamedNode(p), obj))
    return store


def copy_project(root: Path, model: tuple[str, Path] | None = None) -> Path:
    """Conf, code and demo data of the project in ``root``, for a real Kedro session.

    ``model``: (name, converted folder), linked under data/06_models so that the
    session does not convert the model again.
    """
    root.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", ".telemetry"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    shutil.copytree(
        PROJECT_ROOT / "conf", root / "conf", ignore=shutil.ignore_patterns("local")
    )
    (root / "conf" / "local").mkdir()
    shutil.copytree(
        PROJECT_ROOT / "src",
        root / "src",
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"),
    )
    shutil.copytree(
        PROJECT_ROOT / "data" / "01_raw" / "demo", root / "data" / "01_raw" / "demo"
    )
    if model is not None:
        name, folder = model
        (root / "data" / "06_models").mkdir(parents=True)
        (root / "data" / "06_models" / name).symlink_to(folder)
    return root


def ripple_project(root: Path, files: Sequence[Path]) -> Path:
    """A project copy (``copy_project``) whose only source, ``ripple``, reads the
    RippleEdits ``files`` and links them to the demo KG."""
    copy_project(root)
    # conf/local's `sources` replaces the base one in this copy: only this source
    (root / "conf" / "local" / "globals.yml").write_text(
        json.dumps(
            {
                "sources": {
                    "ripple": {
                        "edit_cases": {
                            "filepath": [str(f) for f in files],
                            "format": "rippleedits",
                            "risk": "counterfactual",
                        },
                        "kg": {"kind": "embedded", "files": ["data/01_raw/demo/kg.nt"]},
                    }
                }
            }
        )
    )
    return root


def free_port(ports: Sequence[int] = range(20000, 49147)) -> int:
    """A free local port among ``ports`` (by default below the OS's ephemeral range,
    which kedro-viz refuses)."""
    for port in random.sample(ports, 50):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free local port in {ports}")


def wait_for_json(
    url: str,
    process: subprocess.Popen,
    timeout_s: float = 120,
    body: dict | None = None,
) -> dict:
    """The JSON that ``url`` answers (to a POST of ``body`` if given), once the server
    ``process`` is up; an error if it exits or does not answer in time."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with code {process.returncode}")
        try:
            request = urllib.request.Request(url, data=data, headers=headers)
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.load(response)
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout_s} s")


def start_server(
    start: Callable[[], tuple[subprocess.Popen, str]], ready_path: str, log_path: Path
) -> tuple[subprocess.Popen, str, dict]:
    """Start a server (``start`` gives its process and base URL, logging to
    ``log_path``) and wait until ``ready_path`` answers JSON: (process, base URL, that
    JSON). One retry: a free port can be taken between choosing it and binding it."""
    for attempt in (1, 2):
        process, base = start()
        try:
            return process, base, wait_for_json(base + ready_path, process)
        except RuntimeError:
            stop_process_group(process, timeout_s=15)
            if attempt == 2:
                raise RuntimeError(log_path.read_text()[-3000:]) from None
    raise AssertionError("unreachable")


def plain_logprob(lm, prompt: str, answer: str) -> float:
    """log P(answer | prompt) one example at a time, with nothing but transformers:
    the checker of kebench's batched, cached scoring."""
    tokenizer = lm.tokenizer
    prompt_ids = tokenizer(prompt)["input_ids"]
    # a reply after a chat template's "assistant\n" starts without a space
    space = "" if prompt[-1:].isspace() else " "
    answer_ids = tokenizer(space + answer, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt_ids + answer_ids])
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return sum(
        float(logprobs[len(prompt_ids) - 1 + i, token])
        for i, token in enumerate(answer_ids)
    )


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def headless_chromium(url: str, profile: Path, *output: str) -> str:
    """Open ``url`` in headless Chromium (Debian's package) with a fresh profile, let
    its scripts run, and return what it prints: ``--dump-dom`` prints the rendered
    page, ``--screenshot=<file>`` writes one."""
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--window-size=1400,900",
            "--virtual-time-budget=20000",
            *output,
            url,
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout
