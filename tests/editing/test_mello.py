"""MeLLo the method: its delta is a memory of new facts, stored as format 4, and
deltas applied together give one context (kebench.scoring.context)."""

from __future__ import annotations

import json

import pytest
from safetensors.torch import save_file

from kebench.editing.delta import FORMAT_MEMORY, Delta, load_delta, save_delta
from kebench.editing.interface import EditContext
from kebench.editing.methods.mello import MelloSettings
from kebench.editing.registry import get_method
from kebench.editing.requests import EditRequest
from kebench.scoring.context import PromptContext, prompt_context
from tests.editing.cases import project_hparams

REQUESTS = [
    EditRequest("c1", "The capital of {} is", "France", "Paris", "Lyon"),
    EditRequest("c2", "{} is a citizen of", "Barack Obama", "USA", "Kenya"),
]


def edit(requests, values=None, tmp_path=None):
    method = get_method("MeLLo")
    hparams = method.hparams.from_dict(values or project_hparams()["MeLLo"])
    context = EditContext(stats_dir=tmp_path, pool=REQUESTS)
    # MeLLo reads no model: its memory is the requests' text
    return method.compute(None, requests, hparams, context)


def test_the_memory_holds_each_new_fact_as_mquake_writes_it(tmp_path):
    delta = edit(REQUESTS, tmp_path=tmp_path)
    assert delta.memory == [
        "The capital of France is Lyon",
        "Barack Obama is a citizen of Kenya",
    ]
    assert not delta.params and not delta.prefix
    # the fast profile's settings travel with the delta, for the scorer
    settings = MelloSettings.from_json(delta.meta["mello"])
    assert settings == MelloSettings(retriever="bm25", max_hops=4, max_new_tokens=48)
    assert get_method("MeLLo").batchable


def test_bad_settings_are_refused_before_any_edit(tmp_path):
    with pytest.raises(ValueError, match="retriever 'dense'"):
        edit(REQUESTS[:1], {"retriever": "dense"}, tmp_path)


def test_a_memory_round_trips_through_format_4(tmp_path):
    delta = edit(REQUESTS, tmp_path=tmp_path)
    save_delta(delta, tmp_path / "d.safetensors")
    loaded = load_delta(tmp_path / "d.safetensors")
    assert loaded == delta
    assert FORMAT_MEMORY.encode() in (tmp_path / "d.safetensors").read_bytes()[:4096]
    # a delta without a memory keeps its older format
    save_delta(Delta(prefix="x"), tmp_path / "p.safetensors")
    assert b"kebench-delta/1" in (tmp_path / "p.safetensors").read_bytes()[:4096]


def test_a_malformed_memory_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "bad.safetensors"
    header = {
        "format": FORMAT_MEMORY,
        "params": "{}",
        "prefix": "",
        "memory": json.dumps({"not": "a list"}),
        "meta": "{}",
    }
    save_file({}, str(path), metadata=header)
    with pytest.raises(ValueError, match=f"{path}: its memory is not a list"):
        load_delta(path)


def test_memories_applied_together_pool_in_order_once_each(tmp_path):
    first, second = (edit([r], tmp_path=tmp_path) for r in REQUESTS)
    again = edit(REQUESTS[:1], tmp_path=tmp_path)
    context = prompt_context([first, second, again])
    assert context == PromptContext(
        memory=("The capital of France is Lyon", "Barack Obama is a citizen of Kenya"),
        mello=MelloSettings(max_new_tokens=48),
    )
    # weight deltas add no context; a lone prefix is kept as it is
    assert prompt_context([Delta(), Delta(prefix="New Fact: x\nPrompt: ")]) == (
        PromptContext(prefix="New Fact: x\nPrompt: ")
    )


def test_a_memory_cannot_join_a_prefix_or_other_settings(tmp_path):
    memory = edit(REQUESTS[:1], tmp_path=tmp_path)
    with pytest.raises(ValueError, match="prefix and a MeLLo memory"):
        prompt_context([memory, Delta(prefix="New Fact: x\nPrompt: ")])
    other = edit(REQUESTS[1:], {"max_hops": 2}, tmp_path)
    with pytest.raises(ValueError, match="one set of settings"):
        prompt_context([memory, other])
