"""The store of base-model scores: what makes a key, and that a stored row is reused."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from kebench.scoring.base_store import (
    KEY,
    reuse_scores,
    score_keys,
    weights_digest,
)
from tests.editing.cases import tiny_gpt2

PROBES = pd.DataFrame(
    {
        "prompt": ["The capital of France is", "The capital of Peru is"],
        "answer_new": ["Lyon", "Cusco"],
        "answer_old": ["Paris", None],
        "probe_type": ["direct", "entailed"],
    },
    index=[10, 11],
)
TEXTS = ["prompt", "answer_new", "answer_old"]


@pytest.mark.model
def test_the_digest_follows_the_weights_and_nothing_else(lm):
    tiny = tiny_gpt2(lm)
    twin = tiny_gpt2(lm)  # same seed: the same weights in another module
    assert weights_digest(tiny) == weights_digest(twin)
    assert weights_digest(tiny) != weights_digest(lm)
    other = tiny_gpt2(lm)
    with torch.no_grad():
        # one element of one matrix, in a module whose digest was never asked
        other.model.transformer.h[0].mlp.c_proj.weight[0, 0] += 1e-3
    assert weights_digest(other) != weights_digest(tiny)


@pytest.mark.model
def test_a_key_changes_with_a_token_a_setting_or_a_type_only(lm):
    settings = {"batch_size": 16}
    keys = score_keys(lm, PROBES, TEXTS, ["probe_type"], settings)
    assert list(keys.index) == [10, 11] and keys.nunique() == 2
    assert keys.equals(score_keys(lm, PROBES.copy(), TEXTS, ["probe_type"], settings))
    changed = {
        "a text": (PROBES.assign(answer_new=["Lyons", "Cusco"]), settings),
        "a setting": (PROBES, {"batch_size": 8}),
        "a type": (PROBES.assign(probe_type=["paraphrase", "entailed"]), settings),
    }
    for what, (probes, chosen) in changed.items():
        other = score_keys(lm, probes, TEXTS, ["probe_type"], chosen)
        assert other[10] != keys[10], what
        assert (other[11] == keys[11]) == (what != "a setting"), what
    # no old answer is not an empty old answer
    empty = score_keys(lm, PROBES.fillna(""), TEXTS, ["probe_type"], settings)
    assert empty[11] != keys[11] and empty[10] == keys[10]


def test_stored_rows_are_read_and_only_the_others_scored():
    asked: list[list[str]] = []

    def square(rows: pd.DataFrame) -> pd.DataFrame:
        asked.append(list(rows["x"]))
        return pd.DataFrame({"y": rows["n"] ** 2}, index=rows.index)

    first = pd.DataFrame({"x": ["a", "b"], "n": [2, 3]}, index=[5, 6])
    scores, partition = reuse_scores({}, first["x"].rename(KEY), first, square)
    assert list(scores["y"]) == [4, 9] and list(scores.index) == [5, 6]
    (rows,) = partition.values()
    stored = {"p1": lambda: rows}
    # a repeat within the call is scored once; stored keys are not scored again
    second = pd.DataFrame({"x": ["c", "b", "c", "a"], "n": [4, 0, 4, 0]})
    scores, partition = reuse_scores(stored, second["x"].rename(KEY), second, square)
    assert asked == [["a", "b"], ["c"]]
    # the stored value is returned even where the row's other columns differ: the key
    # is all that identifies a score
    assert list(scores["y"]) == [16, 9, 16, 4]
    (new_rows,) = partition.values()
    assert list(new_rows[KEY]) == ["c"]
    # everything stored: nothing scored, nothing to store
    stored["p2"] = lambda: new_rows
    _, partition = reuse_scores(stored, second["x"].rename(KEY), second, square)
    assert partition == {} and len(asked) == 2
