"""Each method's hparams for any model: its file, over values derived from the architecture.

A model with ``conf/base/hparams/<METHOD>/<model>.yaml`` for every method needs nothing
here. For any other model, the family of its config's ``model_type`` (``model_families``
in ``conf/base/parameters/model_families.yml``) gives:

    modules: the family's module paths (the MLP's output projection that ROME, MEMIT
        and KN rewrite, the decoder layers, ...), which replace the reference's;
    target_modules (where the reference's names are not the family's): the modules
        LoRA adapts, in the family's names;
    reference: a model with published hparams files (EasyEdit's values), whose every
        other value carries over: the v* optimisation, clamps, covariance settings.

Layers follow the depth rule: a published layer l of a reference with L_ref layers sits
at round(l * (L - 1) / (L_ref - 1)) of a model with L layers; a published window of
consecutive layers (MEMIT's) keeps its first and last layer by that rule and every layer
between. At the reference's own depth the rule is the identity.

A model's own file overrides the derived values key by key, so a file that sets only
``layers`` keeps everything else derived.

Profiles. The files above are the ``faithful`` profile: the reference's values. Another
profile (``--params hparams_profile=fast``) is an overlay:
``conf/base/hparams/<METHOD>/<profile>/<model>.yaml`` (else ``<profile>/_default.yaml``,
for any model) holds only the keys it changes, applied over the faithful values. A method with no overlay for the model runs faithful. A run
that names no profile takes the machine's (``machine_profile``): faithful where a CUDA
device is visible, fast on a CPU-only machine.

The covariance count. A reference's file keeps its published ``mom2_n_samples``
(Qwen2.5-7B's: 100,000 texts, hours on a CPU for any model). Derived hparams take a
count that fits the run instead, by the run's rule (``editing.derived_mom2_n_samples``):
``fast`` (the fast profile's count), ``faithful`` (the reference's) or a number. The rule
changes only a derived value: a model's own file and a profile's overlay keep theirs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kebench.editing.interface import HparamsError
from kebench.editing.profiles import FAITHFUL, FAST
from kebench.editing.registry import hparams_name

logger = logging.getLogger(__name__)

# Keys that hold a module path template, and the suffix FT's template adds (FT names
# the weight parameter, the others the module).
MODULE_KEYS = (
    "rewrite_module_tmp",
    "layer_module_tmp",
    "mlp_module_tmp",
    "attn_module_tmp",
    "ln_f_module",
    "lm_head_module",
)
WEIGHT_SUFFIX = ".weight"


# The overlay of a profile for a model without its own.
DEFAULT_OVERLAY = "_default"
# The covariance statistics' sample count, which the run's rule sets when derived.
COUNT_KEY = "mom2_n_samples"
# What the user passes to ask for a count (conf/base/parameters/editing.yml).
COUNT_PARAM = "--params mom2_n_samples"


@dataclass(frozen=True)
class Architecture:
    """What the derivation needs of a model's config."""

    model_type: str
    n_layers: int

    @classmethod
    def of(cls, config: object) -> Architecture:
        """From a transformers config: its depth, or its text model's (multimodal)."""
        for source in (config, getattr(config, "text_config", None)):
            for key in ("num_hidden_layers", "n_layer", "num_layers"):
                value = getattr(source, key, None)
                if isinstance(value, int):
                    return cls(str(config.model_type), value)
        raise HparamsError(
            f"config of model_type {config.model_type!r} does not say how many layers "
            "it has (num_hidden_layers / n_layer)"
        )


@dataclass(frozen=True)
class ResolvedHparams:
    """One method's hparams for one model, and where each value came from.

    Attributes:
        values: the hparams, ready for the method's ``from_dict``.
        derived: the keys whose value was derived (not set in the model's own file).
        reference: the model whose published values were the base (None: file only).
        profile: the hparams profile (``faithful``, or the overlay's name).
        overlaid: the keys the profile's overlay set.
        adjusted: derived keys whose reference value the run's rule replaced, each with
            why (``mom2_n_samples``: the rule and the reference's count).
    """

    values: dict[str, Any]
    derived: tuple[str, ...] = ()
    reference: str | None = None
    profile: str = FAITHFUL
    overlaid: tuple[str, ...] = ()
    adjusted: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class HparamsFiles:
    """Every hparams file of the project, and which model's apply to this run.

    Attributes:
        model: the stem of the run model's files (``gpt2-xl``), or its model key.
        files: stem -> method -> the file's values (the faithful profile).
        profile: the run's hparams profile.
        overlays: the profile's overlays: stem (or ``_default``) -> method -> values.
        fast_overlays: the fast profile's, whatever the run's profile: they give the
            covariance count of derived hparams (``fast_count``).
    """

    model: str
    files: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(default_factory=dict)
    profile: str = FAITHFUL
    overlays: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(
        default_factory=dict
    )
    fast_overlays: Mapping[str, Mapping[str, Mapping[str, Any]]] = field(
        default_factory=dict
    )

    def overlay(self, method: str) -> dict[str, Any]:
        """The profile's keys for ``method`` on the run's model (empty: faithful)."""
        return self._overlay_of(self.overlays, method)

    def _overlay_of(
        self, overlays: Mapping[str, Mapping[str, Mapping[str, Any]]], method: str
    ) -> dict[str, Any]:
        for stem in (self.model, DEFAULT_OVERLAY):
            if method in overlays.get(stem, {}):
                return dict(overlays[stem][method])
        return {}

    def fast_count(self, method: str) -> int | None:
        """The fast profile's ``mom2_n_samples`` for ``method`` on the run's model: its
        overlay's, else the smallest that the profile sets for any method (ROME's
        overlay turns the covariance off, so it names no count); None: none set."""
        own = self._overlay_of(self.fast_overlays, method).get(COUNT_KEY)
        if own is not None:
            return int(own)
        methods = {m for stem in self.fast_overlays.values() for m in stem}
        counts = [
            int(values[COUNT_KEY])
            for values in (self._overlay_of(self.fast_overlays, m) for m in methods)
            if COUNT_KEY in values
        ]
        return min(counts, default=None)

    @property
    def own(self) -> dict[str, dict[str, Any]]:
        """The model's own files, by method (copies: callers may adjust them)."""
        return {m: dict(v) for m, v in self.files.get(self.model, {}).items()}


def describe_resolved(
    methods: Sequence[str],
    values: Mapping[str, Mapping[str, Any]],
    provenance: Mapping[str, Mapping[str, Any]],
) -> dict[str, dict[str, Any]]:
    """Run parameters of ``methods``' hparams: the values, which keys were derived
    (``none``: all from the model's file) and from which reference model, which
    derived keys the run's rule adjusted and why, and the profile with the keys its
    overlay set."""
    names = {method: hparams_name(method) for method in methods}

    def profile_of(name: str) -> str:
        found = provenance.get(name, {})
        overlaid = ",".join(found.get("overlaid", []))
        profile = found.get("profile", FAITHFUL)
        return f"{profile} ({overlaid})" if overlaid else profile

    return {
        "hparams_profile": {m: profile_of(name) for m, name in names.items()},
        "hparams": {m: dict(values.get(name, {})) for m, name in names.items()},
        "hparams_derived": {
            m: ",".join(provenance.get(name, {}).get("derived", [])) or "none"
            for m, name in names.items()
        },
        "hparams_reference": {
            m: provenance.get(name, {}).get("reference") or "none"
            for m, name in names.items()
        },
        "hparams_adjusted": {
            m: "; ".join(
                f"{key}: {why}"
                for key, why in provenance.get(name, {}).get("adjusted", {}).items()
            )
            or "none"
            for m, name in names.items()
        },
    }


def family_of(
    architecture: Architecture, families: Mapping[str, Mapping[str, Any]]
) -> tuple[str, Mapping[str, Any]] | None:
    """The family whose ``model_types`` include the architecture's, if any."""
    for name, family in families.items():
        if architecture.model_type in family.get("model_types", [name]):
            return name, family
    return None


def scale_layers(layers: Sequence[int], n_reference: int, n_layers: int) -> list[int]:
    """Published ``layers`` of an ``n_reference``-layer model, moved to ``n_layers``
    layers by the depth rule (the module docstring); a window stays a window."""
    if not layers:
        return []

    def place(layer: int) -> int:
        if n_reference <= 1:
            return 0
        return min(
            n_layers - 1, max(0, round(layer * (n_layers - 1) / (n_reference - 1)))
        )

    ordered = sorted(int(layer) for layer in layers)
    if ordered == list(range(ordered[0], ordered[-1] + 1)):
        return list(range(place(ordered[0]), place(ordered[-1]) + 1))
    return sorted({place(layer) for layer in ordered})


# A module path with its layer index: ``model.layers.11.mlp.gate_proj``.
LAYER_IN_PATH = re.compile(r"^(?P<head>.*?\.)(?P<layer>\d+)(?P<tail>\..*)$")


def scale_inner_params(
    paths: Sequence[str], n_reference: int, n_layers: int
) -> list[str]:
    """EasyEdit's ``inner_params`` (module paths with their layers, UltraEdit's),
    each kind of module's layers moved by the depth rule as one set of layers."""
    groups: dict[tuple[str, str], list[int]] = {}
    for path in paths:
        match = LAYER_IN_PATH.match(path)
        if match is None:
            raise HparamsError(f"inner_params {path!r} names no layer index")
        groups.setdefault((match["head"], match["tail"]), []).append(
            int(match["layer"])
        )
    return [
        f"{head}{layer}{tail}"
        for (head, tail), layers in groups.items()
        for layer in scale_layers(layers, n_reference, n_layers)
    ]


def derive_hparams(
    architecture: Architecture,
    family: Mapping[str, Any],
    reference_values: Mapping[str, Any],
) -> dict[str, Any]:
    """The method's hparams for ``architecture`` from its family and the reference's
    published values (``reference_values``, the reference model's file)."""
    values = dict(reference_values)
    for key in MODULE_KEYS:
        if key in values and key in family["modules"]:
            template = str(family["modules"][key])
            if str(values[key]).endswith(WEIGHT_SUFFIX):
                template += WEIGHT_SUFFIX
            values[key] = template
    if "target_modules" in values and "target_modules" in family:
        values["target_modules"] = list(family["target_modules"])
    if "layers" in values:
        values["layers"] = scale_layers(
            values["layers"], int(family["reference_layers"]), architecture.n_layers
        )
    if "v_loss_layer" in values:
        values["v_loss_layer"] = architecture.n_layers - 1
    if "inner_params" in values and "layers" not in values:
        values["inner_params"] = scale_inner_params(
            values["inner_params"],
            int(family["reference_layers"]),
            architecture.n_layers,
        )
    return values


def count_rule(value: str | int) -> str | int:
    """The run's rule for derived covariance counts: ``fast``, ``faithful`` or a
    positive count (a string of digits from ``--params`` included)."""
    if value in (FAST, FAITHFUL):
        return value
    if not isinstance(value, bool) and str(value).strip().isdigit():
        count = int(str(value).strip())
        if count > 0:
            return count
    raise ValueError(
        f"{COUNT_PARAM}={value!r}: expected {FAST!r} (the fast profile's count), "
        f"{FAITHFUL!r} (the reference's) or a positive number of texts"
    )


def fitting_count(
    rule: str | int, method: str, files: HparamsFiles, reference_count: int
) -> tuple[int, str] | None:
    """The count that ``rule`` gives ``method``'s derived ``mom2_n_samples``, and why;
    None where the reference's count stays (``faithful``, or the same number)."""
    if rule == FAITHFUL:
        return None
    if rule == FAST:
        count = files.fast_count(method)
        if count is None:
            raise ValueError(
                f"{COUNT_PARAM}={FAST}: no overlay conf/base/hparams/<METHOD>/{FAST}/ "
                f"sets {COUNT_KEY} for {files.model}; give a number or {FAITHFUL!r}"
            )
        why = "the fast profile's count"
    else:
        count, why = int(rule), f"{COUNT_PARAM}={rule}"
    if count == int(reference_count):
        return None
    return count, (
        f"{why}, for derived hparams; the reference's faithful count is "
        f"{reference_count}: {COUNT_PARAM}={FAITHFUL}"
    )


def resolve_hparams(
    method: str,
    files: HparamsFiles,
    architecture: Architecture,
    families: Mapping[str, Mapping[str, Any]],
    *,
    derived_mom2_n_samples: str | int = FAITHFUL,
) -> ResolvedHparams:
    """``method``'s hparams for the run's model: its own file over the derived values.

    Args:
        method: e.g. ``ROME`` or ``easyedit:ROME`` (which reads ROME's).
        files: the project's hparams files.
        architecture: the model's type and depth.
        families: ``model_families``.
        derived_mom2_n_samples: the run's rule for a derived ``mom2_n_samples``
            (``count_rule``); ``faithful`` keeps the reference's.
    """
    rule = count_rule(derived_mom2_n_samples)
    name, model = hparams_name(method), files.model
    own = files.own.get(name, {})
    found = family_of(architecture, families)
    reference = str(found[1]["reference"]) if found else None
    published = files.files.get(reference, {}).get(name) if found else None
    if published is None:
        if own:
            return _with_profile(ResolvedHparams(values=own), name, files)
        if found is None:
            why = (
                f"its model_type {architecture.model_type!r} is in no family of "
                f"model_families (families: {sorted(families)}); add a family "
                "(docs/models.md) or an hparams file"
            )
        else:
            why = (
                f"family {found[0]!r} takes its values from {reference!r}, which has "
                f"no conf/base/hparams/{name}/{reference}.yaml"
            )
        raise HparamsError(
            f"no hparams for {name} on {model} (hparams profile {files.profile!r}): "
            f"there is no conf/base/hparams/{name}/{model}.yaml, and {why}"
        )
    family = found[1]
    derived = derive_hparams(architecture, family, published)
    adjusted = {}
    if COUNT_KEY in derived and COUNT_KEY not in own:
        fitted = fitting_count(rule, name, files, derived[COUNT_KEY])
        if fitted is not None:
            derived[COUNT_KEY], adjusted[COUNT_KEY] = fitted
    values = {**derived, **own}
    resolved = ResolvedHparams(
        values=values,
        derived=tuple(
            sorted(key for key in derived if key not in own and key not in adjusted)
        ),
        reference=reference,
        adjusted=adjusted,
    )
    return _with_profile(resolved, name, files)


def _with_profile(
    resolved: ResolvedHparams, method: str, files: HparamsFiles
) -> ResolvedHparams:
    """The faithful values with the run profile's overlay for ``method`` applied."""
    overlay = files.overlay(method)
    if not overlay:
        return resolved
    return ResolvedHparams(
        values={**resolved.values, **overlay},
        derived=tuple(key for key in resolved.derived if key not in overlay),
        reference=resolved.reference,
        profile=files.profile,
        overlaid=tuple(sorted(overlay)),
        adjusted={k: v for k, v in resolved.adjusted.items() if k not in overlay},
    )


def resolve_all(
    methods: Sequence[str],
    files: HparamsFiles,
    architecture: Architecture,
    families: Mapping[str, Mapping[str, Any]],
    *,
    derived_mom2_n_samples: str | int = FAITHFUL,
) -> dict[str, ResolvedHparams]:
    """The resolved hparams of every method that has them for the model (a method
    with neither a file nor a derivation is left out), logging what was derived and
    what the run's rule adjusted (``resolve_hparams``)."""
    resolved = {}
    for method in methods:
        try:
            result = resolve_hparams(
                method,
                files,
                architecture,
                families,
                derived_mom2_n_samples=derived_mom2_n_samples,
            )
        except HparamsError as err:
            logger.debug("%s", err)
            continue
        if result.derived:
            logger.info(
                "%s on %s: derived from %s's published values (%s, %d layers): %s",
                hparams_name(method),
                files.model,
                result.reference,
                architecture.model_type,
                architecture.n_layers,
                ", ".join(f"{key}={result.values[key]}" for key in result.derived),
            )
        for key, why in result.adjusted.items():
            logger.info(
                "%s on %s: %s=%s (%s)",
                hparams_name(method),
                files.model,
                key,
                result.values[key],
                why,
            )
        resolved[hparams_name(method)] = result
    return resolved
