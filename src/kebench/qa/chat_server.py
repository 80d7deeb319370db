"""A minimal OpenAI-compatible chat server over a local causal LM.

It serves ``POST /v1/chat/completions`` (greedy or sampled generation with the
model's chat template) on 127.0.0.1, so the LLM question generator can run offline
against the default model, and its tests talk to a real HTTP server. For real work,
point the generator at vLLM, a llama.cpp server or a hosted API instead.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


class ChatModel:
    """Generation with a chat template, one request at a time."""

    def __init__(
        self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, name: str
    ) -> None:
        self.model, self.tokenizer, self.name = model, tokenizer, name
        self._lock = threading.Lock()

    def reply(
        self, messages: list[dict[str, str]], max_tokens: int, temperature: float
    ) -> str:
        inputs = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        sampling = (
            {"do_sample": True, "temperature": temperature}
            if temperature > 0
            else {"do_sample": False}
        )
        with self._lock, torch.no_grad():
            output = self.model.generate(
                **inputs,
                max_new_tokens=max_tokens,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                **sampling,
            )
        return self.tokenizer.decode(
            output[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True
        )


def _handler(chat: ChatModel, counter: list[int]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            if self.path.rstrip("/") not in (
                "/v1/chat/completions",
                "/chat/completions",
            ):
                self._send(404, {"error": {"message": f"no route {self.path}"}})
                return
            counter[0] += 1
            try:
                body = json.loads(
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                )
                content = chat.reply(
                    body["messages"],
                    int(body.get("max_tokens") or 128),
                    float(body.get("temperature") or 0.0),
                )
            except (KeyError, TypeError, ValueError) as err:
                self._send(400, {"error": {"message": f"bad request: {err}"}})
                return
            self._send(
                200,
                {
                    "id": f"chatcmpl-{counter[0]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": chat.name,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": 0,
                        "completion_tokens": 0,
                        "total_tokens": 0,
                    },
                },
            )

        def _send(self, status: int, payload: dict) -> None:
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002
            """Quiet: requests are counted, not logged to stderr."""

    return Handler


@contextmanager
def serve_chat(
    chat: ChatModel, host: str = "127.0.0.1", port: int = 0
) -> Iterator[tuple[str, list[int]]]:
    """Serve ``chat`` in a background thread; yield (base URL, [requests served])."""
    counter = [0]
    server = ThreadingHTTPServer((host, port), _handler(chat, counter))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{host}:{server.server_address[1]}/v1", counter
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
