"""The LLM question generator against a real OpenAI-compatible server serving SmolLM2."""

from __future__ import annotations

import openai
import pytest

from kebench.project import PROJECT_ROOT, load_config, run_pipeline
from kebench.qa.chat_server import ChatModel, serve_chat
from kebench.qa.entailment import llm_questions
from kebench.qa.llm_questions import LlmQuestionWriter, LlmSettings, ResponseCache


@pytest.fixture(scope="module")
def demo_qa(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("llm_qa")
    for name in ("kg_build", "rule_mining", "qa_generation"):
        catalog = run_pipeline(name, {"dataset": "demo"}, root)
    return catalog


@pytest.mark.model
@pytest.mark.server
def test_smollm2_writes_validated_questions_and_caches_them(lm, demo_qa, tmp_path):
    templated = demo_qa.load("entailed_questions").head(4)
    entailed, rules = demo_qa.load("entailed_facts"), demo_qa.load("rules_for_qa")
    settings = load_config({}, PROJECT_ROOT)["parameters"]["qa_generation"]["llm"]
    with serve_chat(ChatModel(lm.model, lm.tokenizer, "smollm2-135m")) as (url, served):
        client = openai.OpenAI(
            base_url=url, api_key="local", timeout=120, max_retries=0
        )

        def writer() -> LlmQuestionWriter:
            return LlmQuestionWriter(
                client,
                LlmSettings(
                    model="smollm2-135m", max_tokens=48, max_attempts=2, backoff_s=0.1
                ),
                ResponseCache(tmp_path / "cache"),
                settings["prompt"],
            )

        first = writer()
        kept, rejected = llm_questions(templated, entailed, rules, first)
        assert first.requests_sent == len(templated) == served[0]
        second = writer()
        again, rejected_again = llm_questions(templated, entailed, rules, second)
    assert second.requests_sent == 0 and served[0] == len(
        templated
    )  # all from the cache
    assert len(kept) + len(rejected) == len(templated)
    assert again.equals(kept) and rejected_again == rejected
    for row in kept.to_dict("records"):  # a kept question passed validation
        assert (
            row["generator"] == "llm"
            and row["answer_new"].lower() not in row["question"].lower()
        )
    for rejection in rejected:  # a small model's misses are rejected with the reason
        assert rejection["reason"]
