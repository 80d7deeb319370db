"""Covariance statistics: what they cost, and how much the corpus moves ROME and MEMIT.

Usage: python benchmarks/covariance.py [--model smollm2-135m] [--n-samples N]
           [--n-edits 10] [--text-file FILE] [--stats-dir DIR] [--methods ROME+MEMIT]

Two corpora, both offline: ``model_samples`` (kebench's default: texts the model
writes, seeded) and a text file, by default the passages of BoolQ (Wikipedia
paragraphs; KEBENCH_DATA_DIR/editattack/boolq.jsonl, in file order, one paragraph
each), the closest offline stand-in for the reference's Wikipedia corpus.

Prints one JSON object:
    corpora: per corpus, for every module that the methods rewrite, compute_s (the
        statistics from nothing: sampling or reading the corpus, then one pass),
        cached_load_s (reading the files again in a new run), n_texts and tokens;
    methods: per method (faithful hparams, mom2_adjustment on, the corpus the only
        change), per corpus over the first --n-edits demo edits: edit_succ (kebench's
        EditSucc: log P_edited(new) > log P_base(true)), new_beats_true (P(new) >
        P(true), both after the edit), logprob_new (mean log P(target_new | prompt)
        after the edit) and locality; and delta_cosine / norm_ratio (mean and min over
        the edits) between the two corpora's ΔW of each edit.
Statistics go to a fresh temporary folder unless --stats-dir names one to keep them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

# Kedro's rich logging writes to stdout; keep stdout for the one JSON object.
with contextlib.redirect_stdout(sys.stderr):
    from editing import N_PROBES, edit_requests
    from model_cli import model_parser, print_result

    from kebench.editing.datasets import EditHparamsDataset
    from kebench.editing.delta import agreement, delta_applied
    from kebench.editing.hparams import Architecture, resolve_all
    from kebench.editing.interface import EditContext
    from kebench.editing.quality import measure_edits
    from kebench.editing.registry import get_method
    from kebench.editing.stats import (
        MAX_TOKENS,
        MODEL_SAMPLES,
        read_provenance,
        resolve_corpus,
        second_moments,
        stats_folder,
    )
    from kebench.models.logprobs import score_answers
    from kebench.project import PROJECT_ROOT, load_config, project_model

logger = logging.getLogger("benchmarks.covariance")
METHODS = "ROME+MEMIT"
SEED = 0


def boolq_passages(out: Path, n_texts: int) -> Path:
    """The first ``n_texts`` distinct BoolQ passages, one paragraph each, in ``out``."""
    data = Path(
        os.environ.get("KEBENCH_DATA_DIR", PROJECT_ROOT.parent / "shared" / "data")
    )
    passages: dict[str, None] = {}
    with (data / "editattack" / "boolq.jsonl").open(encoding="utf-8") as rows:
        for row in rows:
            passages.setdefault(" ".join(json.loads(row)["passage"].split()))
            if len(passages) == n_texts:
                break
    out.write_text("\n\n".join(passages) + "\n", encoding="utf-8")
    return out


def time_statistics(
    lm, corpus: str, groups: dict[tuple[int, str], list[str]], stats_dir: Path
) -> dict:
    """Compute each group's statistics over ``corpus``, then read them back."""
    timings = {"compute_s": 0.0, "cached_load_s": 0.0}
    for (n_samples, dtype), paths in groups.items():
        for phase in ("compute_s", "cached_load_s"):
            started = time.perf_counter()
            second_moments(
                lm,
                paths,
                dataset=corpus,
                n_samples=n_samples,
                dtype_name=dtype,
                context=EditContext(stats_dir, seed=SEED),  # a new run's empty memo
            )
            timings[phase] += time.perf_counter() - started
    folder_of = {
        key: stats_folder(
            stats_dir,
            lm.name,
            resolve_corpus(corpus),
            n_samples=key[0],
            seed=SEED,
            max_tokens=MAX_TOKENS,
        )
        for key in groups
    }
    provenance = [
        read_provenance(folder_of[key] / f"{path}.{key[1]}.safetensors")
        for key, paths in groups.items()
        for path in paths
    ]
    return {
        **{key: round(value, 2) for key, value in timings.items()},
        "modules": [found["module"] for found in provenance],
        "n_texts": provenance[0]["n_texts"],
        "tokens": provenance[0]["tokens"],
    }


def edit_quality(lm, requests, deltas, probes) -> dict:
    """EditSucc, P(new) > P(true) after the edit, mean log P(new), locality."""
    quality = measure_edits(lm, requests, deltas, probes)
    beats = []
    for request, delta, measured in zip(requests, deltas, quality, strict=True):
        with delta_applied(lm.model, delta):
            (true,) = score_answers(
                lm.model, lm.tokenizer, [request.text], [request.target_true]
            )
        beats.append(measured.logprob_new > true.logprob)
    return {
        "edit_succ": statistics.mean(q.edit_succ for q in quality),
        "new_beats_true": statistics.mean(beats),
        "logprob_new": round(statistics.mean(q.logprob_new for q in quality), 3),
        "locality": round(statistics.mean(q.locality for q in quality), 4),
    }


def summary(values: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.mean(values), 4), "min": round(min(values), 4)}


def run(args: argparse.Namespace) -> dict:
    """Time both corpora's statistics, then edit with each and compare."""
    config = load_config({"dataset": "demo", "model": args.model})
    lm = project_model(args.model, config)
    requests = edit_requests("demo", config)
    edits, probes = (
        requests[: args.n_edits],
        requests[args.n_edits : args.n_edits + N_PROBES],
    )
    files = EditHparamsDataset(
        str(PROJECT_ROOT / "conf" / "base" / "hparams"),
        args.model,
        config["catalog"]["model"]["registry"],
    ).load()
    resolved = resolve_all(
        args.methods.split("+"),
        files,
        Architecture.of(lm.model.config),
        config["parameters"]["model_families"],
    )
    values = {m: {**r.values, "mom2_adjustment": True} for m, r in resolved.items()}
    n_samples = args.n_samples or max(v["mom2_n_samples"] for v in values.values())
    groups: dict[tuple[int, str], list[str]] = {}
    for found in values.values():
        found["mom2_n_samples"] = n_samples
        group = groups.setdefault((n_samples, found["mom2_dtype"]), [])
        for layer in found["layers"]:
            path = found["rewrite_module_tmp"].format(layer)
            if path not in group:
                group.append(path)
    with tempfile.TemporaryDirectory() as scratch:
        stats_dir = Path(args.stats_dir or Path(scratch) / "stats")
        text_file = Path(
            args.text_file
            or boolq_passages(Path(scratch) / "boolq_passages.txt", n_samples)
        )
        corpora = {MODEL_SAMPLES: MODEL_SAMPLES, text_file.stem: str(text_file)}
        result = {
            "model": lm.name,
            "n_samples": n_samples,
            "n_edits": len(edits),
            "text_file": args.text_file or "BoolQ passages (editattack/boolq.jsonl)",
            "corpora": {},
            "methods": {},
        }
        for name, corpus in corpora.items():
            result["corpora"][name] = time_statistics(lm, corpus, groups, stats_dir)
            logger.info("%s: %s", name, result["corpora"][name])
        context = EditContext(stats_dir, pool=requests, seed=SEED)
        for method, raw in values.items():
            entry = get_method(method)
            deltas, measured = {}, {}
            for name, corpus in corpora.items():
                hparams = entry.hparams.from_dict(
                    {**raw, "mom2_dataset": corpus}, method
                )
                started = time.perf_counter()
                deltas[name] = [entry.compute(lm, [r], hparams, context) for r in edits]
                measured[name] = {
                    **edit_quality(lm, edits, deltas[name], probes),
                    "seconds_per_edit": round(
                        (time.perf_counter() - started) / len(edits), 2
                    ),
                }
                logger.info("%s over %s: %s", method, name, measured[name])
            pairs = [
                agreement(lm.model, *pair)[0]
                for pair in zip(*deltas.values(), strict=True)
            ]
            result["methods"][method] = {
                **measured,
                "delta_cosine": summary([found.cosine for found in pairs]),
                "norm_ratio": summary([found.norm_ratio for found in pairs]),
            }
    return result


def main() -> None:
    # Progress on stderr as each corpus and method finishes (Kedro's logging setup
    # leaves other loggers at WARNING).
    logger.addHandler(logging.StreamHandler(sys.stderr))
    logger.setLevel(logging.INFO)
    parser = model_parser(__doc__)
    parser.add_argument(
        "--n-samples", type=int, help="Default: the hparams' mom2_n_samples."
    )
    parser.add_argument("--n-edits", type=int, default=10)
    parser.add_argument(
        "--text-file", help="The text-file corpus. Default: BoolQ passages."
    )
    parser.add_argument("--stats-dir", help="Keep the statistics here.")
    parser.add_argument("--methods", default=METHODS)
    print_result(run, parser.parse_args())


if __name__ == "__main__":
    main()
