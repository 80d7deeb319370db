"""Nodes of editing: thin glue over ``kebench.editing``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from kebench.compute.engine import ComputeSettings, run_shards
from kebench.editing.hparams import (
    Architecture,
    HparamsFiles,
    describe_resolved,
    resolve_all,
)
from kebench.editing.interface import EditContext
from kebench.editing.registry import hparams_name, method_names
from kebench.editing.requests import requests_from_probes
from kebench.editing.runner import (
    EditJob,
    edit_shards,
    make_job,
    run_edit_shard,
    select_methods,
)
from kebench.editing.store import DeltaStore, EditOutcome
from kebench.models.loading import LoadedModel
from kebench.qa.probes import (
    case_facts,
    case_paraphrases,
    first_cases_per_risk,
    rewritten_facts,
)
from kebench.schemas import EDIT_DELTAS

# the parameter that picks the edits, as errors and reports name it
EDITS_PARAMETER = "editing.n_edits"


def first_edits_per_risk(
    probes: pd.DataFrame, n_edits: int | str | dict[str, int | str]
) -> pd.DataFrame:
    """The direct probes of the first ``n_edits`` cases of each risk (one count, a
    count per risk, or "all"), so that benign edits and each kind of injection are all
    represented."""
    direct = probes[probes["probe_type"] == "direct"]
    return direct[
        direct["case_id"].isin(first_cases_per_risk(direct, n_edits, EDITS_PARAMETER))
    ]


def resolve_edit_hparams(
    hparams_files: HparamsFiles,
    model: LoadedModel,
    model_families: dict[str, dict[str, Any]],
    params: dict[str, Any],
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """Every method's hparams for the model (its own file over values derived from its
    architecture, with a covariance count that fits the run, then the run profile's
    overlay), and, per method, which keys were derived, from which reference, which
    the run's count rule adjusted, and which the profile set."""
    resolved = resolve_all(
        method_names(),
        hparams_files,
        Architecture.of(model.model.config),
        model_families,
        derived_mom2_n_samples=params["derived_mom2_n_samples"],
    )
    values = {method: r.values for method, r in resolved.items()}
    provenance = {
        method: {
            "reference": r.reference,
            "derived": list(r.derived),
            "adjusted": dict(r.adjusted),
            "profile": r.profile,
            "overlaid": list(r.overlaid),
        }
        for method, r in resolved.items()
    }
    return values, provenance


def describe_edit_hparams(
    edit_hparams: dict[str, dict[str, Any]],
    hparams_provenance: dict[str, dict[str, Any]],
    params: dict[str, Any],
) -> dict[str, Any]:
    """The selected methods' resolved hparams and their provenance, as run parameters."""
    methods = select_methods(params["methods"], list(edit_hparams))
    return describe_resolved(methods, edit_hparams, hparams_provenance)


def method_job(
    name: str, edit_hparams: dict[str, dict[str, Any]], mode: str, model_name: str
) -> EditJob:
    """The job of method ``name`` in ``mode``, with its hparams file for the model."""
    where = f"hparams/{hparams_name(name)}/{model_name}.yaml"
    return make_job(name, edit_hparams[hparams_name(name)], mode, where)


def compute_edit_deltas(  # noqa: PLR0913, PLR0917 - a Kedro node's inputs
    probes: pd.DataFrame,
    entailed_facts: pd.DataFrame,
    model: LoadedModel,
    edit_hparams: dict[str, dict[str, Any]],
    edit_deltas_stored: DeltaStore,
    covariance_stats: Path,
    params: dict[str, Any],
    compute: dict[str, Any],
) -> Iterator[EditOutcome]:
    """Edit the model with each selected method; yield every edit's delta and row.

    The edits are the direct probes: the dataset's requested rewrites and the
    injected claims of the harmful sets, in table order. They run in shards, here or
    on a Dask cluster (``compute``). Every case's KG facts (those its edit changes,
    ``entailed_facts`` included, and those its probes ask) go to the methods: IKE
    keeps its demonstrations off them, and the paraphrase probes' questions give its
    update demonstrations.

    A generator: Kedro saves each outcome as its shard finishes, so a killed run keeps
    the edits it finished and the next run skips them.
    """
    every_request = requests_from_probes(probes)
    requests = requests_from_probes(first_edits_per_risk(probes, params["n_edits"]))
    jobs = [
        method_job(name, edit_hparams, params["mode"], model.name)
        for name in select_methods(params["methods"], list(edit_hparams))
    ]
    context = EditContext(
        stats_dir=covariance_stats,
        pool=every_request,
        seed=int(params["seed"]),
        facts=case_facts(probes, rewritten_facts(probes, entailed_facts)),
        paraphrases=case_paraphrases(probes),
        value_batch=int(params["value_batch"]),
    )
    settings = ComputeSettings.from_params(compute)
    shards = edit_shards(
        model.name,
        requests,
        jobs,
        store=edit_deltas_stored,
        context=context,
        max_relative_norm=float(params["max_relative_norm"]),
        shard_size=settings.shard_size,
    )
    for _, outcomes in run_shards(model, run_edit_shard, shards, settings, "editing"):
        yield from outcomes


def tabulate_edit_deltas(edit_deltas: DeltaStore) -> pd.DataFrame:
    """The manifest: one validated row per stored edit, of every method and mode."""
    return EDIT_DELTAS.validate(edit_deltas.manifest())
