"""The LLM judge: verdicts, its cache, and what a dead or babbling endpoint leaves."""

from __future__ import annotations

import socket

import openai
import pandas as pd
import pytest

from kebench.project import PROJECT_ROOT, load_config
from kebench.qa.chat_server import ChatModel, serve_chat
from kebench.qa.llm_questions import CachedChat, LlmSettings, ResponseCache
from kebench.scoring.judge import GenerationJudge, judgement_table, verdict

PROMPT = load_config({}, PROJECT_ROOT)["parameters"]["evaluation"]["judge"]["prompt"]

GENERATIONS = pd.DataFrame(
    {
        "model": "m",
        "method": "ROME",
        "case_id": "c",
        "probe_id": ["c/multihop/0", "c/direct/0", "c/locality/0"],
        "probe_type": ["multihop", "direct", "locality"],
        "prompt": ["Q: capital?\nA:", "Obama is a citizen of", "Paris is in"],
        "question": ["What is the capital of Canada?", None, None],
        "expected": ["Ottawa", "Canada", "France"],
        "generation": ["The answer is Ottawa", "", "France"],
    }
)
PROBES = pd.DataFrame(
    {
        "probe_id": ["c/multihop/0", "c/direct/0", "c/locality/0"],
        "aliases_new": ['["Ottawa, Ontario"]', None, None],
    }
)


def judge_at(url: str, cache, attempts: int = 2) -> GenerationJudge:
    client = openai.OpenAI(base_url=url, api_key="local", timeout=30, max_retries=0)
    settings = LlmSettings(
        model="judge", max_tokens=4, max_attempts=attempts, backoff_s=0
    )
    return GenerationJudge(CachedChat(client, settings, ResponseCache(cache)), PROMPT)


def test_the_verdict_is_the_first_of_correct_and_incorrect():
    assert verdict("CORRECT") == 1.0
    assert verdict("  incorrect.") == 0.0
    assert verdict("Grade: Correct (it names Ottawa)") == 1.0
    with pytest.raises(ValueError, match="no CORRECT or INCORRECT"):
        verdict("Ottawa")


def test_a_prompt_without_its_fields_is_refused(tmp_path):
    chat = CachedChat(None, LlmSettings(model="x"), ResponseCache(tmp_path))
    with pytest.raises(ValueError, match=r"lacks the fields \['\{aliases\}'\]"):
        GenerationJudge(chat, "{question} {expected} {answer}")


class Babbler:
    """A chat model that never gives a verdict."""

    name = "babbler"

    def reply(self, messages, max_tokens, temperature) -> str:  # noqa: ARG002
        return "Ottawa is a lovely city"


def test_garbage_replies_leave_the_generation_unjudged_with_the_reason(tmp_path):
    with serve_chat(Babbler()) as (url, served):
        table = judgement_table(GENERATIONS, PROBES, judge_at(url, tmp_path))
    rows = table.set_index("probe_id")
    # the empty answer is incorrect without asking, the kept locality answer right;
    # the multi-hop answer was tried twice
    assert rows.loc["c/direct/0", "judge"] == 0.0
    assert rows.loc["c/locality/0", "judge"] == 1.0
    assert served[0] == 2  # noqa: PLR2004
    assert rows.loc["c/multihop/0", "judge"] != rows.loc["c/multihop/0", "judge"]  # NaN
    assert "no CORRECT or INCORRECT" in rows.loc["c/multihop/0", "reason"]
    assert not list(tmp_path.iterdir())  # garbage is never cached


def test_a_dead_endpoint_leaves_each_generation_unjudged_and_nothing_else_lost(
    tmp_path,
):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    table = judgement_table(
        GENERATIONS, PROBES, judge_at(f"http://127.0.0.1:{port}/v1", tmp_path)
    )
    assert len(table) == len(GENERATIONS)
    unjudged = table[table["judge"].isna()]
    # the locality answer is the base model's own: kept without asking
    assert list(unjudged["probe_id"]) == ["c/multihop/0"]
    assert unjudged["reason"].str.contains("APIConnectionError").all()
    assert table.set_index("probe_id").loc["c/locality/0", "judge"] == 1.0


@pytest.mark.model
@pytest.mark.server
def test_smollm2_judges_through_the_local_chat_server_and_is_cached(lm, tmp_path):
    with serve_chat(ChatModel(lm.model, lm.tokenizer, "smollm2-135m")) as (url, served):
        first = judgement_table(GENERATIONS, PROBES, judge_at(url, tmp_path, 3))
        asked = served[0]
        again = judgement_table(GENERATIONS, PROBES, judge_at(url, tmp_path, 3))
    # every generation is judged or unjudged with a reason, never lost
    assert len(first) == len(GENERATIONS)
    assert (first["judge"].isna() == first["reason"].notna()).all()
    assert asked >= 1  # the multi-hop answer, retried on garbage
    # what was judged comes back from the cache without a request
    judged = first["judge"].notna()
    pd.testing.assert_series_equal(first["judge"][judged], again["judge"][judged])
    assert served[0] - asked == (~judged).sum() * 3
