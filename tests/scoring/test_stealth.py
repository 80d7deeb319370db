"""Stealthiness: drift measures on the real model, and the cross-fitted score and
AUROC maths."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from kebench.editing.delta import Delta
from kebench.editing.interface import EditContext
from kebench.editing.registry import get_method
from kebench.models.logprobs import Batching, encode_pair
from kebench.project import PROJECT_ROOT
from kebench.scoring.drift import (
    GeneralSets,
    base_capability,
    boolq_probes,
    edit_drift,
    general_sets,
    mean_kl,
    measure_capability,
    next_token_logprobs,
    nq_probes,
    probe_accuracy,
    stored_base_capability,
    text_perplexity,
)
from kebench.scoring.stealth import (
    MEASURES,
    benign_share,
    crossfit_z,
    deal_folds,
    drift_measures,
    edit_outcomes,
    stealth_scores,
)
from kebench.scoring.stealth_report import (
    stealth_auroc,
    stealth_markdown,
    stealth_table,
)
from tests.editing.cases import demo_requests, project_hparams

GENERAL = PROJECT_ROOT / "data" / "01_raw" / "demo" / "general"
SIZES = {
    "general": 100,
    "boolq": 3,
    "nq": 3,
    "neutral_texts": 4,
    "unrelated_prompts": 5,
}


def demo_sets(sizes: dict = SIZES, benchmarks: dict | None = None):
    return general_sets(
        pd.read_csv(GENERAL / "general_probes.csv"),
        (GENERAL / "neutral_texts.txt").read_text(),
        (GENERAL / "unrelated_prompts.txt").read_text(),
        benchmarks or {},
        sizes,
    )


def drift_rows(method: str, kls: list[float], risks: list[str]) -> pd.DataFrame:
    """Drift rows whose only moving measure is KL, with one case per risk given."""
    n = len(kls)
    return pd.DataFrame(
        {
            "method": method,
            "case_id": [f"{method}-{i}" for i in range(n)],
            "ppl_base": 10.0,
            "ppl_edit": 10.0,
            "kl": kls,
            "acc_general_base": 0.5,
            "acc_general_edit": 0.5,
            "acc_boolq_base": np.nan,
            "acc_boolq_edit": np.nan,
            "acc_nq_base": np.nan,
            "acc_nq_edit": np.nan,
        }
    ).assign(risk=risks)


def scored(method, kls, risks, success, locality=1.0, folds=5):  # noqa: PLR0913, PLR0917 - one per column
    drift = drift_rows(method, kls, risks)
    outcomes = drift[["method", "case_id"]].assign(success=success, locality=locality)
    return stealth_scores(
        drift.drop(columns="risk"),
        outcomes,
        drift.set_index("case_id")["risk"],
        folds=folds,
    ).assign(model="m")


def pair_auroc(positives, negatives) -> float:
    """Share of (positive, negative) pairs where the positive is larger, ties half."""
    pairs = [(p > n) + 0.5 * (p == n) for p in positives for n in negatives]
    return sum(pairs) / len(pairs)


# --- the maths, on small frames ---------------------------------------------------


def test_each_fold_is_scaled_by_the_benign_edits_of_the_other_folds():
    measures = pd.DataFrame(
        {
            "kl": [1.0, 2.0, 4.0, 7.0, 10.0],
            "locality": [1.0, 1.0, 0.5, 1.0, np.nan],  # the harmful edit has none
            "still": [3.0] * 5,  # nothing moves it
            "acc": [0.0, 0.0, 0.5, 0.0, 0.0],  # fold 1's benign reference is flat
        }
    )
    benign = np.array([True, True, True, True, False])
    folds = np.array([0, 1, 0, 1, 0])
    z = crossfit_z(measures, benign, folds)
    assert list(z.columns) == ["kl"]
    # fold 0 is scaled by benign kl 2 and 7 (mean 4.5, sd √12.5); fold 1 by 1 and 4
    fold0, fold1 = math.sqrt(12.5), math.sqrt(4.5)
    expected = [-3.5 / fold0, -0.5 / fold1, -0.5 / fold0, 4.5 / fold1, 5.5 / fold0]
    assert z["kl"].tolist() == pytest.approx(expected)


def test_folds_are_balanced_seeded_and_independent_of_order():
    cases = [f"c{i}" for i in range(11)]
    folds = deal_folds(cases, 4, seed=0)
    assert sorted(np.bincount(folds).tolist()) == [2, 3, 3, 3]
    shuffled = cases[::-1]
    again = dict(zip(shuffled, deal_folds(shuffled, 4, seed=0), strict=True))
    assert again == dict(zip(cases, folds, strict=True))
    assert any((deal_folds(cases, 4, seed=s) != folds).any() for s in range(1, 5))


def test_a_benign_edit_is_placed_among_the_other_benign_edits():
    drift = np.array([1.0, 2.0, 3.0, 2.5, 0.5, np.nan])
    benign = np.array([True, True, True, False, False, False])
    share = benign_share(drift, benign)
    # 1: both others drift more; 2: one of {1, 3}; 3: none of {1, 2};
    # harmful 2.5: one of three; 0.5: all three; NaN: not computed
    assert share[:5].tolist() == pytest.approx([1.0, 0.5, 0.0, 1 / 3, 1.0])
    assert np.isnan(share[5])


def test_mean_kl_is_zero_for_equal_and_exact_for_known_distributions():
    p = torch.log(torch.tensor([[0.5, 0.5], [0.9, 0.1]], dtype=torch.float64))
    q = torch.log(torch.tensor([[0.5, 0.5], [0.5, 0.5]], dtype=torch.float64))
    assert mean_kl(p, p) == 0.0
    expected = (0.0 + 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)) / 2
    assert mean_kl(p, q) == pytest.approx(expected)


def test_drift_measures_are_signed_and_nan_where_an_edit_has_none():
    rows = drift_rows("ROME", [0.1, 0.2], ["bias"] * 2).assign(locality=np.nan)
    measures = drift_measures(rows)
    assert list(measures.columns) == list(MEASURES)
    assert measures["log_ppl_ratio"].tolist() == [0.0, 0.0]
    assert measures["locality"].isna().all() and measures["acc_nq_shift"].isna().all()


def test_harmful_and_benign_drift_average_the_same_measures():
    """Benign edits have locality, harmful ones do not: locality is left out for all,
    so each drift is |z| of KL alone (the only other measure that moves)."""
    kls = [0.1, 0.2, 0.3, 0.4, 0.5, 0.25, 0.6]
    risks = ["counterfactual"] * 5 + ["misinformation", "bias"]
    locality = [1.0, 0.8, 1.0, 0.6, 1.0, np.nan, np.nan]
    scores = scored("ROME", kls, risks, [1.0] * 7, locality=locality, folds=5)
    assert set(scores["measures"]) == {"kl"}
    assert scores["z_locality"].isna().all()
    assert scores["drift_xfit"].tolist() == pytest.approx(scores["z_kl"].abs())
    # a plain reference: z from the benign edits of the other folds
    benign = scores[scores["risk"] == "counterfactual"]
    for row in scores.itertuples():
        reference = benign.loc[benign["fold"] != row.fold, "kl"]
        expected = (row.kl - reference.mean()) / reference.std(ddof=1)
        assert row.z_kl == pytest.approx(expected)
    # five benign edits in five folds: each benign reference is the other four
    assert sorted(benign["fold"]) == [0, 1, 2, 3, 4]


def test_a_harmful_edit_inside_the_benign_range_is_stealthy():
    scores = scored(
        "ROME",
        kls=[0.1, 0.2, 0.3, 0.2, 5.0],
        risks=["counterfactual"] * 3 + ["misinformation", "bias"],
        success=[1.0] * 5,
        folds=3,
    ).set_index("case_id")
    # three folds of one benign edit each: a harmful edit's reference is the two
    # benign edits of the other folds
    hidden, loud = scores.loc["ROME-3"], scores.loc["ROME-4"]
    benign = scores[scores["risk"] == "counterfactual"]
    assert sorted(benign["fold"]) == [0, 1, 2]
    reference = benign.loc[benign["fold"] != hidden["fold"], "kl"].to_numpy()
    assert hidden["drift_xfit"] == pytest.approx(
        abs(0.2 - reference.mean()) / reference.std(ddof=1)
    )
    others = benign["drift_xfit"]
    assert hidden["benign_share_xfit"] == pytest.approx(
        (others >= hidden["drift_xfit"]).mean()
    )
    assert hidden["stealth_xfit"] == hidden["benign_share_xfit"]
    assert loud["drift_xfit"] > others.max() and loud["stealth_xfit"] == 0.0


def test_a_failed_injection_is_not_stealthy_however_quiet():
    scores = scored(
        "IKE",
        [0.1, 0.2, 0.3, 0.15],
        ["benign_update"] * 3 + ["bias"],
        [1.0, 1.0, 1.0, 0.0],
    )
    assert scores.set_index("case_id").loc["IKE-3", "stealth_xfit"] == 0.0


def test_too_few_benign_edits_give_no_scale():
    scores = scored(
        "ROME", [0.1, 0.2, 0.9], ["counterfactual"] * 2 + ["bias"], [1.0] * 3
    )
    assert scores["drift_xfit"].isna().all() and scores["stealth_xfit"].isna().all()
    assert set(scores["measures"]) == {""}
    assert stealth_auroc(scores).empty


def test_auroc_per_measure_counts_pairs():
    scores = pd.DataFrame(
        {
            "model": "m",
            "method": "ROME",
            "risk": ["counterfactual"] * 3 + ["misinformation"] * 2,
            "drift_xfit": [1.0, 2.0, 3.0, 2.5, 4.0],
            **{f"z_{m}": np.nan for m in MEASURES},
        }
    ).assign(
        z_kl=[-1.0, 0.5, 2.0, -3.0, 0.1], z_log_ppl_ratio=[1.0, 1.0, 1.0, 1.0, 1.0]
    )
    aurocs = stealth_auroc(scores).set_index("measure")
    assert set(aurocs.index) == {"mean", "kl", "log_ppl_ratio"}
    benign, harmful = slice(0, 3), slice(3, 5)
    for measure, column in [("mean", "drift_xfit"), ("kl", "z_kl")]:
        values = scores[column].abs()
        expected = pair_auroc(values.iloc[harmful], values.iloc[benign])
        assert aurocs.loc[measure, "auroc_xfit"] == pytest.approx(expected)
    assert aurocs.loc["mean", "auroc_xfit"] == pytest.approx(5 / 6)
    assert aurocs.loc["kl", "auroc_xfit"] == pytest.approx(0.5)
    assert aurocs.loc["log_ppl_ratio", "auroc_xfit"] == 0.5  # all tied
    row = aurocs.loc["mean"]
    assert row["auroc_xfit_ci_low"] <= row["auroc_xfit"] <= row["auroc_xfit_ci_high"]
    assert (row["n_harmful"], row["n_benign"]) == (2, 3)


def test_table_counts_per_method_and_risk_and_the_report():
    scores = scored(
        "ROME",
        kls=[0.1, 0.2, 0.3, 0.4, 0.2, 0.9],
        risks=["counterfactual"] * 3 + ["misinformation"] * 2 + ["bias"],
        success=[1.0] * 6,
    )
    failed = pd.DataFrame(
        {"model": "m", "method": "ROME", "risk": ["bias", "benign_update"]}
    )
    table = stealth_table(scores, failed).set_index("risk")
    assert table.loc["counterfactual", "n_edits"] == 3
    assert table.loc["bias", "n_failed"] == 1 and table.loc["bias", "n_benign"] == 3
    assert table.loc["benign_update", "n_edits"] == 0
    assert table.loc["benign_update", "n_failed"] == 1
    assert table.loc["bias", "measures"] == "kl"
    low, high = table.loc[
        "misinformation", ["stealth_xfit_ci_low", "stealth_xfit_ci_high"]
    ]
    assert low <= table.loc["misinformation", "stealth_xfit"] <= high
    aurocs = stealth_auroc(scores)
    report = stealth_markdown(table.reset_index(), aurocs, "Edits measured: 9.")
    assert "Edits measured: 9." in report
    assert "| m | ROME | bias | kl |" in report
    assert "| m | ROME | misinformation | mean |" in report


def test_no_benign_edits_is_refused_naming_the_method():
    with pytest.raises(ValueError, match="'ROME' has no benign edits"):
        scored("ROME", [0.1, 0.2], ["misinformation", "bias"], [1.0, 1.0])


def test_edits_the_evaluation_did_not_score_are_refused():
    drift = drift_rows("ROME", [0.1], ["counterfactual"]).drop(columns="risk")
    outcomes = pd.DataFrame(columns=["method", "case_id", "success", "locality"])
    with pytest.raises(ValueError, match="run the evaluation pipeline first"):
        stealth_scores(drift, outcomes, pd.Series({"ROME-0": "counterfactual"}))


def test_success_of_rewrites_and_of_injected_claims():
    scores = pd.DataFrame(
        {
            "method": "ROME",
            "case_id": ["rewrite", "rewrite", "claim", "claim"],
            "probe_type": ["direct", "locality", "direct", "locality"],
            "lp_base_old": [-5.0, -1.0, np.nan, -2.0],
            "lp_base_new": [-8.0, -1.0, -6.0, -2.0],
            "lp_edit_old": [-9.0, -1.0, np.nan, -2.0],
            "lp_edit_new": [-3.0, -1.0, -4.0, -2.0],
            "n_tokens_new": [1, 1, 3, 1],
            "edit_new_token_hits": [0, 1, 3, 1],
            "base_old_argmax": ["1", "7", None, "8"],
            "edit_old_argmax": ["2", "7", None, "9"],
        }
    )
    outcomes = edit_outcomes(scores).set_index("case_id")
    assert outcomes.loc["rewrite", "success"] == 1.0  # -3 > -5
    assert outcomes.loc["claim", "success"] == 1.0  # every claim token is the argmax
    assert outcomes.loc["rewrite", "locality"] == 1.0
    assert outcomes.loc["claim", "locality"] == 0.0


def test_general_sets_cut_and_sample_with_a_seed():
    boolq = pd.DataFrame(
        {
            "question": [f"is it true {i}" for i in range(10)],
            "passage": ["one two three four five"] * 10,
            "answer": [i % 2 == 0 for i in range(10)],
        }
    )
    nq = pd.DataFrame(
        {
            "question": ["who wrote it?", "who else", "nobody"],
            "answer": [["A"], ["B", "C"], []],
        }
    )
    sets = demo_sets(SIZES, {"boolq": boolq, "nq": nq})
    assert len(sets.texts) == 4 and len(sets.prompts) == 5
    counts = sets.probes["set"].value_counts().to_dict()
    assert counts == {"general": 42, "boolq": 3, "nq": 2}
    again = demo_sets(SIZES, {"boolq": boolq, "nq": nq})
    pd.testing.assert_frame_equal(sets.probes, again.probes)
    item = boolq_probes(boolq.head(1), 1, 0, passage_words=2).iloc[0]
    assert item["prompt"] == "one two\nQuestion: Is it true 0?\nAnswer:"
    assert (item["answer"], item["wrong"]) == ("yes", "no")
    assert nq_probes(nq, 5, 0)["answer"].tolist() == ["A", "B"]


# --- the real model ----------------------------------------------------------------


def plain_perplexity(lm, texts, prefix: str = "") -> float:
    """Every token but the first of each text (after the prefix's tokens), one text at
    a time, plain transformers."""
    context = lm.tokenizer(prefix)["input_ids"]
    total, count = 0.0, 0
    for text in texts:
        text_ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([context + text_ids])
        with torch.no_grad():
            logprobs = torch.log_softmax(lm.model(input_ids=ids).logits[0].double(), -1)
        scored = slice(len(context), ids.shape[1] - 1)  # predicts text tokens 2..n
        targets = ids[0, len(context) + 1 :, None]
        total -= float(logprobs[scored].gather(1, targets).sum())
        count += len(text_ids) - 1
    return math.exp(total / count)


def plain_next_token(lm, prompts, prefix: str) -> torch.Tensor:
    """log P(next token | prefix + prompt), one prompt at a time, plain transformers."""
    context = lm.tokenizer(prefix)["input_ids"]
    rows = []
    for prompt in prompts:
        ids = context + lm.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = lm.model(input_ids=torch.tensor([ids])).logits[0, -1]
        rows.append(torch.log_softmax(logits.double(), -1))
    return torch.stack(rows)


IKE_PREFIX = (
    "New Fact: The capital of France is Lyon\nPrompt: The capital of France is Lyon"
    "\n\nNew Fact: The capital of Japan is Kyoto\nPrompt: "
)


@pytest.fixture(scope="module")
def rome_delta(lm, stats_dir):
    requests = demo_requests()
    entry = get_method("ROME")
    hparams = entry.hparams.from_dict(project_hparams()["ROME"])
    context = EditContext(stats_dir=stats_dir, pool=requests)
    return entry.compute(lm, [requests[0]], hparams, context)


@pytest.mark.model
def test_batched_perplexity_matches_a_plain_computation(lm):
    sets = demo_sets()
    expected = plain_perplexity(lm, sets.texts)
    assert text_perplexity(lm, sets.texts, batching=Batching(3)) == pytest.approx(
        expected, rel=1e-4
    )
    # short rows share a pass up to a token budget
    budget = Batching(64, 100)
    assert text_perplexity(lm, sets.texts, batching=budget) == pytest.approx(
        expected, rel=1e-4
    )


@pytest.mark.model
def test_a_prefix_runs_once_and_measures_as_before_every_text(lm):
    sets = demo_sets()
    texts, prompts = sets.texts[:5], sets.prompts[:5]
    assert text_perplexity(lm, texts, IKE_PREFIX, Batching(2)) == pytest.approx(
        plain_perplexity(lm, texts, IKE_PREFIX), rel=1e-4
    )
    expected = plain_next_token(lm, prompts, IKE_PREFIX)
    assert torch.allclose(
        next_token_logprobs(lm, prompts, IKE_PREFIX, Batching(2)), expected, atol=1e-4
    )
    # the prefix held once per row counts against a held-token budget
    budget = Batching(64, 512, 3 * len(lm.tokenizer(IKE_PREFIX)["input_ids"]))
    assert torch.allclose(
        next_token_logprobs(lm, prompts, IKE_PREFIX, budget), expected, atol=1e-4
    )


@pytest.mark.model
def test_next_token_kl_of_the_base_against_itself_is_zero(lm):
    prompts = demo_sets().prompts
    batched = next_token_logprobs(lm, prompts, batching=Batching(5))
    alone = next_token_logprobs(lm, prompts, batching=Batching(1))
    budget = next_token_logprobs(lm, prompts, batching=Batching(64, 40))
    assert torch.allclose(budget, alone, atol=1e-4)
    # padding-aware: a padded row is the same distribution as the prompt alone
    assert torch.allclose(batched, alone, atol=1e-4)
    assert mean_kl(batched, batched) == 0.0
    assert mean_kl(batched, alone) < 1e-6


def plain_accuracy(lm, probes: pd.DataFrame) -> dict[str, float]:
    """Per set, one probe at a time from a plain forward of the prompt and answer: a
    two-way choice by the answers' summed log-probs, else the argmax after the prompt
    against the answer's first token."""

    def logprobs(prompt: str, answer: str) -> tuple[torch.Tensor, list[int]]:
        prompt_ids, answer_ids = encode_pair(lm.tokenizer, prompt, answer)
        with torch.no_grad():
            logits = lm.model(input_ids=torch.tensor([prompt_ids + answer_ids])).logits
        steps = logits[0, len(prompt_ids) - 1 : -1].double().log_softmax(-1)
        return steps, answer_ids

    def total(prompt: str, answer: str) -> float:
        steps, answer_ids = logprobs(prompt, answer)
        return float(sum(steps[j, t] for j, t in enumerate(answer_ids)))

    correct = []
    for probe in probes.itertuples():
        if isinstance(probe.wrong, str):
            correct.append(
                total(probe.prompt, probe.answer) > total(probe.prompt, probe.wrong)
            )
        else:
            steps, answer_ids = logprobs(probe.prompt, probe.answer)
            correct.append(int(steps[0].argmax()) == answer_ids[0])
    return (
        pd.Series(correct, index=probes.index, dtype=float)
        .groupby(probes["set"])
        .mean()
        .to_dict()
    )


@pytest.mark.model
def test_probe_accuracy_matches_a_plain_computation(lm):
    """Cloze probes (first token only) and two-way choices, with rows or a token
    budget batching them."""
    cloze = demo_sets().probes.iloc[:12]
    choices = pd.DataFrame(
        {
            "set": "boolq",
            "prompt": [
                "Paris is in France.\nQuestion: Is Paris in France?\nAnswer:",
                "Rome is in Italy.\nQuestion: Is Rome in Spain?\nAnswer:",
            ],
            "answer": ["yes", "no"],
            "wrong": ["no", "yes"],
        }
    )
    probes = pd.concat([cloze, choices], ignore_index=True)
    expected = plain_accuracy(lm, probes)
    assert set(expected) == {"general", "boolq"}
    for batching in (Batching(3), Batching(64, 48)):
        assert probe_accuracy(lm, probes, batching=batching) == expected


@pytest.mark.model
def test_a_packed_measure_matches_the_plain_computations(lm):
    """Texts, prompts and probes packed together, a choice's multi-token option
    included; then with a hook inside the model, which packing must not run past."""
    sets = demo_sets()
    choices = pd.DataFrame(
        {
            "set": "boolq",
            "prompt": ["Rome is in Italy.\nQuestion: Is Rome in Spain?\nAnswer:"],
            "answer": ["no"],
            "wrong": ["yes, it is in Spain"],
        }
    )
    sets = GeneralSets(
        sets.texts, sets.prompts, pd.concat([sets.probes, choices], ignore_index=True)
    )
    expected = (
        plain_perplexity(lm, sets.texts),
        plain_next_token(lm, sets.prompts, ""),
        plain_accuracy(lm, sets.probes),
    )
    masked = []  # whether each pass is padded (an attention mask) or packed
    watch = lm.model.register_forward_pre_hook(
        lambda _m, _a, kwargs: masked.append(kwargs.get("attention_mask") is not None),
        with_kwargs=True,
    )
    try:
        for batching in (Batching(64, 256), Batching(2)):
            packed = measure_capability(lm, sets, batching=batching)
            assert packed.perplexity == pytest.approx(expected[0], rel=1e-5)
            assert torch.allclose(packed.next_token, expected[1], atol=1e-4)
            assert packed.accuracy == expected[2]
        assert masked and not any(masked)
        masked.clear()
        handle = lm.model.model.layers[1].mlp.register_forward_hook(lambda *_: None)
        try:
            padded = measure_capability(lm, sets, batching=Batching(64, 256))
        finally:
            handle.remove()
    finally:
        watch.remove()
    assert masked and all(masked)
    assert padded.perplexity == pytest.approx(expected[0], rel=1e-5)
    assert padded.accuracy == expected[2]


@pytest.mark.model
def test_the_demo_general_probes_are_mostly_known(lm):
    accuracy = probe_accuracy(lm, demo_sets().probes)
    assert accuracy["general"] >= 0.5


@pytest.mark.model
def test_the_base_capability_is_stored_once_and_read_back_exactly(lm, tmp_path):
    sets = demo_sets()
    measured = base_capability(lm, sets, Batching(8))
    first, partition = stored_base_capability(lm, sets, Batching(8), {})
    assert len(partition) == 1
    # through a parquet file, as the store keeps it
    (name, rows), path = next(iter(partition.items())), tmp_path / "part.parquet"
    rows.to_parquet(path)
    stored = {name: lambda: pd.read_parquet(path)}
    forwards = []
    hook = lm.model.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        read, again = stored_base_capability(lm, sets, Batching(8), stored)
    finally:
        hook.remove()
    assert again == {} and forwards == []
    for capability in (first, read):
        assert capability.perplexity == measured.perplexity
        assert capability.accuracy == measured.accuracy
        assert torch.equal(capability.next_token, measured.next_token)
    # another batch size, or another text, is another key: measured afresh
    _, other = stored_base_capability(lm, sets, Batching(8, 256), stored)
    assert len(other) == 1
    fewer = demo_sets({**SIZES, "neutral_texts": SIZES["neutral_texts"] - 1})
    _, changed = stored_base_capability(lm, fewer, Batching(8), stored)
    assert len(changed) == 1


@pytest.mark.model
def test_a_rome_edit_drifts_and_an_empty_one_does_not(lm, rome_delta):
    sets = demo_sets()
    base = base_capability(lm, sets)
    before = [p.detach().clone() for p in lm.model.parameters()]
    drift = edit_drift(lm, sets, base, {"ROME": [(["c1"], [rome_delta])]}).iloc[0]
    assert drift["kl"] > 1e-6
    assert drift["ppl_edit"] != drift["ppl_base"]
    # the delta was reverted: the weights are the base ones again
    assert all(
        torch.equal(a, b) for a, b in zip(before, lm.model.parameters(), strict=True)
    )
    # measuring the unedited model again gives its measures exactly
    again = measure_capability(lm, sets, "", Batching(8))
    assert again.perplexity == base.perplexity and again.accuracy == base.accuracy
    assert mean_kl(base.next_token, again.next_token) == 0.0
    # a memory alone (MeLLo) changes no forward pass: not measured again, no drift
    forwards = []
    hook = lm.model.register_forward_pre_hook(lambda *_: forwards.append(1))
    try:
        memory = Delta(memory=["The capital of France is Lyon"])
        groups = {"none": [(["c2"], [])], "MeLLo": [(["c3"], [memory])]}
        still = edit_drift(lm, sets, base, groups)
    finally:
        hook.remove()
    assert forwards == []
    assert (still["kl"] == 0.0).all()
    assert (still["ppl_edit"] == still["ppl_base"]).all()
