"""Questions written by an LLM behind any OpenAI-compatible chat endpoint.

The prompt follows the paper's: given the rule and the supporting facts, write one
multi-hop question whose answer is one entity of the facts, in
``<question>…</question><answer>…</answer>`` form. Each answer is validated: it must be
the derived entity, and the question must not give the answer away; otherwise the
question is rejected with the reason. Responses are cached on disk, keyed by a hash
of the request, so reruns cost nothing. Transport failures (refused, timed out, 5xx,
429, a body that is not a chat completion) are retried with backoff, then the probe
is skipped with the reason.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai

from kebench.atomic import atomic_path

logger = logging.getLogger(__name__)

_QUESTION = re.compile(r"<question>\s*(.*?)\s*</question>", re.DOTALL | re.IGNORECASE)
_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)
_RETRYABLE = (
    openai.APIConnectionError,  # refused, reset, timed out (APITimeoutError)
    openai.InternalServerError,
    openai.RateLimitError,
    openai.APIResponseValidationError,
    json.JSONDecodeError,
)


def normalise(text: str) -> str:
    """Answer normalisation for comparison: NFKC, case, articles, punctuation, spaces."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    text = re.sub(r"[^\w\s]", " ", text)
    return " ".join(text.split())


@dataclass(frozen=True)
class LlmSettings:
    """Which model to ask, and how patiently."""

    model: str
    max_tokens: int = 128
    temperature: float = 0.0
    max_attempts: int = 3
    backoff_s: float = 1.0

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> LlmSettings:
        """From a parameters block with these keys (others, e.g. the prompt, ignored)."""
        return cls(
            model=params["model"],
            max_tokens=int(params["max_tokens"]),
            temperature=float(params["temperature"]),
            max_attempts=int(params["max_attempts"]),
            backoff_s=float(params["backoff_s"]),
        )


class ResponseCache:
    """Completions on disk, one JSON file per request hash, written atomically."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    def _path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> str | None:
        path = self._path(key)
        return (
            json.loads(path.read_text(encoding="utf-8"))["content"]
            if path.is_file()
            else None
        )

    def put(self, key: str, content: str) -> None:
        with atomic_path(self._path(key)) as tmp:
            tmp.write_text(
                json.dumps({"content": content}, ensure_ascii=False), encoding="utf-8"
            )


class LlmError(RuntimeError):
    """The endpoint gave no usable completion within the allowed attempts."""


class CachedChat:
    """Completions of one model behind an OpenAI-compatible endpoint: from the disk
    cache, else asked with bounded retries and backoff (the module docstring)."""

    def __init__(
        self, client: openai.OpenAI, settings: LlmSettings, cache: ResponseCache
    ) -> None:
        self.client = client
        self.settings = settings
        self.cache = cache
        self.requests_sent = 0

    def complete(
        self, prompt: str, parse: Callable[[str], object] | None = None
    ) -> str:
        """The completion of ``prompt``. ``parse`` raises ``ValueError`` on a reply it
        cannot use (garbage): that reply is retried like a transport failure, and
        never cached."""
        request = {
            "model": self.settings.model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": self.settings.max_tokens,
            "temperature": self.settings.temperature,
        }
        key = hashlib.sha256(
            json.dumps(request, sort_keys=True).encode("utf-8")
        ).hexdigest()
        cached = self.cache.get(key)
        if cached is not None:
            return cached
        last_error: Exception | None = None
        for attempt in range(1, self.settings.max_attempts + 1):
            self.requests_sent += 1
            try:
                response = self.client.chat.completions.create(**request)
                content = response.choices[0].message.content
                if not isinstance(content, str):
                    raise ValueError("the completion has no message content")
                if parse is not None:
                    parse(content)
            # A body that is not a chat completion surfaces as a missing attribute,
            # index or type, depending on how it is malformed.
            except (
                *_RETRYABLE,
                ValueError,
                IndexError,
                AttributeError,
                TypeError,
            ) as err:
                last_error = err
                if attempt < self.settings.max_attempts:
                    delay = self.settings.backoff_s * 2 ** (attempt - 1)
                    logger.warning(
                        "LLM endpoint failed (attempt %d/%d: %s); retrying in %.1f s",
                        attempt,
                        self.settings.max_attempts,
                        type(err).__name__,
                        delay,
                    )
                    time.sleep(delay)
                continue
            self.cache.put(key, content)
            return content
        raise LlmError(
            f"no usable completion after {self.settings.max_attempts} attempts: "
            f"{type(last_error).__name__}: {last_error}"
        )


class LlmQuestionWriter:
    """Writes and validates one question per consequence."""

    def __init__(
        self,
        client: openai.OpenAI,
        settings: LlmSettings,
        cache: ResponseCache,
        prompt: str,
    ) -> None:
        self.chat = CachedChat(client, settings, cache)
        self.prompt = prompt

    @property
    def requests_sent(self) -> int:
        return self.chat.requests_sent

    def write(
        self, rules: list[str], facts: list[list[str]], answer: str
    ) -> tuple[str | None, str | None]:
        """``(question, None)`` for a valid question, else ``(None, reason)``."""
        prompt = self.prompt.format(
            rules="\n".join(rules),
            facts="\n".join(f"({s}, {r}, {o})" for s, r, o in facts),
        )
        try:
            content = self.chat.complete(prompt)
        except LlmError as err:
            return None, str(err)
        question, given = _QUESTION.search(content), _ANSWER.search(content)
        if not question or not given:
            return None, "the completion has no <question> and <answer>"
        if normalise(given.group(1)) != normalise(answer):
            return (
                None,
                f"answer {given.group(1)!r} is not the derived entity {answer!r}",
            )
        if normalise(answer) in normalise(question.group(1)):
            return None, "the question gives the answer away"
        return question.group(1), None
