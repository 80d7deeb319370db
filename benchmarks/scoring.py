"""Benchmark batched probe scoring against one-pair-at-a-time scoring, on CPU.

Usage: python benchmarks/scoring.py [--dataset demo] [--n-probes 200] [--batch-size 32]
Builds the dataset's probes with the upstream pipelines (kg_build, rule_mining,
qa_generation, risk_unification) in a scratch folder, then scores each probe's old and
new answer under the real SmolLM2-135M twice:
    batched: ``score_pass`` as the evaluation pipeline runs it (padded batches, each
        probe's prompt run once and shared by its two answers through the KV cache);
    unbatched: each (prompt, answer) pair alone, one forward pass per pair.
It then generates each probe's free answer (protocol ``wild``, the evaluation's
settings) in batches of ``--batch-size`` with the KV cache, and one probe at a time.
Prints one JSON object: {"batched_probes_per_s", "unbatched_probes_per_s", "speedup",
"generated_probes_per_s", "generated_one_by_one_probes_per_s", "generation_speedup",
"generations_equal", "peak_rss_mb", "n_probes", "max_abs_diff"}; max_abs_diff is the
largest difference of a log-prob between the two ways, ``generations_equal`` the share
of probes whose answer is the same both ways. Target (issue 6): speedup >= 3 on CPU.

Drift (stealthiness): one edit's measures on the general sets (``measure_capability``
with the pipeline's batching, ``drift_batching``: rows and token budgets per pass,
its sequences packed several to a row; and one sequence at a time, unpacked,
``padded_capability``), ``drift_s_per_edit``, ``drift_one_by_one_s_per_edit``,
``drift_speedup``; after an IKE-style prefix, which runs once through the KV cache,
``drift_ike_prefix_s_per_edit``; and the work itself: ``drift_sequences_per_edit``,
``drift_tokens_per_edit``, ``drift_tokens_per_s``.

Drift against this machine's limit (issue 41): three pairs, after a warm-up measure
(as a pipeline's base measure warms up its edits'), of this machine's matmul peak (the
best rate of ``torch.matmul`` on square matrices of the model's dtype, n = 2048 and
4096, all threads) measured right before a batched drift measure, and that measure's
model FLOP/s: 2 x parameters x the tokens the model forwarded (counted by a forward
pre-hook on the model: the non-padding positions of each call's input ids, so a KV
cache's past counts once; in a packed pass, its sequences, less each row's free end)
/ seconds. ``drift_tokens_per_edit`` counts the same tokens from the sets themselves,
with the tokenizer: the two agree when nothing is forwarded twice. Each pair's
quotient is in ``drift_peak_ratios``; ``drift_peak_ratio`` is their median, and
``matmul_peak_flops_per_s`` and ``drift_model_flops_per_s`` are that pair's. The
machine's speed moves from minute to minute, so the two rates of a quotient are
measured side by side. Target >= 0.7.

Work done twice (issue 41): with ``--repeats``, a default run of evaluation plus
stealthiness (``kedro run --pipelines=evaluation,stealthiness --params method=<m>``,
its default profile and edits) for ROME and then for IKE, in one scratch project
whose edits were made first (editing's own forwards are not counted). A
``ForwardLedger`` watches the model: a repeat is a row whose (weights digest, token
ids) pair was forwarded before, in this method's run or in the earlier one (whose
stored outputs a later run may read). Prints ``repeats``: per method, the forwarded
and repeated tokens and ``repeated_share`` (target <= 0.05 for each); and each
pipeline's share of them. ``--only repeats`` (or ``--only drift``) skips everything else.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import resource
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

# Kedro's rich logging writes to stdout; keep stdout for the one JSON object.
with contextlib.redirect_stdout(sys.stderr):
    from model_cli import model_parser, print_result

    from kebench.models.logprobs import Batching, padding_id, score_answers
    from kebench.pipelines.stealthiness.nodes import build_general_sets
    from kebench.project import (
        load_config,
        project_catalog,
        project_model,
        run_in_catalog,
        run_pipeline,
    )
    from kebench.scoring.drift import measure_capability, padded_capability
    from kebench.scoring.evaluate import ScoringSettings, score_pass
    from kebench.scoring.forward_ledger import ForwardLedger, packed_sequences
    from kebench.scoring.generation import GenerationSettings, generate_answers

logger = logging.getLogger("benchmarks.scoring")
UPSTREAM = ("kg_build", "rule_mining", "qa_generation", "risk_unification")
REPEAT_METHODS = ("ROME", "IKE")
REPEAT_PIPELINES = ("evaluation", "stealthiness")
# the ledger's counts that add up over pipelines
COUNTED = ("forwarded_tokens", "repeated_tokens", "unknown_context_tokens")


def build_probes(dataset: str, scratch: Path):
    """The dataset's probes, as the upstream pipelines write them."""
    for name in UPSTREAM:
        catalog = run_pipeline(name, {"dataset": dataset}, scratch)
    return catalog.load("probes")


def score_one_by_one(lm, probes) -> tuple[list[float], list[float]]:
    """Old and new answers' log-probs, one forward pass per (prompt, answer) pair."""
    old, new = [], []
    for row in probes.itertuples():
        (score,) = score_answers(lm.model, lm.tokenizer, [row.prompt], [row.answer_new])
        new.append(score.logprob)
        if row.answer_old is None:
            old.append(float("nan"))
            continue
        (score,) = score_answers(lm.model, lm.tokenizer, [row.prompt], [row.answer_old])
        old.append(score.logprob)
    return old, new


# an in-context edit's prefix of IKE's form (a demonstration, then the new fact)
IKE_PREFIX = (
    "New Fact: The capital of France is Lyon\nPrompt: The capital of France is Lyon"
    "\n\nNew Fact: The capital of Japan is Kyoto\nPrompt: "
)


def matmul_peak(dtype: torch.dtype, sizes=(2048, 4096), repeats: int = 5) -> float:
    """The best FLOP/s of ``torch.matmul`` on n x n matrices, all threads."""
    best = 0.0
    for n in sizes:
        a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        torch.matmul(a, b)  # warm-up
        for _ in range(repeats):
            started = time.perf_counter()
            torch.matmul(a, b)
            best = max(best, 2 * n**3 / (time.perf_counter() - started))
    return best


@contextmanager
def forwarded_tokens(model: torch.nn.Module, pad_id: int):
    """Count the non-padding input positions of every forward call of ``model``: a
    padded batch's by its attention mask, a packed one's (``forward_packed``: no mask,
    position ids) by its sequences, less a row's free end of ``pad_id``."""
    count = [0]

    def hook(_module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None:
            return
        mask = kwargs.get("attention_mask")
        positions = kwargs.get("position_ids")
        length = ids.shape[-1]
        if mask is not None:
            count[0] += int(mask[:, -length:].sum())
        elif positions is not None:
            count[0] += sum(map(len, packed_sequences(ids, positions, pad_id)))
        else:
            count[0] += ids.numel()

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield count
    finally:
        handle.remove()


def time_drift(lm, scratch: Path) -> dict:
    """One edit's drift measures (stealthiness's general sets), batched as the
    pipeline runs them and one sequence at a time; and batched after an in-context
    prefix, which runs once through the KV cache."""
    catalog = project_catalog({}, scratch)
    params = catalog.load("params:stealthiness")
    sets = build_general_sets(
        catalog.load("general_probes"),
        catalog.load("neutral_texts"),
        catalog.load("unrelated_prompts"),
        catalog.load("general_benchmarks"),
        params,
    )
    tokens = sum(
        len(lm.tokenizer(text)["input_ids"])
        for text in (*sets.texts, *sets.prompts, *sets.probes["prompt"])
    )
    batching = Batching.from_params(params)
    dtype = next(lm.model.parameters()).dtype
    parameters = sum(p.numel() for p in lm.model.parameters())
    # warm-up: one-time allocations and kernel choices, which a pipeline pays once
    # for all its edits (the base model's measure) and not per edit
    measure_capability(lm, sets, "", batching)
    seconds, pairs = {}, []
    for name, measure, batches, prefix, repeats in (
        ("batched", measure_capability, batching, "", 3),
        ("one_by_one", padded_capability, Batching(1), "", 1),
        ("batched_ike_prefix", measure_capability, batching, IKE_PREFIX, 1),
    ):
        for _ in range(repeats):
            # the peak is measured next to each batched measure: this machine's speed
            # moves from minute to minute (a shared VM), and both should see the same
            peak = matmul_peak(dtype) if name == "batched" else None
            with forwarded_tokens(lm.model, padding_id(lm.tokenizer)) as forwarded:
                started = time.perf_counter()
                measure(lm, sets, prefix, batches)
                elapsed = time.perf_counter() - started
            seconds[name] = min(seconds.get(name, elapsed), elapsed)
            if peak is not None:
                flops = 2 * parameters * forwarded[0] / elapsed
                pairs.append((flops / peak, flops, peak, forwarded[0]))
    ratio, model_flops, peak, forwarded_batched = sorted(pairs)[len(pairs) // 2]
    return {
        "drift_s_per_edit": round(seconds["batched"], 2),
        "drift_one_by_one_s_per_edit": round(seconds["one_by_one"], 2),
        "drift_speedup": round(seconds["one_by_one"] / seconds["batched"], 2),
        "drift_ike_prefix_s_per_edit": round(seconds["batched_ike_prefix"], 2),
        "drift_batching": asdict(batching),
        "drift_tokens_per_edit": tokens,
        "drift_tokens_per_s": round(tokens / seconds["batched"]),
        "drift_sequences_per_edit": len(sets.texts)
        + len(sets.prompts)
        + len(sets.probes),
        "drift_forwarded_tokens_per_edit": forwarded_batched,
        "drift_model_flops_per_s": round(model_flops),
        "matmul_peak_flops_per_s": round(peak),
        "drift_peak_ratio": round(ratio, 3),
        "drift_peak_ratios": [round(r, 3) for r, *_ in pairs],
    }


def count_repeats(dataset: str, model: str, scratch: Path) -> dict:
    """Forwarded and repeated tokens of evaluation plus stealthiness, per method, in
    ``scratch`` (whose probes exist); one ledger, so a later method's run also repeats
    what an earlier one forwarded."""
    for method in REPEAT_METHODS:
        run_pipeline(
            "editing", {"dataset": dataset, "model": model, "method": method}, scratch
        )
    ledger = ForwardLedger()
    counts: dict[str, dict] = {}
    for method in REPEAT_METHODS:
        params = {"dataset": dataset, "model": model, "method": method}
        catalog = project_catalog(params, scratch)
        counts[method] = {}
        forwarded, repeated = ledger.by_node.copy(), ledger.repeated_by_node.copy()
        lm = catalog.load("model")
        ledger.padding_id = padding_id(lm.tokenizer)  # a packed row's free end
        with ledger.watching(lm.model):
            for pipeline in REPEAT_PIPELINES:
                before = ledger.summary()
                run_in_catalog(pipeline, catalog)
                after = ledger.summary()
                counts[method][pipeline] = {
                    key: after[key] - before[key] for key in COUNTED
                }
        total = {
            key: sum(part[key] for part in counts[method].values()) for key in COUNTED
        }
        total["repeated_share"] = round(
            total["repeated_tokens"] / max(total["forwarded_tokens"], 1), 4
        )
        nodes = ledger.by_node - forwarded
        nodes_repeated = ledger.repeated_by_node - repeated
        total["nodes"] = {
            node: [tokens, nodes_repeated[node]] for node, tokens in nodes.most_common()
        }
        counts[method] = {**total, **counts[method]}
        logger.info("repeats of %s: %s", method, counts[method])
    return counts


def run(args: argparse.Namespace) -> dict:
    config = load_config({"dataset": args.dataset, "model": args.model})
    if args.only == "repeats":
        with tempfile.TemporaryDirectory() as scratch:
            build_probes(args.dataset, Path(scratch))
            return {"repeats": count_repeats(args.dataset, args.model, Path(scratch))}
    lm = project_model(args.model, config)
    if args.only == "drift":
        with tempfile.TemporaryDirectory() as scratch:
            return time_drift(lm, Path(scratch))
    with tempfile.TemporaryDirectory() as scratch:
        probes = build_probes(args.dataset, Path(scratch))
        drift = time_drift(lm, Path(scratch))
        repeats = (
            count_repeats(args.dataset, args.model, Path(scratch))
            if args.repeats
            else None
        )
    probes = probes.head(args.n_probes).reset_index(drop=True)
    logger.info("scoring %d probes", len(probes))
    settings = ScoringSettings(batch_size=args.batch_size)
    score_pass(lm, probes.head(4), settings=settings)  # warm-up: one-time allocations
    started = time.perf_counter()
    batched = score_pass(lm, probes, settings=settings)
    batched_s = time.perf_counter() - started
    started = time.perf_counter()
    old, new = score_one_by_one(lm, probes)
    unbatched_s = time.perf_counter() - started
    diffs = np.abs(
        np.concatenate([batched["lp_old"] - np.array(old), batched["lp_new"] - new])
    )
    wild = config["parameters"]["evaluation"]["wild"]
    generation = GenerationSettings(
        context=wild["context"],
        instruction=wild["instruction"],
        stop_strings=tuple(wild["stop_strings"]),
        max_new_tokens=int(wild["max_new_tokens"]),
        batch_size=args.batch_size,
    )
    prompts = list(probes["prompt"])
    started = time.perf_counter()
    together = generate_answers(lm, prompts, generation)
    generated_s = time.perf_counter() - started
    started = time.perf_counter()
    alone = [generate_answers(lm, [prompt], generation)[0] for prompt in prompts]
    alone_s = time.perf_counter() - started
    return {
        "batched_probes_per_s": round(len(probes) / batched_s, 2),
        "unbatched_probes_per_s": round(len(probes) / unbatched_s, 2),
        "speedup": round(unbatched_s / batched_s, 2),
        "generated_probes_per_s": round(len(probes) / generated_s, 2),
        "generated_one_by_one_probes_per_s": round(len(probes) / alone_s, 2),
        "generation_speedup": round(alone_s / generated_s, 2),
        "generations_equal": round(
            float(
                np.mean(
                    [a.text == b.text for a, b in zip(together, alone, strict=True)]
                )
            ),
            3,
        ),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "n_probes": len(probes),
        "max_abs_diff": float(np.nanmax(diffs)),
        **drift,
        **({"repeats": repeats} if repeats is not None else {}),
    }


def main() -> None:
    parser = model_parser(__doc__)
    parser.add_argument("--n-probes", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--repeats", action="store_true", help="also count work done twice (slow)"
    )
    parser.add_argument(
        "--only",
        choices=["repeats", "drift"],
        help="count work done twice only, or time drift only",
    )
    print_result(run, parser.parse_args())


if __name__ == "__main__":
    main()
