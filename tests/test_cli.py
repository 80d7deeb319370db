"""The user-facing `kebench` command."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path

import openai
import pyoxigraph as ox
import pytest
from click.testing import CliRunner

from kebench.cli import cli


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and "version" in result.output


def test_convert_kg_turns_a_dbpedia_dump_into_ntriples(tmp_path):
    dump = tmp_path / "dump.tsv"
    dump.write_text(
        "http://dbpedia.org/resource/A\thttp://dbpedia.org/ontology/p\tline one\nline two\n"
        "http://dbpedia.org/resource/A\thttp://dbpedia.org/ontology/q\thttp://dbpedia.org/resource/B\n",
        encoding="utf-8",
    )
    target = tmp_path / "dump.nt"
    result = CliRunner().invoke(cli, ["convert-kg", str(dump), str(target)])
    assert result.exit_code == 0, result.output
    objects = {
        t.object for t in ox.parse(path=str(target), format=ox.RdfFormat.N_TRIPLES)
    }
    assert objects == {
        ox.Literal("line one\nline two"),
        ox.NamedNode("http://dbpedia.org/resource/B"),
    }


def test_edits_prints_requests_and_probes_or_the_error(tmp_path):
    data = Path(__file__).parent / "kg" / "data"
    result = CliRunner().invoke(
        cli, ["edits", str(data / "zsre_mem_eval.json"), "--format", "zsre"]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    requests = [line["edit_request"] for line in lines if "edit_request" in line]
    probes = [line["probe"] for line in lines if "probe" in line]
    assert [r["target_new"] for r in requests] == ["Canada", "Dutch"]
    assert requests[0]["subject_uri"] is None
    assert len(probes) == 4  # noqa: PLR2004 - a rephrase and a locality question each
    broken = tmp_path / "broken.json"
    broken.write_text('[{"subject": "Ada Lovelace"}]')
    result = CliRunner().invoke(cli, ["edits", str(broken), "--format", "zsre"])
    assert result.exit_code == 1
    assert "broken.json: record #0 ('Ada Lovelace'): missing or empty field 'src'" in (
        result.output
    )


RIPPLE_ONE = Path(__file__).parent / "kg" / "data" / "rippleedits" / "one"


@pytest.mark.parametrize(
    ("name", "edit", "n_probes"),
    [
        (
            "popular",
            (
                "MOTHER",
                "Leonardo DiCaprio",
                "The name of the mother of {} is",
                "Irmelin Indenbirken",
                "Meryl Streep",
            ),
            4,
        ),
        (
            "random",
            (
                "CAPITAL",
                "Burkina Faso",
                "The name of the capital city of {} is",
                "Ouagadougou",
                "Bobo-Dioulasso",
            ),
            3,
        ),
        (  # the recent example adds a fact: no old target
            "recent",
            (
                "MEMBER_OF_SPORTS_TEAM",
                "Kylian Mbappé",
                "The name of the sports team which {} is a member of is",
                None,
                "Real Madrid CF",
            ),
            2,
        ),
    ],
)
def test_edits_reads_a_one_record_rippleedits_file(name, edit, n_probes):
    result = CliRunner().invoke(
        cli, ["edits", str(RIPPLE_ONE / f"{name}.json"), "--format", "rippleedits"]
    )
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    (request,) = [line["edit_request"] for line in lines if "edit_request" in line]
    fields = ("relation_id", "subject", "prompt", "target_true", "target_new")
    assert tuple(request[field] for field in fields) == edit
    assert len([line for line in lines if "probe" in line]) == n_probes


def test_edits_names_the_rippleedits_record_whose_relation_it_cannot_phrase(tmp_path):
    record = json.loads((RIPPLE_ONE / "random.json").read_text())[0]
    for fact in (record["edit"], record["edit"]["original_fact"]):
        fact["relation"] = "TWIN_CITY"
    path = tmp_path / "twin.json"
    path.write_text(json.dumps([record]))
    result = CliRunner().invoke(cli, ["edits", str(path), "--format", "rippleedits"])
    assert result.exit_code == 1
    assert "twin.json: record #0: relation 'TWIN_CITY' is not in the" in result.output


@pytest.mark.model
@pytest.mark.server
def test_serve_llm_answers_chat_completions_until_stopped():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # Ctrl-C as in a terminal: a test run launched as a background job of a script
    # inherits SIGINT ignored, and Python then never raises KeyboardInterrupt
    serve = (
        "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "from kebench.cli import cli\n"
        f"cli(['serve-llm', '--port', '{port}'])"
    )
    server = subprocess.Popen(  # noqa: S603 - our own CLI
        [sys.executable, "-c", serve],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        # Kedro's logging shares stdout: read on to the endpoint's line (or the end)
        line = ""
        for line in server.stdout:
            if line.startswith("chat endpoint:"):
                break
        assert line.startswith(f"chat endpoint: http://127.0.0.1:{port}/v1"), line
        client = openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="local", max_retries=0
        )
        reply = client.chat.completions.create(
            model="smollm2-135m",
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=4,
        )
        assert isinstance(reply.choices[0].message.content, str)
    finally:
        server.send_signal(signal.SIGINT)
        # read what it still logs: a full stdout pipe would block its shutdown
        server.communicate(timeout=30)
