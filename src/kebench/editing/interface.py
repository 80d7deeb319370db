"""What an editing method is given and returns: its hparams, its context, its entry.

These types are shared by the registry (``kebench.editing.registry``) and by the
backends that build entries themselves (``kebench.editing.easyedit``), so neither has
to import the other's module to know them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Self

import torch

from kebench.editing.delta import Delta
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel
from kebench.qa.probes import CaseFacts

# EasyEdit keys about EasyEdit's own runtime (its model loading, devices, result
# folders): accepted so that an EasyEdit YAML carries over, and not used by kebench.
RUNTIME_KEYS = frozenset(
    {
        "alg_name",
        "model_name",
        "device",
        "model_parallel",
        "fp16",
        "stats_dir",
        "results_dir",
        "sentence_model_name",
        "v_loss_layer",
        # AlphaEdit's file of its projector: kebench computes it from the statistics
        "P_loc",
        # UltraEdit's: how EasyEdit loads its model, and its float16 switch
        "model_class",
        "tokenizer_class",
        "tokenizer_name",
        "half",
        "silent",
    }
)


class HparamsError(ValueError):
    """An hparams file is missing, or has unknown or missing keys."""


@dataclass
class HyperParams:
    """Base of every method's hparams; field names are EasyEdit's YAML keys."""

    @classmethod
    def from_dict(cls, values: dict[str, Any], where: str = "hparams") -> Self:
        names = {f.name for f in fields(cls)}
        unknown = set(values) - names - RUNTIME_KEYS
        if unknown:
            raise HparamsError(
                f"{where}: unknown keys {sorted(unknown)} for {cls.__name__}"
            )
        kinds = {f.name: str(f.type) for f in fields(cls)}
        try:
            # YAML reads 5e-4 (no dot) as a string; a float field takes it as a number.
            chosen = {
                key: float(value)
                if "float" in kinds[key] and isinstance(value, str)
                else value
                for key, value in values.items()
                if key in names
            }
            return cls(**chosen)
        except (TypeError, ValueError) as err:
            raise HparamsError(f"{where}: {err}") from err


@dataclass
class EditContext:
    """What a method may need beyond the model, the requests and its hparams.

    Attributes:
        stats_dir: where covariance statistics are cached (``data/06_models/stats``).
        pool: every request of the run (in-context demonstrations come from it).
        seed: the seed of every random choice, so reruns give identical deltas.
        facts: case_id -> the KG facts its edit changes and its probes ask (IKE
            keeps its demonstrations off them).
        paraphrases: case_id -> questions that ask its edited fact in other words
            (IKE's update demonstrations).
        cache: per-run memo (context templates, statistics), keyed by the caller.
        context_templates: context templates to use instead of sampling them, as
            groups whose first is ``["{}"]`` (the conformance harness gives both
            implementations the same ones); None samples them from the model.
        value_batch: how many edits' target-value optimisations share one batch
            (single-mode ROME edits computed together, MEMIT's batch): speed and
            memory only, the values are the same up to float order.
        earlier: sequential mode: the ``state`` of each delta the model already
            holds, in order (AlphaEdit preserves the keys earlier edits wrote);
            empty in the other modes, where every edit starts from the base model.
    """

    stats_dir: Path
    pool: Sequence[EditRequest] = ()
    seed: int = 0
    facts: Mapping[str, CaseFacts] = field(default_factory=dict)
    paraphrases: Mapping[str, Sequence[str]] = field(default_factory=dict)
    cache: dict[Any, Any] = field(default_factory=dict)
    context_templates: Sequence[Sequence[str]] | None = None
    value_batch: int = 8
    earlier: Sequence[Mapping[str, torch.Tensor]] = ()


# Which earlier states of a sequential stream a method reads (EditMethod.carry).
CARRY = ("all", "last")

Compute = Callable[[LoadedModel, list[EditRequest], Any, EditContext], Delta]
ComputeEach = Callable[[LoadedModel, list[EditRequest], Any, EditContext], list[Delta]]


@dataclass(frozen=True)
class EditMethod:
    """A registered method: its name, hparams class, and delta computation.

    ``batchable`` methods compute one delta for several requests at once (MEMIT);
    the others get exactly one request per call. ``compute_each``, when a method has
    it, computes each request's own delta, as ``compute`` would alone, for several
    requests in one go (ROME: their value optimisations share a batch); single mode
    hands it up to ``EditContext.value_batch`` edits at a time. ``carry`` says which
    earlier states a sequential edit needs (``EditContext.earlier``): ``all`` of them
    (AlphaEdit: every earlier edit's keys), or the ``last`` (LoRA: the adapters as
    they are now, which supersede the earlier ones; the others are not kept in
    memory). ``version`` is part of every edit's fingerprint: a change to what the
    method computes from the same hparams and requests (or from the run's context, as
    IKE's demonstrations) bumps it, so that stored deltas are made again instead of
    reused.
    """

    name: str
    hparams: type[HyperParams]
    compute: Compute
    batchable: bool = False
    version: int = 1
    compute_each: ComputeEach | None = None
    carry: str = "all"

    def __post_init__(self) -> None:
        if self.carry not in CARRY:
            raise ValueError(f"{self.name}: carry {self.carry!r}, not one of {CARRY}")
