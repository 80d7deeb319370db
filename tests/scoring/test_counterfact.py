"""CounterFact's standard metrics against hand-worked cases and plain computations."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from kebench.scoring.counterfact import (
    CounterfactSettings,
    case_scores,
    evaluated_nlls,
    load_reference_texts,
    mean_nlls,
    metric_rows,
    ngram_entropy,
    sample_texts,
    words,
)


def test_words_are_cut_sentence_by_sentence_as_nltk_does():
    # the sentence's full stop is a word of its own, also mid-text
    assert words("Paris is big. It rains, doesn't it?") == [
        "Paris",
        "is",
        "big",
        ".",
        "It",
        "rains",
        ",",
        "does",
        "n't",
        "it",
        "?",
    ]


def test_ngram_entropy_of_a_hand_worked_text():
    # words a b a b: 2-grams ab, ba, ab (2/3, 1/3); 3-grams aba, bab (1/2, 1/2)
    h2 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    h3 = 1.0
    assert ngram_entropy("a b a b") == pytest.approx((2 / 3 * h2 + 4 / 3 * h3) / 2)
    # a repeated word: one 2-gram and one 3-gram, no uncertainty at all
    assert ngram_entropy("go go go go go") == 0.0
    # a b c: 2-grams ab, bc (1 bit); one 3-gram (0 bits)
    assert ngram_entropy("a b c") == pytest.approx((2 / 3 * 1.0 + 4 / 3 * 0.0) / 2)
    # too short for any 3-gram: that entropy is 0, ROME's sum over no n-grams
    assert ngram_entropy("two words") == 0.0


def nll_frame(rows: list[tuple[str, str, float, float]]) -> pd.DataFrame:
    return pd.DataFrame(
        rows, columns=["case_id", "kind", "nll_new", "nll_true"]
    ).assign(relation_id="P1", target_new_id="Q1")


def test_case_scores_and_magnitudes_by_hand():
    nlls = nll_frame(
        [
            ("c", "rewrite", 0.5, 2.0),  # new wins
            ("c", "paraphrase", 1.0, 0.2),  # true wins
            ("c", "paraphrase", 0.1, 3.0),  # new wins
            ("c", "neighborhood", 1.5, 0.5),  # true wins: as it should
        ]
    )
    (row,) = case_scores(nlls, {}, None).to_dict("records")
    assert row["rewrite_score"] == 1.0
    assert row["rewrite_magnitude"] == pytest.approx(math.exp(-0.5) - math.exp(-2.0))
    assert row["paraphrase_score"] == 0.5
    assert row["paraphrase_magnitude"] == pytest.approx(
        ((math.exp(-1.0) - math.exp(-0.2)) + (math.exp(-0.1) - math.exp(-3.0))) / 2
    )
    # the neighbourhood counts the old object's lead
    assert row["neighborhood_score"] == 1.0
    assert row["neighborhood_magnitude"] == pytest.approx(
        math.exp(-0.5) - math.exp(-1.5)
    )
    assert row["ngram_entropy"] is None and row["reference_score"] is None


def plain_tfidf(documents: list[str], texts: list[str]) -> np.ndarray:
    """scikit-learn's default TF-IDF written out: words of 2+ word characters,
    lower-cased; idf = ln((1 + n) / (1 + df)) + 1; raw counts; l2-normalised."""
    tokens = [re.findall(r"\b\w\w+\b", d.lower()) for d in documents]
    vocab = sorted({t for doc in tokens for t in doc})
    df = Counter(t for doc in tokens for t in set(doc))
    idf = np.array([math.log((1 + len(documents)) / (1 + df[t])) + 1 for t in vocab])
    rows = []
    for text in texts:
        counts = Counter(re.findall(r"\b\w\w+\b", text.lower()))
        vector = np.array([counts[t] for t in vocab]) * idf
        rows.append(vector / np.linalg.norm(vector))
    return np.array(rows)


SNIPPETS = [
    {
        "relation_id": "P37",
        "target_id": "Q1412",
        "samples": [
            {"name": "Finland", "text": "Finnish is spoken in Finland by most people."},
            {"name": "Karelia", "text": "People in Karelia speak Finnish and Russian."},
        ],
    },
    {
        "relation_id": "P37",
        "target_id": "Q150",
        "samples": [{"name": "France", "text": "French is spoken in France."}],
    },
]


def test_reference_score_is_the_tfidf_cosine_with_the_snippets(tmp_path):
    path = tmp_path / "attribute_snippets.json"
    path.write_text(json.dumps(SNIPPETS))
    references = load_reference_texts(str(path))
    generated = ["In Brazil people speak Finnish.", "Schools teach in Finnish too."]
    documents = [s["text"] for entry in SNIPPETS for s in entry["samples"]]
    joined = [" ".join(generated), " ".join(documents[:2])]
    expected = np.prod(plain_tfidf(documents, joined), axis=0).sum()
    assert references.score(generated, "P37", "Q1412") == pytest.approx(expected)
    assert math.isnan(references.score(generated, "P37", "Q9"))


def test_a_stored_idf_is_used_as_it_is(tmp_path):
    path = tmp_path / "snippets.json"
    path.write_text(json.dumps(SNIPPETS))
    vocab = {"finnish": 0, "spoken": 1, "french": 2}
    np.save(tmp_path / "idf.npy", np.array([1.0, 2.0, 4.0]))
    (tmp_path / "vocab.json").write_text(json.dumps(vocab))
    references = load_reference_texts(
        str(path), str(tmp_path / "idf.npy"), str(tmp_path / "vocab.json")
    )
    # generated: finnish x2, spoken x1 -> (2, 2, 0); references of Q150: french,
    # spoken -> (0, 2, 4)
    score = references.score(["Finnish spoken Finnish"], "P37", "Q150")
    a, b = np.array([2.0, 2.0, 0.0]), np.array([0.0, 2.0, 4.0])
    assert score == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_malformed_snippets_name_the_file_and_the_entry(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([SNIPPETS[0], {"relation_id": "P1"}]))
    with pytest.raises(ValueError, match=r"bad.json: entry #1"):
        load_reference_texts(str(path))
    path.write_text("[{")
    with pytest.raises(ValueError, match="bad.json: cannot read"):
        load_reference_texts(str(path))


def test_cf_score_is_the_harmonic_mean_of_the_three_scores():
    scores = pd.DataFrame(
        {
            "model": "m",
            "method": "ROME",
            "risk": "counterfactual",
            "case_id": ["a", "b"],
            "rewrite_score": [1.0, 1.0],
            "rewrite_magnitude": [0.5, 0.3],
            "paraphrase_score": [1.0, 0.0],
            "paraphrase_magnitude": [0.2, -0.1],
            "neighborhood_score": [0.5, 0.5],
            "neighborhood_magnitude": [0.1, 0.1],
            "ngram_entropy": [5.0, None],
            "reference_score": [None, None],
        }
    )
    rows = {r["metric"]: r for r in metric_rows(scores, n_boot=200)}
    # efficacy 1, paraphrase 0.5, neighbourhood 0.5: 3 / (1 + 2 + 2)
    assert rows["cf_score"]["value"] == pytest.approx(0.6)
    assert rows["cf_efficacy_magnitude"]["value"] == pytest.approx(0.4)
    assert rows["cf_ngram_entropy"]["n"] == 1
    assert "cf_reference_score" not in rows
    assert {r["protocol"] for r in rows.values()} == {"counterfact"}
    assert rows["cf_paraphrase_score"]["probe_type"] == "paraphrase"
    low, high = rows["cf_score"]["ci_low"], rows["cf_score"]["ci_high"]
    assert 0.0 <= low <= 0.6 <= high <= 1.0


def test_mean_nll_is_the_answers_mean_token_nll(lm):
    prompts = pd.DataFrame(
        {
            "prompt": ["The official language of Brazil is"],
            "target_new": ["Finnish"],
            "target_true": ["Portuguese"],
        }
    )
    scored = mean_nlls(lm, prompts).iloc[0]
    tokenizer = lm.tokenizer
    for answer, column in (("Finnish", "nll_new"), ("Portuguese", "nll_true")):
        prompt_ids = tokenizer(prompts["prompt"][0])["input_ids"]
        ids = tokenizer(prompts["prompt"][0] + " " + answer)["input_ids"]
        with torch.no_grad():
            logits = lm.model(torch.tensor([ids])).logits[0].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        answer_lps = [
            logprobs[i - 1, ids[i]].item() for i in range(len(prompt_ids), len(ids))
        ]
        assert scored[column] == pytest.approx(-np.mean(answer_lps), abs=1e-4)


def test_nlls_the_evaluation_scored_are_read_not_scored_again(lm):
    probes = pd.DataFrame(
        {
            "probe_id": ["p0", "p1", "p2"],
            "case_id": ["c0", "c0", "c1"],
            "prompt": ["The official language of Brazil is", "Brazil speaks", "X is"],
            "answer_new": ["Finnish", "Finnish", "Y"],
            "answer_old": ["Portuguese", "Portuguese", None],
        }
    )
    scores = pd.DataFrame(
        {
            "probe_id": ["p0", "p2"],
            "case_id": ["c0", "c1"],
            "lp_edit_new": [-3.0, -1.0],
            "lp_edit_old": [-8.0, float("nan")],  # no old answer: no CounterFact pair
            "n_tokens_new": [2, 1],
            "n_tokens_old": [4, 0],
        }
    )
    known = evaluated_nlls(probes, scores, "lp_edit_new", "lp_edit_old")
    assert known.to_dict("records") == [
        {
            "case_id": "c0",
            "prompt": "The official language of Brazil is",
            "target_new": "Finnish",
            "target_true": "Portuguese",
            "nll_new": 1.5,
            "nll_true": 2.0,
        }
    ]
    prompts = pd.DataFrame(
        {
            "case_id": ["c0", "c0", "c9"],  # c9 asks c0's prompt: another case's
            "prompt": [
                "Brazil speaks",
                "The official language of Brazil is",
                "The official language of Brazil is",
            ],
            "target_new": ["Finnish"] * 3,
            "target_true": ["Portuguese"] * 3,
        },
        index=[7, 8, 9],
    )
    forwards = []
    hook = lm.model.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        nlls = mean_nlls(lm, prompts, known=known)
    finally:
        hook.remove()
    assert list(nlls.index) == [7, 8, 9]
    assert (nlls.loc[8, "nll_new"], nlls.loc[8, "nll_true"]) == (1.5, 2.0)
    scored = mean_nlls(lm, prompts.loc[[7, 9]])
    assert forwards  # the other two are scored
    for row in (7, 9):
        assert nlls.loc[row, "nll_new"] == pytest.approx(scored.loc[row, "nll_new"])
        assert nlls.loc[row, "nll_true"] == pytest.approx(scored.loc[row, "nll_true"])


ROME_NLLS = Path(__file__).parent / "data" / "rome_counterfact_nlls.json"
RECORDS = Path(__file__).parents[1] / "kg" / "data" / "counterfact.json"


def test_mean_nlls_equal_romes_own_on_the_counterfact_test_records(lm):
    """ROME's test_batch_prediction, run as an oracle outside the repo, stored."""
    reference = pd.DataFrame(json.loads(ROME_NLLS.read_text())["rows"])
    rewrites = {
        r["case_id"]: r["requested_rewrite"] for r in json.loads(RECORDS.read_text())
    }
    prompts = reference.assign(
        target_new=reference["case_id"].map(lambda c: rewrites[c]["target_new"]["str"]),
        target_true=reference["case_id"].map(
            lambda c: rewrites[c]["target_true"]["str"]
        ),
    )
    ours = mean_nlls(lm, prompts[["prompt", "target_new", "target_true"]])
    assert len(ours) == 8  # noqa: PLR2004 - 1 + 2 + 2 and 1 + 1 + 1 prompts
    np.testing.assert_allclose(ours["nll_new"], reference["nll_new"], atol=1e-4)
    np.testing.assert_allclose(ours["nll_true"], reference["nll_true"], atol=1e-4)


def test_top_one_sampling_is_greedy_decoding_to_the_full_length(lm):
    """With k = 1 the sampler must be the argmax, at every step, of a plain forward
    pass over the whole text (no cache), until ``max_length`` tokens in all."""
    prompt = "In Brazil, people speak"
    settings = CounterfactSettings(max_length=12, top_k=1)
    (text,) = sample_texts(lm, [prompt], settings)
    ids = lm.tokenizer(prompt)["input_ids"]
    with torch.no_grad():
        while len(ids) < settings.max_length:
            logits = lm.model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    expected = lm.tokenizer.decode(ids, skip_special_tokens=True)
    assert text == expected.replace("\n\n", " ")


def test_sampling_is_seeded_per_prompt(lm):
    settings = CounterfactSettings(max_length=16)
    prompts = ["Brazil's schools teach in", "In Brazil, people speak"]
    first = sample_texts(lm, prompts, settings, seed_key="case-1")
    assert sample_texts(lm, prompts[::-1], settings, seed_key="case-1") == first[::-1]
    other = sample_texts(lm, prompts, CounterfactSettings(max_length=16, seed=1))
    assert other != first
