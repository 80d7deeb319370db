"""score_pass on the real SmolLM2: what it refuses, and the probe it names."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd
import pytest

from kebench.scoring.context import PromptContext
from kebench.scoring.evaluate import (
    ScoringSettings,
    greedy_answers,
    plan_shards,
    require_scored,
    score_pass,
    stored_shard_plan,
)
from kebench.scoring.generation import GenerationSettings, generate_answers
from tests.compute.test_engine import manifest
from tests.scoring.test_generation import greedy_by_hand
from tests.scoring.test_logprobs import plain_logprob


def probes(answer_old: str | None, answer_new: str) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "probe_id": ["p-ok", "p-bad"],
            "probe_type": ["direct", "direct"],
            "prompt": ["The capital of France is", "Barack Obama is a citizen of"],
            "question": [None, None],
            "form": ["cloze", "cloze"],
            "answer_old": ["Paris", answer_old],
            "answer_new": ["Lyon", answer_new],
        }
    )


@pytest.mark.model
def test_scores_both_answers_and_leaves_unknown_old_answers_empty(lm):
    scores = score_pass(lm, probes(None, "Kenya"))
    assert scores["lp_old"].isna().tolist() == [False, True]
    assert (scores["lp_new"] < 0).all()
    assert scores["n_tokens_old"].tolist()[1] == 0


@pytest.mark.model
@pytest.mark.parametrize(("answer_old", "answer_new"), [("", "Kenya"), ("USA", "  ")])
def test_an_empty_answer_is_refused_naming_its_probe(lm, answer_old, answer_new):
    with pytest.raises(ValueError, match=r"empty answer.*\['p-bad'\]"):
        score_pass(lm, probes(answer_old, answer_new))


@pytest.mark.model
def test_an_answer_past_the_context_is_refused_naming_its_probe(lm):
    too_long = " and" * lm.model.config.max_position_embeddings
    with pytest.raises(ValueError, match="probe 'p-bad' cannot be scored.*context"):
        score_pass(lm, probes(too_long, "Kenya"))


@pytest.mark.model
def test_a_free_generation_is_scored_only_for_the_configured_types(lm):
    """The wild columns hold the answer ``generate_answers`` gives the same prompt
    after the in-context prefix; other probe types get none."""
    asked = probes("Paris", "Lyon").assign(
        probe_type=["direct", "locality"], question=[None, None], form="cloze"
    )
    wild = GenerationSettings(max_new_tokens=6)
    settings = ScoringSettings(wild=wild, wild_types=("direct",))
    scores = score_pass(lm, asked, PromptContext("Answer in one word. "), settings)
    (expected,) = generate_answers(
        lm, ["The capital of France is"], wild, "Answer in one word. "
    )
    assert scores["wild_text"].tolist()[0] == expected.text
    assert scores["wild_stop"].tolist()[0] == expected.stop
    assert pd.isna(scores["wild_text"].tolist()[1])


def test_edits_the_evaluation_did_not_score_are_refused_by_name():
    """ROME's c2 succeeded but has no scores; c3 failed (it has none by design), and
    IKE's c1 is scored: the error names c2 alone, and the parameter."""
    edits = pd.DataFrame(
        {
            "method": ["ROME", "ROME", "ROME", "IKE"],
            "case_id": ["c1", "c2", "c3", "c1"],
            "status": ["ok", "ok", "failed", "ok"],
        }
    )
    scores = pd.DataFrame(
        {"method": ["ROME", "IKE", "unedited"], "case_id": ["c1", "c1", "c2"]}
    )
    with pytest.raises(
        ValueError,
        match=r"^stealthiness\.n_edits picks .*\(ROME: c2 \(1\)\).*"
        r"--params=method=ROME,n_edits=",
    ):
        require_scored(edits, scores, "stealthiness.n_edits")
    require_scored(edits[edits["case_id"] != "c2"], scores, "stealthiness.n_edits")
    many = pd.DataFrame(
        {"method": "ROME", "case_id": [f"c{i}" for i in range(7)], "status": "ok"}
    )
    with pytest.raises(ValueError, match=r"ROME: c0, c1, c2, c3, c4 \.\.\. \(7\)"):
        require_scored(many, scores.iloc[:0], "mitigation.n_edits")


@pytest.mark.model
@pytest.mark.parametrize("prefix", ["", "New Fact: The capital of France is Lyon\n"])
def test_a_generated_prompt_is_run_once_for_its_answers_and_its_generations(lm, prefix):
    """Teacher forcing continues the free generation's prefill: every prompt is
    prefilled once, and the scores are still those of a plain forward pass of the
    whole text."""
    asked = pd.DataFrame(
        {
            "probe_id": ["d", "p", "l"],
            "probe_type": ["direct", "paraphrase", "locality"],
            "prompt": [
                "The capital of France is",
                "France's capital city is called",
                "The capital of Peru is",
            ],
            "answer_old": ["Paris", "Paris", "Lima"],
            "answer_new": ["Lyon", "Lyon", "Lima"],
            "question": [None, None, None],
            "form": ["cloze", "cloze", "cloze"],
        }
    )
    settings = ScoringSettings(
        generate_types=("direct",),
        max_new_tokens=8,
        wild=GenerationSettings(max_new_tokens=12),
        wild_types=("direct", "paraphrase", "locality"),
    )
    prefilled = []

    def record(_module, _args, kwargs):
        if kwargs["input_ids"].shape[1] > 1:  # not a decoding step
            prefilled.extend(kwargs["input_ids"].tolist())

    hook = lm.model.register_forward_pre_hook(record, with_kwargs=True)
    try:
        scores = score_pass(lm, asked, PromptContext(prefix), settings)
    finally:
        hook.remove()
    # the three prompts, once each (after the prefix's one pass, where one is cached)
    texts = [lm.tokenizer.decode(row, skip_special_tokens=True) for row in prefilled]
    for prompt in asked["prompt"]:
        assert sum(text.endswith(prompt) for text in texts) == 1, prompt
    for row, probe in zip(scores.itertuples(), asked.itertuples(), strict=True):
        for side in ("old", "new"):
            expected, _ = plain_logprob(
                lm, prefix + probe.prompt, getattr(probe, f"answer_{side}")
            )
            assert getattr(row, f"lp_{side}") == pytest.approx(expected, abs=1e-4)
    (alone,) = generate_answers(lm, [asked["prompt"][0]], settings.wild, prefix)
    assert scores["wild_text"].tolist()[0] == alone.text


def test_an_unknown_question_context_is_refused_naming_the_parameter():
    with pytest.raises(ValueError, match="evaluation.question_context 'poem'"):
        ScoringSettings(question_context="poem")


@pytest.mark.model
def test_gen_answers_are_the_first_line_of_eight_greedy_tokens(lm):
    """Protocol ``gen`` decodes its 8 tokens whole (no stop, no sentence end) and
    keeps the first line: the greedy oracle's."""
    prompts = ["The capital of France is", "Barack Obama is a citizen of"]
    answers = greedy_answers(lm, prompts, 8)
    for prompt, answer in zip(prompts, answers, strict=True):
        tokens = greedy_by_hand(lm, prompt, 8)
        kept = tokens[:-1] if lm.tokenizer.eos_token_id in tokens else tokens
        text = lm.tokenizer.decode(kept, skip_special_tokens=True)
        assert answer == text.strip().split("\n")[0]


def stored_shards(plan: pd.DataFrame) -> dict[str, Callable[[], pd.DataFrame]]:
    """Each shard of ``plan`` as the store loads it: two probe rows per case."""
    return {
        key: lambda rows=rows: pd.DataFrame({"case_id": rows["case_id"].repeat(2)})
        for key, rows in plan.groupby("shard")
    }


def found_shards(found: pd.DataFrame) -> list[list[str]]:
    """The cases found in each stored shard, sorted."""
    return sorted(found.groupby("shard")["case_id"].agg(sorted))


def test_stored_scores_are_found_per_edit_whatever_run_cut_the_shards():
    """Issue 49: a run of ROME's five edits stored shards of two. A later run of two
    of them plans other keys, so it would not find them; every edit is still found in
    the shard that holds it, and only while that shard is current."""
    rome = manifest("ROME", "single", 5)
    salt = {"batch_size": 16}
    content = dict.fromkeys(rome["case_id"], "v1")
    stored = stored_shards(plan_shards(rome, 2, salt, content=content))
    later = plan_shards(rome[rome["case_id"].isin(["ROME-1", "ROME-2"])], 2, salt)
    assert not set(later["shard"]) & set(stored)
    by_hand = [["ROME-0", "ROME-1"], ["ROME-2", "ROME-3"], ["ROME-4"]]
    found = stored_shard_plan(rome, stored, salt, content=content)
    assert found_shards(found) == by_hand
    assert found.drop(columns="shard").equals(rome)
    # the later run's shard stored too: ROME-1 and ROME-2 are found once each
    both = stored | stored_shards(plan_shards(later, 2, salt, content=content))
    twice = stored_shard_plan(rome, both, salt, content=content)
    assert sorted(twice["case_id"]) == sorted(rome["case_id"])
    # stale: other settings; new probes of ROME-3; ROME-4 edited again; ROME-4 gone
    assert stored_shard_plan(rome, stored, {"batch_size": 8}, content=content).empty
    new_probes = content | {"ROME-3": "v2"}
    assert found_shards(stored_shard_plan(rome, stored, salt, content=new_probes)) == [
        ["ROME-0", "ROME-1"],
        ["ROME-4"],
    ]
    redone = rome.assign(fingerprint=rome["fingerprint"].replace("fp-ROME-4", "new"))
    for edits in (redone, rome.iloc[:4]):
        found = stored_shard_plan(edits, stored, salt, content=content)
        assert found_shards(found) == by_hand[:2]


def test_a_stored_shard_of_a_batch_or_a_sequential_run_is_found_whole():
    """A batch's cases share their delta; a sequential run's cases see all of it: a
    shard that a run of only the first two sequential edits stored is not current for
    the run of three that the store now holds."""
    memit = manifest("MEMIT", "batch", 6, batch=3)
    ft = manifest("FT-L", "sequential", 3)
    edits = pd.concat([memit, ft], ignore_index=True)
    stored = stored_shards(plan_shards(edits, 2))
    found = stored_shard_plan(edits, stored)
    assert found_shards(found) == [
        ["FT-L-0", "FT-L-1"],
        ["FT-L-2"],
        ["MEMIT-0", "MEMIT-1", "MEMIT-2"],
        ["MEMIT-3", "MEMIT-4", "MEMIT-5"],
    ]
    partial = stored_shards(plan_shards(ft.iloc[:2], 2))
    assert stored_shard_plan(ft, partial).empty
    # a shard is read for its own method and mode only
    assert stored_shard_plan(ft.assign(method="FT-M"), stored).empty
