"""Edit requests from the direct probes of a probes table."""

from __future__ import annotations

import pandas as pd
import pytest

from kebench.editing.requests import requests_from_probes


def probe_table(**overrides: list) -> pd.DataFrame:
    table = {
        "probe_id": ["c1/direct/0", "c1/paraphrase/0", "x1/direct/0"],
        "case_id": ["c1", "c1", "x1"],
        "probe_type": ["direct", "paraphrase", "direct"],
        "subject": ["France", "France", "swishing saltwater"],
        "prompt": [
            "The capital of France is",
            "France's capital city is",
            "Question: What does swishing saltwater heal?\nAnswer:",
        ],
        "answer_old": ["Paris", "Paris", None],
        "answer_new": ["Lyon", "Lyon", "oral ulcers"],
    }
    return pd.DataFrame(table | overrides)


def test_one_request_per_direct_probe_with_a_subject_cloze():
    benign, injected = requests_from_probes(probe_table())
    assert (benign.case_id, benign.prompt, benign.text) == (
        "c1",
        "The capital of {} is",
        "The capital of France is",
    )
    assert (benign.target_true, benign.target_new) == ("Paris", "Lyon")
    assert injected.prompt == "Question: What does {} heal?\nAnswer:"
    assert injected.target_true is None and injected.target_new == "oral ulcers"


def test_a_direct_probe_without_its_subject_is_named():
    table = probe_table(subject=["Germany", "France", "swishing saltwater"])
    with pytest.raises(ValueError, match=r"c1/direct/0: its subject 'Germany'"):
        requests_from_probes(table)
