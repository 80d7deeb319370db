"""The LLM question writer against real HTTP servers on 127.0.0.1.

The scripted and broken servers are real HTTP servers (``kebench.qa.chat_server`` or a
raw socket server); only the text they reply is fixed. The SmolLM2-backed test is in
``test_llm_questions_model.py``.
"""

from __future__ import annotations

import socket
import threading
import time

import openai
import pytest

from kebench.qa.chat_server import serve_chat
from kebench.qa.llm_questions import (
    LlmQuestionWriter,
    LlmSettings,
    ResponseCache,
    normalise,
)

PROMPT = "Rules:\n{rules}\nFacts:\n{facts}\n"
RULE = ["?g  citizenship  ?b  ?g  spouse  ?a   => ?a  citizenship  ?b"]
FACTS = [
    ["Barack Obama", "citizenship", "Canada"],
    ["Barack Obama", "spouse", "Michelle Obama"],
]


class ScriptedChat:
    """Replies with fixed texts, in turn; stands in for the model, not for the server."""

    name = "scripted"

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)

    def reply(self, messages, max_tokens, temperature) -> str:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def writer_for(
    url: str, cache_dir, timeout_s: float = 5.0, attempts: int = 2
) -> LlmQuestionWriter:
    client = openai.OpenAI(
        base_url=url, api_key="local", timeout=timeout_s, max_retries=0
    )
    settings = LlmSettings(model="scripted", max_attempts=attempts, backoff_s=0.01)
    return LlmQuestionWriter(client, settings, ResponseCache(cache_dir), PROMPT)


def test_valid_answer_is_kept_and_cached(tmp_path):
    good = "<question>Which country is the spouse of Barack Obama a citizen of?</question>\n<answer>Canada</answer>"
    with serve_chat(ScriptedChat(good)) as (url, served):
        writer = writer_for(url, tmp_path)
        assert writer.write(RULE, FACTS, "Canada") == (
            "Which country is the spouse of Barack Obama a citizen of?",
            None,
        )
        assert writer.write(RULE, FACTS, "Canada")[0] is not None
        assert served == [1]  # the second answer came from the cache
    assert len(list(tmp_path.glob("*.json"))) == 1


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        ("Canada, I think.", "no <question> and <answer>"),
        (
            "<question>Where?</question><answer>United States</answer>",
            "is not the derived entity 'Canada'",
        ),
        (
            "<question>Is it Canada?</question><answer>Canada</answer>",
            "gives the answer away",
        ),
    ],
)
def test_invalid_questions_are_rejected_with_the_reason(tmp_path, reply, reason):
    with serve_chat(ScriptedChat(reply)) as (url, _):
        question, why = writer_for(url, tmp_path).write(RULE, FACTS, "Canada")
    assert question is None and reason in why


def raw_server(behaviour: str):
    """A socket server that answers garbage or never answers, counting connections."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.1)
    hits: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            hits.append(conn)
            conn.recv(65536)
            if behaviour == "garbage":
                body = b"<html>surprise</html>"
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                    + str(len(body)).encode()
                    + b"\r\n\r\n"
                    + body
                )
                conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()

    def close() -> None:
        stop.set()
        thread.join()
        for conn in hits:
            conn.close()
        server.close()

    return f"http://127.0.0.1:{server.getsockname()[1]}/v1", hits, close


@pytest.mark.parametrize("behaviour", ["garbage", "silent"])
def test_broken_endpoint_is_retried_then_the_probe_is_skipped(tmp_path, behaviour):
    url, hits, close = raw_server(behaviour)
    try:
        question, reason = writer_for(url, tmp_path, timeout_s=0.5, attempts=3).write(
            RULE, FACTS, "Canada"
        )
        time.sleep(0.05)
    finally:
        close()
    assert question is None
    assert "no usable completion after 3 attempts" in reason
    assert len(hits) == 3
    assert not list(tmp_path.glob("*.json"))  # failures are never cached


def test_answer_normalisation():
    assert normalise("The  United States.") == normalise("united states")
    assert normalise("Côte d'Ivoire") == "côte d ivoire"
