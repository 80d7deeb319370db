"""Nodes of evaluation: thin glue over ``kebench.scoring``."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pandas as pd
from matplotlib.figure import Figure

from kebench.compute.engine import (
    ComputeSettings,
    collect_shards,
    pending_shards,
    run_shards,
)
from kebench.editing.hparams import describe_resolved
from kebench.editing.runner import select_methods
from kebench.editing.store import DeltaStore
from kebench.models.loading import LoadedModel
from kebench.pipelines.editing.nodes import EDITS_PARAMETER, first_edits_per_risk
from kebench.qa.llm_questions import CachedChat, LlmSettings, ResponseCache
from kebench.qa.probes import FACT_KEY, edits_measured, rewritten_facts
from kebench.schemas import (
    COUNTERFACT_SCORES,
    JUDGEMENTS,
    METRICS,
    PROBE_SCORES,
    UNEDITED,
)
from kebench.scoring import counterfact
from kebench.scoring.base_store import reuse_scores, score_keys
from kebench.scoring.comparison import (
    comparison_lines,
    edit_sets_differ,
    method_comparison,
    shared_edits,
)
from kebench.scoring.evaluate import (
    ScoreShard,
    ScoringSettings,
    case_digests,
    drop_counts,
    joint_drops,
    kept_probes,
    plan_shards,
    probe_score_rows,
    reread_answers,
    score_pass,
    score_shard,
    stored_shard_plan,
)
from kebench.scoring.generation import GenerationSettings, generation_table
from kebench.scoring.judge import GenerationJudge, judgement_table
from kebench.scoring.metrics import (
    OutcomeSettings,
    metrics_table,
    outcome_tables,
    per_edit_consistency,
    probe_outcomes,
    with_roles,
)
from kebench.scoring.premises import (
    answered_prompts,
    known_probes,
    known_share,
    premise_knowledge,
)
from kebench.scoring.report import (
    counterfact_table,
    detail_table,
    echo_shares,
    generation_section,
    headline_table,
    plot_consistency_distribution,
    plot_direct_vs_entailed,
    plot_gap_vs_edit_succ,
    protocol_table,
    reply_summary,
    report_markdown,
    run_name,
)

logger = logging.getLogger(__name__)

# the texts a probe's base scores depend on, with its type (scoring/base_store.py)
PROBE_TEXTS = ["prompt", "answer_new", "answer_old", "question"]


def select_stored_edits(
    edit_manifest: pd.DataFrame, params: dict[str, Any]
) -> pd.DataFrame:
    """The manifest rows of the chosen methods (``params["methods"]``), in the chosen
    mode."""
    rows = edit_manifest[edit_manifest["mode"] == params["mode"]]
    available = sorted(rows["method"].unique())
    if not available:
        raise ValueError(
            f"no stored edits in mode {params['mode']!r}: run the editing pipeline first "
            "(kedro run --pipelines=editing --params=method=ROME)"
        )
    methods = select_methods(params["methods"], available)
    missing = sorted(set(methods) - set(available))
    if missing:
        raise ValueError(f"no stored edits for {missing}; stored: {available}")
    return rows[rows["method"].isin(methods)].reset_index(drop=True)


def select_edits(
    edit_manifest: pd.DataFrame,
    probes: pd.DataFrame,
    params: dict[str, Any],
    n_edits: int | str | dict[str, int | str],
) -> pd.DataFrame:
    """The stored edits to evaluate: those of the cases the editing pipeline edits
    with the same ``editing.n_edits`` (the first of each risk).

    The store keeps the edits of earlier runs: evaluating them too would report more
    edits than the run asked for and, in a batch or sequential run, apply deltas
    computed together with edits that are not evaluated.
    """
    cases = set(first_edits_per_risk(probes, n_edits)["case_id"])
    stored = select_stored_edits(edit_manifest, params)
    edits = stored[stored["case_id"].isin(cases)]
    for method, rows in stored.groupby("method", sort=True):
        kept = int((edits["method"] == method).sum())
        if kept < len(cases):
            logger.warning(
                "%s: %d of the %d edits that %s asks for are not stored: run the "
                "editing pipeline with the same parameters",
                method,
                len(cases) - kept,
                len(cases),
                EDITS_PARAMETER,
            )
        if kept < len(rows):
            logger.info(
                "%s: evaluating %d of its %d stored edits (%s; --params n_edits=all "
                "evaluates them all)",
                method,
                kept,
                len(rows),
                EDITS_PARAMETER,
            )
    return edits.reset_index(drop=True)


def score_base_probes(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    probes: pd.DataFrame,
    selected_edits: pd.DataFrame,
    earlier_shard_plan: pd.DataFrame,
    base_probe_store_stored: dict[str, Any],
    params: dict[str, Any],
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The probes of every edited case under the unedited model: the floor, and the
    reference every method is compared with; and the new rows of the base-score
    store. A probe scored before, by any run or pipeline, with the same weights,
    settings and token ids, is read from the store. The cases of the earlier edits
    kept in ``probe_scores`` are covered too (read from the store, where scoring
    them put them): the pipelines after evaluation read both tables."""
    cases = {*selected_edits["case_id"], *earlier_shard_plan["case_id"]}
    edited = probes[probes["case_id"].isin(cases)]
    settings = ScoringSettings.from_params(params)
    # a question's asked text is also the model's chat template's
    salt = asdict(settings) | {"chat_template": model.tokenizer.chat_template}
    keys = score_keys(model, edited, PROBE_TEXTS, ["probe_type", "form"], salt)
    scores, partition = reuse_scores(
        base_probe_store_stored,
        keys,
        edited,
        lambda rows: score_pass(model, rows, settings=settings),
    )
    _log_reuse("probes", len(edited), partition)
    return scores.assign(probe_id=edited["probe_id"].to_numpy()), partition


def _log_reuse(what: str, n_rows: int, partition: dict[str, pd.DataFrame]) -> None:
    scored = sum(len(rows) for rows in partition.values())
    logger.info(
        "%d %s under the base model: %d scored now, the others read from the store",
        n_rows,
        what,
        scored,
    )


def score_premise_knowledge(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    premise_probes: pd.DataFrame,
    selected_edits: pd.DataFrame,
    premise_store_stored: dict[str, Any],
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    params: dict[str, Any],
) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """Whether the base model knows each premise of the edited cases' probes: it
    generates the answer greedily; and the new rows of the premise store (a premise
    asked before with the same weights, settings and token ids is read from it, and
    one that a probe's base free answer already answers is read from that)."""
    premises = premise_probes[premise_probes["case_id"].isin(selected_edits["case_id"])]
    wild, settings = params["wild"], params["premises"]
    generation = GenerationSettings(
        stop_strings=tuple(wild["stop_strings"]),
        max_new_tokens=int(settings["max_new_tokens"]),
        batch_size=int(wild["batch_size"]),
    )
    answered = (
        answered_prompts(probes, base_probe_scores, generation.max_new_tokens)
        if "wild_stop" in base_probe_scores
        else {}
    )
    knowledge, partition = premise_knowledge(
        model, premises, model.name, generation, premise_store_stored, answered=answered
    )
    _log_reuse(
        f"premises ({len(premises.drop_duplicates(['prompt', 'answer']))} distinct)",
        len(premises),
        partition,
    )
    return knowledge, partition


def find_joint_drops(
    selected_edits: pd.DataFrame, probes: pd.DataFrame, entailed_facts: pd.DataFrame
) -> pd.DataFrame:
    """The probes left out of joint scoring (batch, sequential): those whose fact
    another edit of the same batch or run rewrites, with the reason; logged by
    count."""
    missing = [c for c in FACT_KEY if c not in probes]
    if missing:
        raise ValueError(
            f"probes have no fact keys {missing}: rerun "
            "`kedro run --pipelines=risk_unification`"
        )
    drops = joint_drops(selected_edits, probes, rewritten_facts(probes, entailed_facts))
    for row in drop_counts(drops).to_dict("records"):
        logger.info(
            "%s (%s): %d %s probes dropped from joint scoring (%s)",
            row["method"],
            row["mode"],
            row["probes"],
            row["probe_type"],
            row["reason"],
        )
    return drops


def plan_score_shards(
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> pd.DataFrame:
    """The edits to score (failed ones are left out, and reported), in shards of
    ``compute.shard_size`` cases keyed per method by its edits, its kept probes and
    the scoring settings."""
    ok = selected_edits[selected_edits["status"] == "ok"]
    shard_size = ComputeSettings.from_params(compute).shard_size
    parts = [
        plan_shards(
            rows,
            shard_size,
            _scoring_salt(params),
            content=_case_contents(probes, joint_dropped_probes, method, rows),
        )
        for method, rows in ok.groupby("method", sort=True)
    ]
    if not parts:
        return plan_shards(ok, shard_size)
    return pd.concat(parts, ignore_index=True)


def _scoring_salt(params: dict[str, Any]) -> dict[str, Any]:
    """What a probe score shard's key holds of the settings."""
    return asdict(ScoringSettings.from_params(params))


def _case_contents(
    probes: pd.DataFrame, drops: pd.DataFrame, method: str, edits: pd.DataFrame
) -> dict[str, str]:
    """What a probe score shard's key holds of each case of ``edits``: its probes that
    ``method`` scores."""
    kept = kept_probes(probes, drops, method)
    return case_digests(kept[kept["case_id"].isin(edits["case_id"])])


def plan_earlier_shards(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    edit_manifest: pd.DataFrame,
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    probe_score_shards_stored: dict[str, Any],
    params: dict[str, Any],
) -> pd.DataFrame:
    """Every other stored edit of this mode, of any method, whose current scores an
    earlier run stored, with the stored shard that holds them (``stored_shard_plan``).
    They are kept in ``probe_scores`` beside this run's, so that a later pipeline finds
    every evaluated edit, whatever this run selected: evaluating B after A, or fewer
    edits of A, keeps all of A's scores. A stored edit without current scores is
    logged with the command that scores it."""
    stored = edit_manifest[
        (edit_manifest["mode"] == params["mode"]) & (edit_manifest["status"] == "ok")
    ]
    # the groups of a batch or sequential run as stored, as when it was evaluated whole
    drops = joint_drops(stored, probes, rewritten_facts(probes, entailed_facts))
    parts = []
    for method, rows in stored.groupby("method", sort=True):
        found = stored_shard_plan(
            rows,
            probe_score_shards_stored,
            _scoring_salt(params),
            content=_case_contents(probes, drops, method, rows),
        )
        found = found[~_selected(found, selected_edits)]
        others = int((~_selected(rows, selected_edits)).sum())
        if len(found) < others:
            logger.info(
                "%s: %d of its %d other stored edits in mode %s have no current scores "
                "(never evaluated, or with other probes or settings): kedro run "
                "--pipelines=evaluation --params method=%s,n_edits=... scores them",
                method,
                others - len(found),
                others,
                params["mode"],
                method,
            )
        parts.append(found)
    if not parts:
        return stored.assign(shard=pd.Series(dtype=str))
    return pd.concat(parts, ignore_index=True)


def _selected(rows: pd.DataFrame, selected_edits: pd.DataFrame) -> np.ndarray:
    """Which ``rows`` are of an edit that this run evaluates (its method and case)."""
    keys = ["method", "case_id"]
    chosen = pd.MultiIndex.from_frame(selected_edits[keys])
    return pd.MultiIndex.from_frame(rows[keys]).isin(chosen)


def score_probe_shards(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    score_shard_plan: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    probe_score_shards_stored: dict[str, Any],
    edit_deltas_stored: DeltaStore,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> Iterator[dict[str, pd.DataFrame]]:
    """Each shard's kept probes under its edited model, here or on a Dask cluster;
    yields each shard as it finishes. Shards stored by an earlier run are not scored
    again."""
    by_id = probes.set_index("probe_id", drop=False)
    base = base_probe_scores.set_index("probe_id")
    shards = {}
    for key, rows, plan in pending_shards(score_shard_plan, probe_score_shards_stored):
        kept = kept_probes(by_id, joint_dropped_probes, rows["method"].iloc[0])
        shard_probes = kept[kept["case_id"].isin(rows["case_id"])]
        shards[key] = ScoreShard(
            shard=key,
            plan=plan,
            store_root=str(edit_deltas_stored.root),
            probes=shard_probes,
            base=base.loc[shard_probes.index],
            settings=ScoringSettings.from_params(params),
        )
    logger.info(
        "scoring %d shards (%d stored)",
        len(shards),
        score_shard_plan["shard"].nunique() - len(shards),
    )
    settings = ComputeSettings.from_params(compute)
    for key, scores in run_shards(model, score_shard, shards, settings, "scoring"):
        yield {key: scores}


def collect_probe_scores(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probe_score_shards: dict[str, Any],
    score_shard_plan: pd.DataFrame,
    earlier_shard_plan: pd.DataFrame,
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    selected_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``probe_scores``: the planned shards, after the unedited floor on their cases
    (without the probes joint scoring dropped for any method, so that the floor is
    measured on probes the methods are measured on); then every other stored edit of
    this mode with current scores (``plan_earlier_shards``); every stored reply read
    by the current matcher (``reread_answers``)."""
    by_id = probes.set_index("probe_id", drop=False)
    base = base_probe_scores.set_index("probe_id")
    planned = by_id["case_id"].isin(score_shard_plan["case_id"])
    dropped = by_id["probe_id"].isin(joint_dropped_probes["probe_id"])
    scored = by_id.index[planned & ~dropped]
    floor = base.loc[base.index.isin(scored)]
    model_name = selected_edits["model"].iloc[0]
    parts = [probe_score_rows(by_id, base, floor, model_name, UNEDITED)]
    parts += collect_shards(probe_score_shards, score_shard_plan)
    # the planned edits' rows only: a stored shard may also hold edits that this run
    # scores, or that another stored shard holds
    for key, plan in earlier_shard_plan.groupby("shard", sort=True):
        rows = probe_score_shards[key]()
        parts.append(rows[rows["case_id"].isin(plan["case_id"])])
    for method, plan in earlier_shard_plan.groupby("method", sort=True):
        logger.info("%s: the stored scores of %d edits kept", method, len(plan))
    scores = pd.concat(parts, ignore_index=True)
    strict_cut = ScoringSettings.from_params(params).strict_cut
    return PROBE_SCORES.validate(reread_answers(scores, probes, strict_cut))


def select_run_scores(
    probe_scores: pd.DataFrame, selected_edits: pd.DataFrame
) -> pd.DataFrame:
    """The scores of the edits this run evaluated, and the floor: what its metrics
    and report cover (``probe_scores`` also keeps every other evaluated edit)."""
    floor = probe_scores["method"] == UNEDITED
    own = _selected(probe_scores, selected_edits)
    return probe_scores[own | floor].reset_index(drop=True)


def _counterfact_settings(params: dict[str, Any]) -> counterfact.CounterfactSettings:
    settings = params["counterfact"]
    return counterfact.CounterfactSettings(
        max_length=int(settings["max_length"]),
        top_k=int(settings["top_k"]),
        seed=int(settings["seed"]),
        batch_size=int(params["batch_size"]),
    )


def _reference_texts(params: dict[str, Any]) -> counterfact.ReferenceTexts | None:
    """ROME's attribute snippets (and stored IDF) when the configured files exist."""
    settings = params["counterfact"]
    snippets = Path(settings["snippets"])
    if not snippets.is_file():
        logger.warning(
            "CounterFact reference score not computed: no attribute snippets at %s "
            "(docs/evaluation.md#counterfacts-standard-metrics)",
            snippets,
        )
        return None
    idf, vocab = Path(settings["idf"]), Path(settings["vocab"])
    stored = idf.is_file() and vocab.is_file()
    logger.info(
        "CounterFact reference texts from %s, IDF %s",
        snippets,
        f"from {idf}" if stored else "fitted on the snippets",
    )
    return counterfact.load_reference_texts(
        str(snippets), str(idf) if stored else None, str(vocab) if stored else None
    )


def score_counterfact_base(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    counterfact_prompts: pd.DataFrame,
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """CounterFact's standard metrics of the edited cases under the unedited model
    (ROME's "pre" numbers); empty for other datasets. A prompt the base probe scores
    hold (same prompt and targets) is read from them."""
    prompts = counterfact_prompts[
        counterfact_prompts["case_id"].isin(selected_edits["case_id"])
    ]
    if prompts.empty:
        return COUNTERFACT_SCORES.validate(
            pd.DataFrame(columns=list(COUNTERFACT_SCORES.columns))
        )
    logger.info(
        "CounterFact metrics of %d cases, unedited", prompts["case_id"].nunique()
    )
    cases = counterfact.score_cases(
        model,
        prompts,
        _counterfact_settings(params),
        _reference_texts(params),
        known=counterfact.evaluated_nlls(probes, base_probe_scores, "lp_new", "lp_old"),
    )
    return counterfact.score_rows(cases, prompts, model.name, UNEDITED)


def score_counterfact_shards(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    model: LoadedModel,
    counterfact_prompts: pd.DataFrame,
    score_shard_plan: pd.DataFrame,
    counterfact_score_shards_stored: dict[str, Any],
    edit_deltas_stored: DeltaStore,
    probes: pd.DataFrame,
    run_probe_scores: pd.DataFrame,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> Iterator[dict[str, pd.DataFrame]]:
    """CounterFact's standard metrics of each scoring shard's cases under its edited
    model, shard by shard; stored shards are not scored again. A prompt the shard's
    probe scores hold (same prompt and targets, under the same edits) is read from
    them."""
    settings = _counterfact_settings(params)
    keys = counterfact.shard_keys(score_shard_plan, counterfact_prompts, settings)
    pending = {
        keys[key]: (rows, plan)
        for key, rows, plan in pending_shards(score_shard_plan, {})
        if key in keys and keys[key] not in counterfact_score_shards_stored
    }
    if not pending:
        return
    references = _reference_texts(params)
    shards = {
        stored_key: counterfact.CounterfactShard(
            shard=rows["shard"].iloc[0],
            plan=plan,
            store_root=str(edit_deltas_stored.root),
            prompts=counterfact_prompts[
                counterfact_prompts["case_id"].isin(rows["case_id"])
            ],
            settings=settings,
            references=references,
            known=counterfact.evaluated_nlls(
                probes,
                run_probe_scores[run_probe_scores["method"] == rows["method"].iloc[0]],
                "lp_edit_new",
                "lp_edit_old",
            ),
        )
        for stored_key, (rows, plan) in pending.items()
    }
    logger.info(
        "CounterFact metrics: %d shards (%d stored)",
        len(shards),
        len(keys) - len(shards),
    )
    for key, scores in run_shards(
        model,
        counterfact.score_shard,
        shards,
        ComputeSettings.from_params(compute),
        "CounterFact",
    ):
        yield {key: scores}


def collect_counterfact_scores(
    counterfact_score_shards: dict[str, Any],
    counterfact_base_scores: pd.DataFrame,
    score_shard_plan: pd.DataFrame,
    counterfact_prompts: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """``counterfact_scores``: the unedited model's, then every planned shard's."""
    keys = counterfact.shard_keys(
        score_shard_plan, counterfact_prompts, _counterfact_settings(params)
    )
    plan = pd.DataFrame({"shard": sorted(keys.values())})
    parts = [counterfact_base_scores, *collect_shards(counterfact_score_shards, plan)]
    return COUNTERFACT_SCORES.validate(pd.concat(parts, ignore_index=True))


def tabulate_generations(
    probe_scores: pd.DataFrame, probes: pd.DataFrame
) -> pd.DataFrame:
    """The free generations behind ``wild`` and ``bke_f1``, one row per probe and
    model."""
    return generation_table(probe_scores, probes)


def judge_generations(
    generations: pd.DataFrame,
    probes: pd.DataFrame,
    judge_llm: openai.OpenAI,
    params: dict[str, Any],
) -> pd.DataFrame:
    """The LLM judge's verdict on each free generation (none unless
    ``judge.enabled``); a generation it could not judge keeps the reason."""
    settings = params["judge"]
    if not settings["enabled"]:
        return JUDGEMENTS.validate(pd.DataFrame(columns=list(JUDGEMENTS.columns)))
    chat = CachedChat(
        judge_llm,
        LlmSettings.from_params(settings),
        ResponseCache(settings["cache_dir"]),
    )
    table = judgement_table(
        generations, probes, GenerationJudge(chat, settings["prompt"])
    )
    logger.info(
        "judged %d generations with %s (%d requests sent, %d unjudged)",
        len(table),
        settings["model"],
        chat.requests_sent,
        int(table["judge"].isna().sum()),
    )
    return table


def _outcome_settings(params: dict[str, Any]) -> OutcomeSettings:
    return OutcomeSettings(
        generate_types=tuple(params["generation"]["probe_types"]),
        wild_types=tuple(params["wild"]["probe_types"]),
        judged=bool(params["judge"]["enabled"]),
    )


def compute_metrics(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    premise_knowledge: pd.DataFrame,
    judgements: pd.DataFrame,
    counterfact_scores: pd.DataFrame,
    params: dict[str, Any],
) -> pd.DataFrame:
    """Every metric per (model, method, risk, probe_type), with protocol, population
    (``ok_edits``; ``itt``, where the failed edits count as failures, on the probes
    joint scoring kept), 95% CI over edits, and n; also over the probes whose premises
    the base model knows (``*_known``), the share of known premises, and CounterFact's
    standard metrics (protocol ``counterfact``, its successful edits)."""
    seed = int(params["bootstrap_seed"])
    outcomes, failed = outcome_tables(
        probe_scores,
        probes,
        failed_edits,
        joint_dropped_probes,
        _outcome_settings(params),
        judgements=judgements,
    )
    table = metrics_table(
        outcomes,
        seed=seed,
        failed=failed,
        known=known_probes(premise_knowledge, probes),
    )
    shares = known_share(premise_knowledge, seed)
    shares = shares.assign(
        method=UNEDITED,
        risk="all",
        metric="premises_known_" + shares["direction"],
        protocol="wild",
        population="ok_edits",
    )
    parts = [
        table,
        shares.rename(columns={"kind": "probe_type", "known_share": "value"}),
    ]
    if standard := counterfact.metric_rows(counterfact_scores, seed):
        parts.append(pd.DataFrame(standard).assign(population="ok_edits"))
    table = pd.concat(parts, ignore_index=True)
    return METRICS.validate(table.reindex(columns=list(METRICS.columns)))


def consequence_semantics(entailed_facts: pd.DataFrame) -> str:
    """How the entailed probes were derived (``entailed_facts.semantics``)."""
    found = sorted(set(entailed_facts["semantics"]))
    return "+".join(found) if found else "none (no entailed facts)"


def list_failed_edits(selected_edits: pd.DataFrame) -> pd.DataFrame:
    """The failed edits, left out of the ``ok_edits`` metrics and counted as failures
    in the ``itt`` ones, with their reasons."""
    failed = selected_edits[selected_edits["status"] == "failed"]
    return failed[["model", "method", "mode", "case_id", "reason"]].reset_index(
        drop=True
    )


def compare_methods(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probe_scores: pd.DataFrame,
    probes: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    params: dict[str, Any],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's methods on the edits they all have: their headline there, and each
    method's paired differences from ``comparison.reference``."""
    outcomes, failed = outcome_tables(
        probe_scores,
        probes,
        failed_edits,
        joint_dropped_probes,
        _outcome_settings(params),
    )
    return method_comparison(
        outcomes,
        failed,
        params["headline_population"],
        params["comparison"]["reference"],
        int(params["bootstrap_seed"]),
    )


def build_report(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    metrics: pd.DataFrame,
    probe_scores: pd.DataFrame,
    failed_edits: pd.DataFrame,
    joint_dropped_probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    shared_headline: pd.DataFrame,
    method_comparison: pd.DataFrame,
    params: dict[str, Any],
    run: dict[str, str],
) -> tuple[str, pd.DataFrame, Figure, Figure, Figure]:
    """The markdown report, titled by what the run measured (dataset, model, profile),
    its headline table (in the population ``headline_population``), and the plots,
    which put methods evaluated on different edits side by side on the edits they
    share only."""
    population = params["headline_population"]
    headline = headline_table(metrics, population)
    per_edit = per_edit_consistency(with_roles(probe_outcomes(probe_scores), probes))
    evaluated = probes[probes["case_id"].isin(selected_edits["case_id"])]
    differ = edit_sets_differ(probe_scores) and len(shared_headline) > 0
    compared = shared_headline if differ else headline
    note = (
        f"on the {len(shared_edits(probe_scores))} edits every method has"
        if differ
        else ""
    )
    markdown = report_markdown(
        headline,
        failed_edits,
        drop_counts(joint_dropped_probes),
        f"kebench evaluation · {run_name(run)}",
        population,
        semantics=consequence_semantics(entailed_facts),
        edits=edits_measured(selected_edits, probes, EDITS_PARAMETER),
        details=detail_table(metrics, population),
        echoes=echo_shares(evaluated),
        protocols=protocol_table(metrics, population),
        counterfact=counterfact_table(metrics),
        generations=generation_section(reply_summary(probe_scores), metrics),
        comparison=comparison_lines(probe_scores, shared_headline, method_comparison),
    )
    return (
        markdown,
        headline,
        plot_direct_vs_entailed(compared, note),
        plot_consistency_distribution(per_edit),
        plot_gap_vs_edit_succ(compared, note),
    )


def describe_run(
    model: LoadedModel,
    entailed_facts: pd.DataFrame,
    selected_edits: pd.DataFrame,
    edit_hparams: dict[str, dict[str, Any]],
    hparams_provenance: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """What the run evaluated: model, methods, mode, the entailed probes' semantics,
    each method's hparams, and which of them were derived from which reference."""
    methods = sorted(selected_edits["method"].unique())
    return {
        "model": model.name,
        "methods": "+".join(methods),
        "mode": selected_edits["mode"].iloc[0],
        "consequence_semantics": consequence_semantics(entailed_facts),
        **describe_resolved(methods, edit_hparams, hparams_provenance),
    }


def track_metrics(
    metrics: pd.DataFrame, failed_edits: pd.DataFrame
) -> dict[str, dict[str, float]]:
    """MLflow metrics per method: ``<risk>.<probe_type>.<metric>`` (and ``.ci_*``)
    over the successful edits, ``<risk>.<probe_type>.<metric>_itt`` intention to
    treat, plus ``failed_edits``; logged with the prefix ``evaluation``."""
    tracked: dict[str, dict[str, float]] = {}
    for row in metrics.to_dict("records"):
        values = tracked.setdefault(row["method"], {})
        suffix = "" if row["population"] == "ok_edits" else f"_{row['population']}"
        key = f"{row['risk']}.{row['probe_type']}.{row['metric']}{suffix}"
        values[key] = float(row["value"])
        for bound in ("ci_low", "ci_high"):
            if pd.notna(row[bound]):
                values[f"{key}.{bound}"] = float(row[bound])
    for method, values in tracked.items():
        values["failed_edits"] = float((failed_edits["method"] == method).sum())
    return tracked
