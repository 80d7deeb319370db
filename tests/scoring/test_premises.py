"""Known premises scored on the real model, against a plain one-sequence computation."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from kebench.schemas import PREMISE_PROBES
from kebench.scoring.premises import known_probes, known_share, premise_knowledge
from tests.scoring.test_logprobs import plain_logprob

PREMISES = PREMISE_PROBES.validate(
    pd.DataFrame(
        [
            {
                "probe_id": "c1/direct/0",
                "case_id": "c1",
                "kind": "edit_fact",
                "subject": "France",
                "relation": "capital",
                "prompt": "The capital of France is",
                "answer": "Paris",
                "candidates": json.dumps(["Banana", "Lyon"]),
            },
            {
                "probe_id": "c1/entailed/0",
                "case_id": "c1",
                "kind": "premise",
                "subject": "Japan",
                "relation": "capital",
                "prompt": "The capital of Japan is",
                "answer": "Canberra",
                "candidates": json.dumps(["Tokyo"]),
            },
            {  # the same fact under another probe: scored once, counted once
                "probe_id": "c1/entailed/1",
                "case_id": "c1",
                "kind": "premise",
                "subject": "Japan",
                "relation": "capital",
                "prompt": "The capital of Japan is",
                "answer": "Canberra",
                "candidates": json.dumps(["Tokyo"]),
            },
            {  # nothing to beat
                "probe_id": "c1/entailed/1",
                "case_id": "c1",
                "kind": "premise",
                "subject": "Earth",
                "relation": "star",
                "prompt": "The Earth orbits the",
                "answer": "Sun",
                "candidates": "[]",
            },
        ]
    )
)


@pytest.mark.model
def test_known_means_the_kg_answer_beats_every_candidate(lm):
    table = premise_knowledge(lm, PREMISES, model="smollm2", batch_size=2)
    assert len(table) == len(PREMISES) and set(table["model"]) == {"smollm2"}
    for row in table.to_dict("records"):
        expected, _ = plain_logprob(lm, row["prompt"], row["answer"])
        assert row["lp_answer"] == pytest.approx(expected, abs=1e-4)
        others = json.loads(
            PREMISES.loc[
                (PREMISES["prompt"] == row["prompt"])
                & (PREMISES["answer"] == row["answer"]),
                "candidates",
            ].iloc[0]
        )
        plain = {c: plain_logprob(lm, row["prompt"], c)[0] for c in others}
        if plain:
            best = max(plain, key=plain.get)
            assert row["best_candidate"] == best
            assert row["lp_best_candidate"] == pytest.approx(plain[best], abs=1e-4)
            assert row["known"] == (expected > plain[best])
        else:
            assert row["known"] and row["n_candidates"] == 0
    # the model knows Paris and not that Japan's capital is Canberra
    known = dict(zip(table["probe_id"] + ":" + table["answer"], table["known"]))
    assert known["c1/direct/0:Paris"] and not known["c1/entailed/0:Canberra"]


def test_a_probe_is_known_when_all_its_premises_are():
    knowledge = PREMISES.assign(model="m", known=[True, True, False, True])
    probes = pd.DataFrame(
        {
            "probe_id": [
                "c1/direct/0",
                "c1/entailed/0",
                "c1/entailed/1",
                "c1/entailed/2",
                "c1/locality/0",
            ],
            "probe_type": ["direct", "entailed", "entailed", "entailed", "locality"],
        }
    )
    flags = known_probes(knowledge, probes)
    assert flags["c1/direct/0"] and flags["c1/entailed/0"]
    assert not flags["c1/entailed/1"]  # one of its two premises is unknown
    assert flags["c1/entailed/2"]  # no premise: rests on the edit alone
    assert pd.isna(flags["c1/locality/0"])
    share = known_share(knowledge).set_index("kind")
    # distinct facts: the Japan premise counts once (True), the Earth premise once
    assert share.at["premise", "n"] == 2 and share.at["premise", "known_share"] == 1.0
    assert share.at["edit_fact", "known_share"] == 1.0
