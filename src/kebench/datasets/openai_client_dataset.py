"""A client for an OpenAI-compatible chat endpoint, with its key from credentials."""

from __future__ import annotations

from typing import Any

import openai
from kedro.io import AbstractDataset, DatasetError

from kebench.kg.sparql import redact_url


class OpenAIClientDataset(AbstractDataset[None, openai.OpenAI]):
    """Read-only: an ``openai.OpenAI`` client for ``base_url``.

    Args:
        base_url: the endpoint (OpenAI, vLLM, a llama.cpp server, ``kebench serve-llm``).
        timeout_s: per-request timeout; retries are the caller's (``max_retries=0``).
        credentials: ``{"api_key": ...}`` from conf/local or ``OPENAI_API_KEY``; local
            servers accept any key.
    """

    def __init__(
        self,
        base_url: str,
        timeout_s: float = 60.0,
        credentials: dict[str, Any] | None = None,
        metadata: dict | None = None,
    ) -> None:
        self._base_url = base_url
        self._timeout_s = timeout_s
        self._api_key = (credentials or {}).get("api_key") or "no-key"
        self.metadata = metadata

    def load(self) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self._base_url,
            api_key=self._api_key,
            timeout=self._timeout_s,
            max_retries=0,
        )

    def save(self, data: openai.OpenAI) -> None:
        raise DatasetError("an LLM client is read-only input")

    def _describe(self) -> dict[str, Any]:
        return {"base_url": redact_url(self._base_url), "timeout_s": self._timeout_s}
