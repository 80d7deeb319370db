"""An evaluation run's edits and probe score shards: which stored edits it evaluates,
the shards it scores, the earlier runs' stored shards it keeps, and ``probe_scores``.

A run scores the stored edits that the editing run with the same ``n_edits`` made, in
shards keyed per method by its edits, its kept probes and the scoring settings
(``plan_shards``), so a shard stored by an earlier run is read, not scored again. Every
other stored edit of the mode whose current scores an earlier run stored is kept in
``probe_scores`` beside this run's, so that a later pipeline finds every evaluated edit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from kebench.compute.engine import collect_shards, pending_shards
from kebench.qa.probes import rewritten_facts
from kebench.schemas import PROBE_SCORES, UNEDITED
from kebench.scoring.evaluate import (
    ScoreShard,
    ScoringSettings,
    case_digests,
    joint_drops,
    kept_probes,
    plan_shards,
    probe_score_rows,
    reread_answers,
    stored_shard_plan,
)

logger = logging.getLogger(__name__)


def evaluated_edits(
    stored: pd.DataFrame, cases: Iterable[str], parameter: str
) -> pd.DataFrame:
    """The ``stored`` edits of ``cases``: those the editing pipeline edits with the
    same ``parameter`` (``editing.n_edits``), named in the log where some are missing.

    The store keeps the edits of earlier runs: evaluating them too would report more
    edits than the run asked for and, in a batch or sequential run, apply deltas
    computed together with edits that are not evaluated.
    """
    cases = set(cases)
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
                parameter,
            )
        if kept < len(rows):
            logger.info(
                "%s: evaluating %d of its %d stored edits (%s; --params n_edits=all "
                "evaluates them all)",
                method,
                kept,
                len(rows),
                parameter,
            )
    return edits.reset_index(drop=True)


def selected(rows: pd.DataFrame, selected_edits: pd.DataFrame) -> np.ndarray:
    """Which ``rows`` are of an edit that this run evaluates (its method and case)."""
    keys = ["method", "case_id"]
    chosen = pd.MultiIndex.from_frame(selected_edits[keys])
    return pd.MultiIndex.from_frame(rows[keys]).isin(chosen)


def case_contents(
    probes: pd.DataFrame, drops: pd.DataFrame, method: str, edits: pd.DataFrame
) -> dict[str, str]:
    """What a probe score shard's key holds of each case of ``edits``: its probes that
    ``method`` scores."""
    kept = kept_probes(probes, drops, method)
    return case_digests(kept[kept["case_id"].isin(edits["case_id"])])


def planned_shards(
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    drops: pd.DataFrame,
    settings: ScoringSettings,
    shard_size: int,
) -> pd.DataFrame:
    """The edits to score (failed ones are left out, and reported), in shards of
    ``shard_size`` cases keyed per method by its edits, its kept probes and the
    scoring settings."""
    ok = selected_edits[selected_edits["status"] == "ok"]
    parts = [
        plan_shards(
            rows,
            shard_size,
            asdict(settings),
            content=case_contents(probes, drops, method, rows),
        )
        for method, rows in ok.groupby("method", sort=True)
    ]
    if not parts:
        return plan_shards(ok, shard_size)
    return pd.concat(parts, ignore_index=True)


def earlier_shards(  # noqa: PLR0913 - the settings and mode are keyword-only
    edit_manifest: pd.DataFrame,
    selected_edits: pd.DataFrame,
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    stored: Mapping[str, Any],
    *,
    settings: ScoringSettings,
    mode: str,
) -> pd.DataFrame:
    """Every other stored edit of ``mode``, of any method, whose current scores an
    earlier run stored, with the stored shard that holds them (``stored_shard_plan``):
    evaluating B after A, or fewer edits of A, keeps all of A's scores. A stored edit
    without current scores is logged with the command that scores it."""
    stored_edits = edit_manifest[
        (edit_manifest["mode"] == mode) & (edit_manifest["status"] == "ok")
    ]
    # the groups of a batch or sequential run as stored, as when it was evaluated whole
    drops = joint_drops(stored_edits, probes, rewritten_facts(probes, entailed_facts))
    parts = []
    for method, rows in stored_edits.groupby("method", sort=True):
        found = stored_shard_plan(
            rows,
            stored,
            asdict(settings),
            content=case_contents(probes, drops, method, rows),
        )
        found = found[~selected(found, selected_edits)]
        others = int((~selected(rows, selected_edits)).sum())
        if len(found) < others:
            logger.info(
                "%s: %d of its %d other stored edits in mode %s have no current scores "
                "(never evaluated, or with other probes or settings): kedro run "
                "--pipelines=evaluation --params method=%s,n_edits=... scores them",
                method,
                others - len(found),
                others,
                mode,
                method,
            )
        parts.append(found)
    if not parts:
        return stored_edits.assign(shard=pd.Series(dtype=str))
    return pd.concat(parts, ignore_index=True)


def pending_score_shards(  # noqa: PLR0913 - where and how to score is keyword-only
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    plan: pd.DataFrame,
    drops: pd.DataFrame,
    stored: Mapping[str, Any],
    *,
    store_root: str,
    settings: ScoringSettings,
) -> dict[str, ScoreShard]:
    """The shards of ``plan`` that ``stored`` lacks, each with its kept probes and
    their base scores, to score under its edits (deltas in ``store_root``)."""
    by_id = probes.set_index("probe_id", drop=False)
    base = base_probe_scores.set_index("probe_id")
    shards = {}
    for key, rows, shard_plan in pending_shards(plan, stored):
        kept = kept_probes(by_id, drops, rows["method"].iloc[0])
        shard_probes = kept[kept["case_id"].isin(rows["case_id"])]
        shards[key] = ScoreShard(
            shard=key,
            plan=shard_plan,
            store_root=store_root,
            probes=shard_probes,
            base=base.loc[shard_probes.index],
            settings=settings,
        )
    logger.info(
        "scoring %d shards (%d stored)",
        len(shards),
        plan["shard"].nunique() - len(shards),
    )
    return shards


def collected_scores(  # noqa: PLR0913 - what shapes the floor is keyword-only
    shards: Mapping[str, Callable[[], pd.DataFrame]],
    plan: pd.DataFrame,
    earlier_plan: pd.DataFrame,
    probes: pd.DataFrame,
    base_probe_scores: pd.DataFrame,
    *,
    selected_edits: pd.DataFrame,
    drops: pd.DataFrame,
    strict_cut: tuple[str, ...],
) -> pd.DataFrame:
    """``probe_scores``: the shards of ``plan``, after the unedited floor on their
    cases (without the probes joint scoring dropped for any method, so that the floor
    is measured on probes the methods are measured on); then the edits of
    ``earlier_plan`` (``earlier_shards``); every stored reply read by the current
    matcher (``reread_answers``)."""
    by_id = probes.set_index("probe_id", drop=False)
    base = base_probe_scores.set_index("probe_id")
    planned = by_id["case_id"].isin(plan["case_id"])
    dropped = by_id["probe_id"].isin(drops["probe_id"])
    scored = by_id.index[planned & ~dropped]
    floor = base.loc[base.index.isin(scored)]
    model_name = selected_edits["model"].iloc[0]
    parts = [probe_score_rows(by_id, base, floor, model_name, UNEDITED)]
    parts += collect_shards(shards, plan)
    # the planned edits' rows only: a stored shard may also hold edits that this run
    # scores, or that another stored shard holds
    for key, shard_plan in earlier_plan.groupby("shard", sort=True):
        rows = shards[key]()
        parts.append(rows[rows["case_id"].isin(shard_plan["case_id"])])
    for method, shard_plan in earlier_plan.groupby("method", sort=True):
        logger.info("%s: the stored scores of %d edits kept", method, len(shard_plan))
    scores = pd.concat(parts, ignore_index=True)
    return PROBE_SCORES.validate(reread_answers(scores, probes, strict_cut))


def run_scores(
    probe_scores: pd.DataFrame, selected_edits: pd.DataFrame
) -> pd.DataFrame:
    """The scores of the edits this run evaluated, and the floor: what its metrics
    and report cover (``probe_scores`` also keeps every other evaluated edit)."""
    floor = probe_scores["method"] == UNEDITED
    own = selected(probe_scores, selected_edits)
    return probe_scores[own | floor].reset_index(drop=True)


def failed_edits(selected_edits: pd.DataFrame) -> pd.DataFrame:
    """The failed edits, left out of the ``ok_edits`` metrics and counted as failures
    in the ``itt`` ones, with their reasons."""
    failed = selected_edits[selected_edits["status"] == "failed"]
    return failed[["model", "method", "mode", "case_id", "reason"]].reset_index(
        drop=True
    )
