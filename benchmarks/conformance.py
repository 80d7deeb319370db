"""Conformance of kebench's editing methods with EasyEdit's, run side by side (issue 14).

Usage: python benchmarks/conformance.py --easyedit DIR
           [--methods ROME+R-ROME+MEMIT+AlphaEdit+LoRA+FT-L+FT-M+KN+IKE] [--edits 3]
           [--speed N] [--quality] [--out FILE] [--store [DIR]]
           [--model smollm2-135m] [--dataset demo]

DIR is an EasyEdit checkout (its ``easyeditor`` folder), which this script imports and
runs in the same process; EasyEdit is never a dependency of kebench, and none of its
code is in this repository. Both implementations get identical inputs:

    model: the run model as a pipeline run loads it (one object, shared);
    edits: the dataset's first ``--edits`` edit requests, each edited alone (EasyEdit's
        request dicts as its editor builds them: the prompt with the subject filled
        in, ``subject``, ``target_new``, ``ground_truth``);
    hparams: kebench's faithful values for the model, resolved as a run resolves them,
        with kebench's own extensions off (EXTENSIONS_OFF), fewer optimisation steps
        (STEP_OVERRIDES) and the covariance corpus below; EasyEdit's hparams class
        gets the keys it has, plus its runtime keys;
    context templates: groups of EasyEdit MEMIT's shape (``[["{}"], [five texts of
        10 tokens]]``), sampled once by kebench's sampler and kept in TEMPLATES (the
        sampler of EasyEdit, ``generate_fast``, wrote runs of punctuation with this
        transformers); kebench gets the groups (``EditContext.context_templates``),
        EasyEdit's ROME and R-ROME their flattening in their module caches, its
        MEMIT the groups;
    covariance: EasyEdit reads Wikipedia, which cannot be done offline. Its statistics
        function (``layer_stats``, behind ROME's ``get_inv_cov``, R-ROME's and MEMIT's
        ``get_cov``) is replaced by one returning kebench's C = E[k kᵀ]
        (``kebench.editing.stats.second_moments``) over CORPUS, a text file of texts the
        model wrote once; EasyEdit's getters then invert or use C as they do. kebench's
        methods read the same file as their ``mom2_dataset``;
    tokenizer: the padding side EasyEdit's editor sets: right for ROME, R-ROME and
        MEMIT, left for the other methods;
    model_name (EasyEdit picks code paths by substrings of it: KN's module names, the
        T5 and ChatGLM branches): ``<model_type>/<model>``, ``llama/smollm2-135m``;
    lm_head_module, for EasyEdit: the name ``named_parameters`` gives the output
        embeddings (the input embeddings' on a model with tied embeddings, where
        EasyEdit's MEMIT would not find ``lm_head.weight``).

EasyEdit is imported without running its package ``__init__`` files, which import
every method and trainer it has, and with them hydra, higher, openai and more:
``easyeditor``, ``easyeditor.models``, ``easyeditor.util`` and ``easyeditor.evaluate``
are registered as bare packages over the checkout's folders, so that only the method
modules compared here (and what they import) run. Its ``evaluate.py`` gives IKE's
prompt; the two modules it imports and IKE's prompt does not use (MELO's LoRA class,
the metric helpers) are stand-ins.

IKE changes no weights. EasyEdit retrieves demonstrations with a sentence-embedding
model over a training set, which is not available offline, and which demonstrating
edits to use is kebench's choice (``kebench.editing.methods.ike``). So EasyEdit gets
kebench's: the records of ``demonstrating_edits`` over the same pool (the dataset's
first POOL_SIZE edits) and the same paraphrases (their questions), with each record's
``rephrase_prompt`` and ``locality_prompt`` / ``locality_ground_truth`` where kebench
gave the edit an update or retain demonstration. EasyEdit's ``encode_ike_facts``
turns them into sentences, and its first ``k`` become the in-context examples of its
evaluation prompt (``compute_icl_edit_quality``). Compared: the text each feeds the
model before the answer.

Prints one JSON object: per method, per edit and their mean,
    cosine: <ΔW_kebench, ΔW_EasyEdit> / (‖ΔW_kebench‖ ‖ΔW_EasyEdit‖), over every
        parameter either changed (per parameter as well for several);
    norm_ratio: ‖ΔW_kebench‖ / ‖ΔW_EasyEdit‖ (Frobenius);
    logprob_kebench, logprob_easyedit: log P(target_new | prompt) after each one's
        edit (kebench.scoring), and logprob_diff = kebench - EasyEdit;
    IKE: same_text, and the log-probs after each one's prompt.
A method kebench has not registered is skipped with a message.

--speed N: ROME and MEMIT at these identical settings, kebench and EasyEdit alternately
(N edits each, twice, in this process, after one untimed edit each), each editing as
its runs do (kebench's single mode computes ROME's edits value_batch at a time, each
as alone): seconds per edit and ratio = EasyEdit / kebench.

--quality: both sides at the methods' own step counts (no STEP_OVERRIDES), and per
method each side's EditSucc and locality (kebench.editing.quality, in %) on the edits,
the locality probes being the dataset's next N_PROBES requests, with kebench − EasyEdit
in points (issue 16: within 5). Not with --store; no sequential stream is compared.

--store [DIR] (default tests/editing/data/conformance): EasyEdit's outputs as the
reference data of tests/editing/test_conformance.py, which checks kebench against them
without EasyEdit. In DIR: TEMPLATES and CORPUS (made once, then reused: they are the
inputs), ``reference.json`` (the edits, IKE's pool, the EasyEdit commit, a fingerprint
of each covariance: trace and C·g for a stored probe g) and per method
``<method>.json`` (both sides' hparams, per edit the post-edit log-prob, the delta's
norm and layout; IKE: the prompt text) with ``<method>.safetensors``: ROME, R-ROME,
MEMIT: each layer's factors (W += left @ rightᵀ); KN: the changed columns and their
indices; FT-L, FT-M: the sketches ΔW·G_in and G_outᵀ·ΔW, G stored in ``sketch.safetensors``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import logging
import math
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Kedro's rich logging writes to stdout; keep stdout for the one JSON object.
with contextlib.redirect_stdout(sys.stderr):
    import numpy as np
    import torch
    from editing import N_PROBES, edit_cases
    from model_cli import model_parser, print_result
    from safetensors.torch import load_file, save_file

    from kebench.atomic import atomic_path
    from kebench.editing.codebook import Codebook
    from kebench.editing.datasets import EditHparamsDataset
    from kebench.editing.delta import (
        CODEBOOK,
        SIDE_MEMORY,
        Agreement,
        Delta,
        ParamDelta,
        agreement,
        delta_applied,
    )
    from kebench.editing.forward import get_module, outer_change, weight_is_transposed
    from kebench.editing.hparams import Architecture, resolve_hparams
    from kebench.editing.interface import EditContext
    from kebench.editing.methods.ike import demonstrating_edits
    from kebench.editing.methods.wise import (
        activation_name,
        out_of_scope_prompt,
    )
    from kebench.editing.methods.wise import context_templates as wise_templates
    from kebench.editing.module_hooks import module_dims
    from kebench.editing.quality import measure_edits
    from kebench.editing.registry import get_method
    from kebench.editing.requests import EditRequest, requests_from_frame
    from kebench.editing.rewrite import context_templates, flatten
    from kebench.editing.runner import make_job, run_job
    from kebench.editing.sidememory import CURRENT, SideMemory
    from kebench.editing.stats import sample_texts, second_moments
    from kebench.editing.store import DeltaStore
    from kebench.models.loading import LoadedModel
    from kebench.models.logprobs import answer_text, score_answers
    from kebench.project import PROJECT_ROOT, load_config, project_model
    from kebench.qa.probes import case_paraphrases, edit_probes

logger = logging.getLogger("benchmarks.conformance")

METHODS = "ROME+R-ROME+MEMIT+AlphaEdit+LoRA+GRACE+UltraEdit+WISE+FT-L+FT-M+KN+IKE"
SPEED_METHODS = ("ROME", "MEMIT")
DATA = PROJECT_ROOT / "tests" / "editing" / "data" / "conformance"
TEMPLATES = "templates.json"
CORPUS = "corpus.txt"
REFERENCE = "reference.json"
SKETCH = "sketch.safetensors"
COVARIANCE = "covariance.safetensors"
# Texts of the covariance corpus (64 new tokens each): about 8k tokens.
CORPUS_TEXTS = 128
# IKE's demonstrations come from the dataset's first edits (the demo edits 20).
POOL_SIZE = 20
# Columns of the Gaussian sketches of a dense delta (FT).
SKETCH_COLUMNS = 8
SEED = 0
# EasyEdit MEMIT's one template setting: 5 samples of 10 tokens.
TEMPLATE_LENGTHS = [[10, 5]]
# kebench's own extensions, off where its hparams have them: KN's neuron cap, the
# early stop of the value optimisation.
EXTENSIONS_OFF = {"max_neurons": None, "v_stop_loss": None}
# Fewer optimisation steps than the faithful files' 25: the same computation, cheaper
# to run on both sides (and in CI); both get these values.
# EasyEdit's UltraEdit takes exactly batch_size requests per call: one, as kebench's
# single and sequential modes give it (--quality too).
ONE_REQUEST = {"batch_size": 1, "batch_size_once": 1}
STEP_OVERRIDES = {
    "ROME": {"v_num_grad_steps": 10},
    "R-ROME": {"v_num_grad_steps": 10},
    "MEMIT": {"v_num_grad_steps": 10},
    "AlphaEdit": {"v_num_grad_steps": 10},
    # and adapters at four layers, not all 30: the stored factors are 1 MB, not 8
    "LoRA": {"num_steps": 10, "layers": [4, 5, 6, 7]},
    "GRACE": {"n_iter": 10},
    "WISE": {"n_iter": 10},
    # two of UltraEdit's eleven modules (one gate, one up projection, which share a
    # normaliser): the stored factors are 0.9 MB, not 4.8
    "UltraEdit": {
        **ONE_REQUEST,
        "inner_params": [
            "model.layers.12.mlp.gate_proj",
            "model.layers.20.mlp.up_proj",
        ],
    },
    "FT-L": {"num_steps": 10},
    "FT-M": {"num_steps": 10},
    "KN": {"steps": 5},
}


@dataclass(frozen=True)
class MethodSpec:
    """How EasyEdit runs a kebench method: its alg_name, hparams class (module,
    name), the padding side its editor sets, and the runner of one edit (None: IKE,
    whose prompt ``easyedit_ike_text`` builds), and for a method made for sequential
    editing the runner of a stream of edits, each on top of the ones before."""

    alg_name: str
    hparams_class: tuple[str, str]
    padding_side: str
    run: Callable[..., Delta] | None
    stream: Callable[..., list[Delta]] | None = None
    # False: both sides make their own context templates (WISE's are greedy, no
    # sampler in between), compared instead of shared
    shared_templates: bool = True


# --- EasyEdit, imported without its package __init__ files -------------------------


def _bare_package(name: str, folder: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(folder)]
    sys.modules[name] = module
    return module


def _unused(name: str) -> object:
    def stand_in(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError(f"EasyEdit's {name} is not loaded by the conformance run")

    return stand_in


def import_easyedit(root: Path) -> types.SimpleNamespace:
    """EasyEdit's method modules from the checkout ``root`` (module docstring)."""
    if not (root / "easyeditor" / "models" / "rome").is_dir():
        raise SystemExit(f"--easyedit {root}: no easyeditor/models/rome there")
    for name in (
        "easyeditor",
        "easyeditor.models",
        "easyeditor.util",
        # UltraEdit's helpers, without the trainers' __init__ (their vision models)
        "easyeditor.trainer",
        "easyeditor.trainer.algs",
        "easyeditor.trainer.algs.malmen",
    ):
        _bare_package(name, root / name.replace(".", "/"))
    _bare_package("easyeditor.evaluate", root / "easyeditor" / "evaluate")
    _bare_package("easyeditor.models.melo", root / "easyeditor" / "models" / "melo")
    melo = types.ModuleType("easyeditor.models.melo.melo")
    melo.LORA = type("LORA", (), {})
    sys.modules[melo.__name__] = melo
    metrics = types.ModuleType("easyeditor.evaluate.evaluate_utils")
    metrics.__getattr__ = _unused
    sys.modules[metrics.__name__] = metrics
    hparams = importlib.import_module("easyeditor.util.hparams")
    sys.modules["easyeditor.util"].HyperParams = hparams.HyperParams

    def load(name: str) -> types.ModuleType:
        return importlib.import_module(f"easyeditor.{name}")

    commit = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return types.SimpleNamespace(
        rome=load("models.rome.rome_main"),
        rome_u=load("models.rome.compute_u"),
        r_rome=load("models.r_rome.r_rome_main"),
        r_rome_u=load("models.r_rome.compute_u"),
        memit=load("models.memit.memit_main"),
        alphaedit=load("models.alphaedit.AlphaEdit_main"),
        ft=load("models.ft.ft_main"),
        lora=load("models.lora.lora_main"),
        grace=load("models.grace.grace_main"),
        ultraedit=load("models.ultraedit.ultraedit_main"),
        wise=load("models.wise.wise_main"),
        wise_utils=load("models.wise.utils"),
        kn=load("models.kn.kn_main"),
        ike=load("models.ike.ike_hparams"),
        ike_facts=load("models.ike.util"),
        evaluate=load("evaluate.evaluate"),
        root=str(root),
        commit=commit or "unknown",
    )


def easyedit_name(lm: LoadedModel) -> str:
    """The model_name EasyEdit's substring tests read (module docstring)."""
    return f"{lm.model.config.model_type}/{lm.name}"


def easyedit_request(request: EditRequest) -> dict[str, Any]:
    """The request dict EasyEdit's editor builds from kebench's request."""
    return {
        "case_id": request.case_id,
        "prompt": request.text,
        "subject": request.subject,
        "target_new": request.target_new,
        # EasyEdit's own placeholder when a ground truth is unknown
        "ground_truth": request.target_true or "<|endoftext|>",
        "portability": {},
        "locality": {},
    }


@contextlib.contextmanager
def easyedit_call(lm: LoadedModel, padding_side: str) -> Iterator[None]:
    """EasyEdit's padding side meanwhile; afterwards the tokenizer's and every
    parameter's ``requires_grad`` as they were (EasyEdit's FT and ROME set them)."""
    tokenizer = lm.tokenizer
    side = tokenizer.padding_side
    flags = {name: p.requires_grad for name, p in lm.model.named_parameters()}
    tokenizer.padding_side = padding_side
    try:
        yield
    finally:
        tokenizer.padding_side = side
        for name, param in lm.model.named_parameters():
            param.requires_grad_(flags[name])


class Covariance:
    """EasyEdit's ``layer_stats`` stand-in: kebench's C over the given corpus."""

    def __init__(self, lm: LoadedModel, stats_dir: Path) -> None:
        self.lm = lm
        self.context = EditContext(stats_dir=stats_dir, seed=SEED)
        # module path -> the C EasyEdit was given (the reference's fingerprints)
        self.given: dict[str, torch.Tensor] = {}

    def matrix(
        self, path: str, dataset: str, n_samples: int, dtype: str
    ) -> torch.Tensor:
        moment = second_moments(
            self.lm,
            [path],
            dataset=dataset,
            n_samples=n_samples,
            dtype_name=dtype,
            context=self.context,
        )[path]
        self.given[path] = moment
        return moment

    def layer_stats(  # noqa: PLR0913, PLR0917 - EasyEdit's signature
        self,
        model: object,
        tok: object,
        layer_name: str,
        stats_dir: str,
        ds_name: str,
        to_collect: Sequence[str],
        sample_size: int | None = None,
        precision: str | None = None,
        **kwargs: object,
    ) -> types.SimpleNamespace:
        moment = self.matrix(layer_name, ds_name, sample_size, precision or "float32")
        return types.SimpleNamespace(mom2=types.SimpleNamespace(moment=moment.clone))

    def install(self, ee: types.SimpleNamespace) -> None:
        for module in (ee.rome_u, ee.r_rome_u, ee.memit, ee.alphaedit):
            module.layer_stats = self.layer_stats
        ee.rome_u.inv_mom2_cache.clear()
        ee.r_rome_u.inv_mom2_cache.clear()
        ee.memit.COV_CACHE.clear()
        ee.alphaedit.COV_CACHE.clear()


# --- EasyEdit's side of each method: one edit, as a kebench Delta of its exact change


def _factors(lm: LoadedModel, deltas: dict, out_first: bool) -> Delta:
    """EasyEdit's per-weight factor pairs as low-rank changes (W += left @ rightᵀ)."""
    params = {}
    for name, (first, second) in deltas.items():
        module = get_module(lm.model, name.removesuffix(".weight"))
        out_vecs, in_vecs = (first, second) if out_first else (second, first)
        if out_vecs.dim() == 1:
            out_vecs, in_vecs = out_vecs[:, None], in_vecs[:, None]
        params[name] = outer_change(module, out_vecs, in_vecs)
    return Delta(params=params)


def run_rome(ee, lm, request, hparams, inputs: Inputs) -> Delta:
    """EasyEdit's ROME: (u, v) with ΔW = v uᵀ, u in the key space."""
    ee.rome.CONTEXT_TEMPLATES_CACHE = flatten(inputs.templates)
    deltas = ee.rome.execute_rome(lm.model, lm.tokenizer, request, hparams)
    return _factors(lm, deltas, out_first=False)


def run_r_rome(ee, lm, request, hparams, inputs: Inputs) -> Delta:
    """EasyEdit's R-ROME, with the keys its hparams choose."""
    ee.r_rome.CONTEXT_TEMPLATES_CACHE = flatten(inputs.templates)
    deltas = ee.r_rome.execute_r_rome(lm.model, lm.tokenizer, request, hparams)
    return _factors(lm, deltas, out_first=False)


def run_memit(ee, lm, request, hparams, inputs: Inputs) -> Delta:
    """EasyEdit's MEMIT: per layer (adj_k, resid) with ΔW = resid adj_kᵀ."""
    ee.memit.CONTEXT_TEMPLATES_CACHE = [list(group) for group in inputs.templates]
    deltas = ee.memit.execute_memit(lm.model, lm.tokenizer, [request], hparams)
    return _factors(lm, deltas, out_first=False)


def exact_factors(change: torch.Tensor, rank: int) -> ParamDelta:
    """A dense change of rank ``rank`` as its factors (W += left @ rightᵀ), from its
    SVD; refused when the rest is more than float noise."""
    left, singular, right_t = torch.linalg.svd(change.double(), full_matrices=False)
    rest = float(singular[rank:].norm() / singular.norm())
    if rest > 1e-4:  # noqa: PLR2004 - float32 noise of a rank-`rank` matrix
        raise ValueError(f"a change of rank {rank} has {rest:.2e} of its norm beyond")
    return ParamDelta(
        "low_rank",
        {
            "left": (left[:, :rank] * singular[:rank]).float(),
            "right": right_t[:rank].T.float(),
        },
    )


# EasyEdit AlphaEdit's projectors by (layers, threshold, covariance corpus, samples).
PROJECTORS: dict[tuple, torch.Tensor] = {}


def alphaedit_ready(ee, lm: LoadedModel, hparams, inputs: Inputs) -> None:
    """AlphaEdit's module state for a fresh stream: its templates, its projectors (its
    own ``get_project`` of the given covariance, instead of a ``P_loc`` file) and its
    record of earlier edits' keys emptied (``reset_cache``)."""
    module = ee.alphaedit
    module.CONTEXT_TEMPLATES_CACHE = [list(group) for group in inputs.templates]
    # once per process and settings, as EasyEdit computes P once (P_loaded)
    key = (
        tuple(hparams.layers),
        hparams.nullspace_threshold,
        hparams.mom2_dataset,
        hparams.mom2_n_samples,
    )
    if key not in PROJECTORS:
        PROJECTORS[key] = torch.stack(
            [
                module.get_project(lm.model, lm.tokenizer, layer, hparams)
                for layer in hparams.layers
            ]
        )
    module.P = PROJECTORS[key]
    module.P_loaded = True
    module.cache_c = torch.zeros_like(module.P)
    module.cache_c_new = True


def alphaedit_delta(deltas: dict[str, torch.Tensor]) -> Delta:
    """EasyEdit's AlphaEdit changes (dense, one edit: rank one) as exact factors."""
    return Delta({name: exact_factors(change, 1) for name, change in deltas.items()})


def run_alphaedit(ee, lm, request, hparams, inputs: Inputs) -> Delta:
    """EasyEdit's AlphaEdit on one edit, with no earlier edits to preserve."""
    alphaedit_ready(ee, lm, hparams, inputs)
    deltas = ee.alphaedit.execute_AlphaEdit(lm.model, lm.tokenizer, [request], hparams)
    return alphaedit_delta(deltas)


def stream_alphaedit(ee, lm, requests, hparams, inputs: Inputs) -> list[Delta]:
    """EasyEdit's AlphaEdit on a stream: each edit's change added to the weights, as
    ``apply_AlphaEdit_to_model`` adds it, and its keys kept for the next edits; the
    weights restored after."""
    alphaedit_ready(ee, lm, hparams, inputs)
    names = [
        f"{hparams.rewrite_module_tmp.format(layer)}.weight" for layer in hparams.layers
    ]
    saved = {name: lm.model.get_parameter(name).detach().clone() for name in names}
    stream = []
    try:
        for request in requests:
            deltas = ee.alphaedit.execute_AlphaEdit(
                lm.model, lm.tokenizer, [request], hparams
            )
            with torch.no_grad():
                for name, change in deltas.items():
                    param = lm.model.get_parameter(name)
                    param += change.to(device=param.device, dtype=param.dtype)
            stream.append(alphaedit_delta(deltas))
    finally:
        with torch.no_grad():
            for name, value in saved.items():
                lm.model.get_parameter(name).copy_(value)
    return stream


def run_lora(ee, lm, request, hparams, _inputs: Inputs) -> Delta:
    """EasyEdit's LoRA: its adapters seeded as kebench seeds them, trained, and each
    adapted module's product (peft's ``get_delta_weight``) as exact factors; then the
    adapters are taken off and what EasyEdit switched on for training switched off.
    peft refuses AdaLoRA without ``total_step``, which EasyEdit does not pass: it gets
    ``num_steps`` (methods/lora.py)."""
    from peft import AdaLoraConfig  # noqa: PLC0415 - EasyEdit's venv has it

    ee.lora.AdaLoraConfig = functools.partial(
        AdaLoraConfig, total_step=hparams.num_steps
    )
    model = lm.model
    use_cache = model.config.use_cache
    torch.manual_seed(SEED)
    peft_model = ee.lora.execute_lora(model, lm.tokenizer, [request], hparams)
    try:
        params = {}
        for name, module in model.named_modules():
            if hasattr(module, "get_delta_weight") and hasattr(module, "base_layer"):
                change = module.get_delta_weight("default").detach()
                # the adapter's own rank: AdaLoRA's is init_r, not hparams.rank
                rank = module.r["default"]
                params[f"{name}.weight"] = exact_factors(change, rank)
    finally:
        peft_model.unload()
        model.gradient_checkpointing_disable()
        model.disable_input_require_grads()
        model.config.use_cache = use_cache
    return Delta(params)


def grace_module(hparams) -> str:
    """The module path of EasyEdit's ``inner_params`` (its weight, brackets)."""
    (weight,) = hparams.inner_params
    return weight.removesuffix(".weight").replace("[", ".").replace("]", "")


def easyedit_codebook(lm: LoadedModel, path: str) -> Codebook:
    """The codebook of EasyEdit's GRACE adapter at ``path``, entry ids its rows (its
    entries are only ever appended); labels, which only its conflict rule reads, 0."""
    adapter = lm.model.get_submodule(path)
    n = len(adapter.keys)
    return Codebook(
        ids=torch.arange(n),
        keys=adapter.keys.detach().float().cpu(),
        values=adapter.values.detach().float().cpu(),
        radii=adapter.epsilons.detach().float().flatten().cpu(),
        labels=torch.zeros(n, dtype=torch.long),
    )


def own_logprob(lm: LoadedModel, request: dict) -> str:
    """log P(target_new | prompt) as the model now is (EasyEdit's adapter in place,
    querying the position of its edit's prompt, as its own evaluation does)."""
    (score,) = score_answers(
        lm.model, lm.tokenizer, [request["prompt"]], [request["target_new"]]
    )
    return repr(score.logprob)


def stream_grace(ee, lm, requests, hparams, _inputs: Inputs) -> list[Delta]:
    """EasyEdit's GRACE on a stream: one adapter, each edit seeded as kebench seeds
    it; each delta the entries its edit made or changed, with the log-prob its own
    adapter gives the edit's target (``meta``). The model's layer is put back after."""
    path = grace_module(hparams)
    first, stream = None, []
    before = Codebook.empty(*module_dims(lm.model.get_submodule(path)))
    try:
        for request in requests:
            torch.manual_seed(SEED)
            editor, _ = ee.grace.apply_grace_to_model(
                lm.model, lm.tokenizer, [request], hparams
            )
            # later editors find the adapter in place and keep no original layer
            first = first or editor
            book = easyedit_codebook(lm, path)
            stream.append(
                Delta(
                    codebooks={path: book.changed_since(before)},
                    meta={"logprob": own_logprob(lm, request)},
                )
            )
            before = book
    finally:
        if first is not None:
            first.reset_layer()
    return stream


def run_grace(ee, lm, request, hparams, inputs: Inputs) -> Delta:
    """EasyEdit's GRACE on one edit, from an empty codebook."""
    return stream_grace(ee, lm, [request], hparams, inputs)[0]


def stream_ultraedit(ee, lm, requests, hparams, _inputs: Inputs) -> list[Delta]:
    """EasyEdit's UltraEdit on a stream: one executor, kept initialised after its
    first call (what its unset ``is_init`` means to do: the lifelong normaliser
    carries over); each edit's change is the shifts it computes (read before it adds
    them to the weights: their difference in float32 would lose them), as exact
    factors of rank its traced tokens; the weights restored after."""
    names = [f"{m.removesuffix('.weight')}.weight" for m in hparams.inner_params]
    saved = {name: lm.model.get_parameter(name).detach().clone() for name in names}
    editor = ee.ultraedit.ULTRAEDIT
    predict = editor.predict_param_shifts
    shifts: dict[str, torch.Tensor] = {}

    def recording(self, module_kv_map):
        found = predict(self, module_kv_map)
        shifts.update(found)
        return found

    editor.predict_param_shifts = recording
    executor = ee.ultraedit.UltraEditRewriteExecutor()
    stream = []
    try:
        for request in requests:
            shifts.clear()
            executor.apply_to_model(lm.model, lm.tokenizer, [request], hparams)
            executor.is_init = True
            text = request["prompt"] + " " + request["target_new"]
            rank = len(lm.tokenizer(text)["input_ids"])
            params = {}
            for module, shift in shifts.items():
                # EasyEdit's shifts are (input, output): a Linear weight takes them
                # transposed
                linear = isinstance(get_module(lm.model, module), torch.nn.Linear)
                change = (shift.T if linear else shift).detach().float().cpu()
                params[f"{module}.weight"] = exact_factors(change, rank)
            stream.append(Delta(params))
    finally:
        editor.predict_param_shifts = predict
        with torch.no_grad():
            for name, value in saved.items():
                lm.model.get_parameter(name).copy_(value)
    return stream


def run_ultraedit(ee, lm, request, hparams, inputs: Inputs) -> Delta:
    """EasyEdit's UltraEdit on one edit, from a new normaliser."""
    return stream_ultraedit(ee, lm, [request], hparams, inputs)[0]


def easyedit_side_memory(lm: LoadedModel, path: str, hparams) -> SideMemory:
    """The shard of EasyEdit's WISE adapter at ``path`` (the one being trained: its
    saved shards start after ``save_freq`` edits), with its threshold."""
    adapter = lm.model.get_submodule(path)
    threshold = adapter.editing_mean_act.min_act() * hparams.act_ratio
    return SideMemory(
        ids=torch.tensor([0]),
        weights=adapter.new_weight.detach().clone().float().cpu()[None],
        thresholds=torch.tensor([threshold], dtype=torch.float32),
        roles=torch.tensor([CURRENT]),
        activation=activation_name(lm.model),
    )


def stream_wise(ee, lm, requests, hparams, inputs: Inputs) -> list[Delta]:
    """EasyEdit's WISE on a stream (``sequential_edit``: one adapter), its mask drawn
    as kebench draws a stream's first shard's; each edit with kebench's out-of-scope
    sentence, and each delta its shard with the log-prob its own adapter gives the
    edit's target (``meta``). The model's module is put back after."""
    path = grace_module(hparams)
    parent, name = path.rsplit(".", 1)
    module = lm.model.get_submodule(path)
    ours = get_method("WISE").hparams.from_dict(inputs.kebench["WISE"], "WISE")
    context = inputs.context()
    hparams.sequential_edit = len(requests) > 1
    np.random.seed([SEED, 0])
    stream = []
    try:
        for given in requests:
            edit = next(r for r in inputs.requests if r.case_id == given["case_id"])
            request = {
                **given,
                "loc_prompt": out_of_scope_prompt(edit, ours, context),
            }
            ee.wise.apply_wise_to_model(lm.model, lm.tokenizer, [request], hparams)
            stream.append(
                Delta(
                    side_memories={path: easyedit_side_memory(lm, path, hparams)},
                    meta={"logprob": own_logprob(lm, request)},
                )
            )
    finally:
        setattr(lm.model.get_submodule(parent), name, module)
    return stream


def run_wise(ee, lm, request, hparams, inputs: Inputs) -> Delta:
    """EasyEdit's WISE on one edit, from a new adapter."""
    return stream_wise(ee, lm, [request], hparams, inputs)[0]


def easyedit_wise_templates(ee) -> list[str] | None:
    """The context templates EasyEdit's WISE made and kept (None: none yet)."""
    return ee.wise_utils.CONTEXT_TEMPLATES_CACHE


def run_ft(ee, lm, request, hparams, _inputs: Inputs) -> Delta:
    """EasyEdit's FT: the whole change of each trained weight."""
    deltas = ee.ft.execute_ft(lm.model, lm.tokenizer, [request], hparams)
    return Delta(
        params={
            name: ParamDelta("dense", {"values": change.detach().float().cpu()})
            for name, change in deltas.items()
        }
    )


def run_kn(ee, lm, request, hparams, inputs: Inputs) -> Delta:
    """EasyEdit's KN edits the weights in place: the columns it changed (rows for a
    Conv1D weight), read off the output projections, then undone."""
    rewrite_tmp = inputs.kebench["KN"]["rewrite_module_tmp"]
    names = [
        f"{rewrite_tmp.format(layer)}.weight"
        for layer in range(lm.model.config.num_hidden_layers)
    ]
    before = {name: lm.model.get_parameter(name).detach().clone() for name in names}
    params = {}
    try:
        _model, undo = ee.kn.apply_kn_to_model(
            lm.model, lm.tokenizer, [request], hparams
        )
        for name in names:
            change = (lm.model.get_parameter(name).detach() - before[name]).float()
            module = get_module(lm.model, name.removesuffix(".weight"))
            dim = 0 if weight_is_transposed(module) else 1
            index = change.ne(0).any(dim=1 - dim).nonzero().flatten()
            if index.numel():
                params[name] = ParamDelta(
                    "index",
                    {
                        "index": index.cpu(),
                        "values": change.index_select(dim, index).cpu(),
                    },
                    dim=dim,
                )
        undo()
    finally:
        with torch.no_grad():
            for name in names:
                lm.model.get_parameter(name).copy_(before[name])
    return Delta(params=params)


METHOD_SPECS = {
    "ROME": MethodSpec("ROME", ("rome", "ROMEHyperParams"), "right", run_rome),
    "R-ROME": MethodSpec(
        "R-ROME", ("r_rome", "R_ROMEHyperParams"), "right", run_r_rome
    ),
    "MEMIT": MethodSpec("MEMIT", ("memit", "MEMITHyperParams"), "right", run_memit),
    "AlphaEdit": MethodSpec(
        "AlphaEdit",
        ("alphaedit", "AlphaEditHyperParams"),
        "right",
        run_alphaedit,
        stream_alphaedit,
    ),
    "LoRA": MethodSpec("LoRA", ("lora", "LoRAHyperParams"), "left", run_lora),
    "GRACE": MethodSpec(
        "GRACE", ("grace", "GraceHyperParams"), "left", run_grace, stream_grace
    ),
    "UltraEdit": MethodSpec(
        "ULTRAEDIT",
        ("ultraedit", "UltraEditHyperParams"),
        "left",
        run_ultraedit,
        stream_ultraedit,
    ),
    "WISE": MethodSpec(
        "WISE",
        ("wise", "WISEHyperParams"),
        "left",
        run_wise,
        stream_wise,
        shared_templates=False,
    ),
    "FT-L": MethodSpec("FT", ("ft", "FTHyperParams"), "left", run_ft),
    "FT-M": MethodSpec("FT", ("ft", "FTHyperParams"), "left", run_ft),
    "KN": MethodSpec("KN", ("kn", "KNHyperParams"), "left", run_kn),
    "IKE": MethodSpec("IKE", ("ike", "IKEHyperParams"), "left", None),
}


# --- inputs: templates, corpus, hparams --------------------------------------------


@dataclass
class Inputs:
    """What both implementations get (module docstring)."""

    folder: Path
    requests: list[EditRequest]
    pool: list[EditRequest]
    paraphrases: dict[str, list[str]]
    templates: list[list[str]]
    kebench: dict[str, dict[str, Any]]
    stats_dir: Path
    # --quality: the locality probes (the dataset's requests after the edited ones)
    probes: list[EditRequest] = dataclasses.field(default_factory=list)

    @property
    def corpus(self) -> Path:
        return self.folder / CORPUS

    def context(
        self, cache: dict | None = None, shared_templates: bool = True
    ) -> EditContext:
        return EditContext(
            stats_dir=self.stats_dir,
            pool=self.pool,
            seed=SEED,
            paraphrases=self.paraphrases,
            cache={} if cache is None else cache,
            context_templates=self.templates if shared_templates else None,
        )


def make_templates(lm: LoadedModel, folder: Path) -> list[list[str]]:
    """Template groups of EasyEdit MEMIT's shape (``["{}"]``, then five texts of 10
    tokens), sampled once by kebench's sampler (seeded) and kept."""
    file = folder / TEMPLATES
    if file.is_file():
        return json.loads(file.read_text(encoding="utf-8"))["groups"]
    context = EditContext(stats_dir=folder, seed=SEED)
    groups = [list(g) for g in context_templates(lm, TEMPLATE_LENGTHS, context)]
    record = {
        "model": lm.name,
        "sampled_by": f"kebench.editing.rewrite.context_templates {TEMPLATE_LENGTHS}, "
        f"seed {SEED}",
        "groups": groups,
    }
    _write_json(file, record)
    return groups


def make_corpus(lm: LoadedModel, folder: Path) -> Path:
    """CORPUS_TEXTS texts the model writes (kebench's sampler, seeded), one paragraph
    each, made once and kept."""
    file = folder / CORPUS
    if not file.is_file():
        texts: list[str] = []
        for texts in sample_texts(lm, CORPUS_TEXTS, SEED):  # noqa: B007 - the last is whole
            pass
        paragraphs = [" ".join(t.split()) for t in texts if t.strip()]
        with atomic_path(file) as tmp:
            tmp.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return file


def kebench_hparams(  # noqa: PLR0913, PLR0917 - the model, the methods, the settings
    lm: LoadedModel,
    config,
    model: str,
    methods: Sequence[str],
    corpus: Path,
    overrides: dict[str, dict[str, Any]] = STEP_OVERRIDES,
) -> dict[str, dict[str, Any]]:
    """Each method's faithful hparams for the model, as a run resolves them, with
    kebench's extensions off and the conformance corpus as covariance corpus."""
    files = EditHparamsDataset(
        str(PROJECT_ROOT / "conf" / "base" / "hparams"),
        model,
        config["catalog"]["model"]["registry"],
    ).load()
    architecture = Architecture.of(lm.model.config)
    families = config["parameters"]["model_families"]
    values = {}
    for method in methods:
        found = dict(resolve_hparams(method, files, architecture, families).values)
        for key, value in EXTENSIONS_OFF.items():
            if key in found or key in hparams_keys(method):
                found[key] = value
        if "mom2_dataset" in found:
            found.update(mom2_dataset=str(corpus), mom2_n_samples=CORPUS_TEXTS)
        found.update(overrides.get(method, {}))
        if method == "KN":
            # one batch of all integration steps (EasyEdit needs steps % batch_size == 0)
            found["batch_size"] = found["steps"]
        values[method] = found
    return values


def hparams_keys(method: str) -> set[str]:
    """The keys of kebench's hparams class for ``method`` (none if unregistered)."""
    if unavailable(method):
        return set()
    return {f.name for f in dataclasses.fields(get_method(method).hparams)}


def output_embeddings_module(lm: LoadedModel, configured: str) -> str:
    """The module whose ``.weight`` is the output embeddings, under the name
    ``named_parameters`` lists it: EasyEdit's MEMIT looks ``lm_head.weight`` up there,
    and a model with tied embeddings (SmolLM2) lists that tensor once, as the input
    embeddings'."""
    names = {name for name, _ in lm.model.named_parameters()}
    if f"{configured}.weight" in names:
        return configured
    weight = lm.model.get_output_embeddings().weight
    for name, param in lm.model.named_parameters():
        if param is weight:
            return name.removesuffix(".weight")
    return configured


def easyedit_hparams(
    ee, method: str, values: dict[str, Any], lm: LoadedModel, stats_dir: Path
) -> tuple[Any, dict[str, Any]]:
    """EasyEdit's hparams object for ``method``: the keys its class has, from
    ``values``, and its runtime keys."""
    spec = METHOD_SPECS[method]
    module, name = spec.hparams_class
    params_class = getattr(getattr(ee, module), name)
    names = {f.name for f in dataclasses.fields(params_class)}
    chosen = {key: value for key, value in values.items() if key in names}
    chosen.update(
        alg_name=spec.alg_name,
        model_name=easyedit_name(lm),
        device="cpu" if lm.device.type == "cpu" else str(lm.device),
    )
    if "stats_dir" in names:
        chosen["stats_dir"] = str(stats_dir)
    if "P_loc" in names:
        # never read: alphaedit_ready gives AlphaEdit its projectors
        chosen["P_loc"] = str(stats_dir / "null_space_project.pt")
    if "lm_head_module" in chosen:
        chosen["lm_head_module"] = output_embeddings_module(
            lm, chosen["lm_head_module"]
        )
    if method == "IKE":
        chosen["sentence_model_name"] = "none (offline: see the IKE note)"
    if method in {"GRACE", "UltraEdit", "WISE"}:
        # the keys EasyEdit reads and never uses, which kebench's files leave out,
        # take kebench's defaults
        ours = get_method(method).hparams.from_dict(values, method)
        for key in names - set(chosen):
            if hasattr(ours, key):
                chosen[key] = getattr(ours, key)
    if method == "WISE":
        chosen.update(
            zip(("alpha", "beta", "gamma"), values["act_margin"], strict=True)
        )
    if method in {"GRACE", "WISE"}:
        # kebench's files name the module by layer and template; EasyEdit's GRACE
        # and WISE evaluate the path as Python, the layer in brackets
        template = ours.rewrite_module_tmp.replace(".{}", "[{}]")
        chosen["inner_params"] = [f"{template.format(ours.layers[0])}.weight"]
    if method == "UltraEdit":
        # how EasyEdit would load the model it is handed here, and its logging
        chosen.update(
            model_class="AutoModelForCausalLM",
            tokenizer_class="AutoTokenizer",
            tokenizer_name=chosen["model_name"],
            silent=True,
            results_dir=str(stats_dir),
            # a copy: EasyEdit's UltraEdit rewrites the list in place
            inner_params=list(values["inner_params"]),
        )
    return params_class(**chosen), chosen


# --- IKE: the text each implementation feeds the model ------------------------------


class RecordingTokenizer:
    """The tokenizer, keeping every text it is called on."""

    def __init__(self, tokenizer: object) -> None:
        self._tokenizer = tokenizer
        self.texts: list[str] = []

    def __call__(self, text: str, *args: object, **kwargs: object) -> object:
        self.texts.append(text)
        return self._tokenizer(text, *args, **kwargs)

    def __getattr__(self, name: str) -> object:
        return getattr(self._tokenizer, name)


def ike_records(request: EditRequest, inputs: Inputs, k: int) -> list[dict[str, Any]]:
    """EasyEdit's records of the edits that demonstrate ``request`` in kebench."""
    records = []
    for edit in demonstrating_edits(request, inputs.pool, k, {}, inputs.paraphrases):
        record = easyedit_request(edit.request)
        if edit.paraphrase is not None:
            record["rephrase_prompt"] = edit.paraphrase
        if edit.unrelated is not None:
            record["locality_prompt"] = edit.unrelated.text
            record["locality_ground_truth"] = edit.unrelated.target_true
        records.append(record)
    return records


def easyedit_ike_text(
    ee, lm: LoadedModel, request: EditRequest, inputs: Inputs, hparams
) -> tuple[str, list[str]]:
    """EasyEdit's evaluation prompt for the edit (with the answer), and its examples."""
    records = ike_records(request, inputs, hparams.k)
    captured: dict[str, Any] = {}
    sentence_model = types.SimpleNamespace(
        encode=lambda sentences: np.zeros((len(sentences), 1))
    )
    saved_pickle = ee.ike_facts.pickle
    ee.ike_facts.pickle = types.SimpleNamespace(
        dump=lambda data, _file, **_kw: captured.update(data), HIGHEST_PROTOCOL=5
    )
    try:
        with tempfile.TemporaryDirectory() as scratch:
            hparams.results_dir = scratch
            ee.ike_facts.encode_ike_facts(sentence_model, records, hparams)
    finally:
        ee.ike_facts.pickle = saved_pickle
    examples = captured["sentences"][: hparams.k]
    recorder = RecordingTokenizer(lm.tokenizer)
    with torch.no_grad():
        ee.evaluate.compute_icl_edit_quality(
            lm.model,
            hparams.model_name,
            hparams,
            recorder,
            examples,
            easyedit_request(request),
            hparams.device,
        )
    joint = "".join(examples)
    (text,) = [t for t in recorder.texts if t.startswith(joint) and t != joint][:1]
    return text, examples


# --- comparisons ------------------------------------------------------------------


def compare_deltas(lm: LoadedModel, ours: Delta, theirs: Delta) -> dict[str, Any]:
    """Cosine and norm ratio of two deltas over every parameter either changes; for
    codebooks, also the largest difference of their radii."""
    total, per_param = agreement(lm.model, ours, theirs)
    result = _named(total)
    gaps = [
        float((ours.codebooks[p].radii - theirs.codebooks[p].radii).abs().max())
        for p in set(ours.codebooks) & set(theirs.codebooks)
        if ours.codebooks[p].radii.shape == theirs.codebooks[p].radii.shape
    ]
    if gaps:
        result["radius_diff"] = max(gaps)
    if len(per_param) > 1:
        result["per_param"] = {name: _named(a) for name, a in per_param.items()}
    return result


def _named(found: Agreement) -> dict[str, float]:
    return {
        "cosine": found.cosine,
        "norm_ratio": found.norm_ratio,
        "norm_kebench": found.norm_a,
        "norm_easyedit": found.norm_b,
    }


def neurons(delta: Delta) -> set[tuple[str, int]]:
    """(parameter, index) of every slice an index delta changes (KN's neurons)."""
    return {
        (name, int(i))
        for name, change in delta.params.items()
        if change.kind == "index"
        for i in change.tensors["index"]
    }


def logprob_after(lm: LoadedModel, delta: Delta, request: EditRequest) -> float:
    """log P(target_new | prefix + prompt) with ``delta`` applied."""
    with delta_applied(lm.model, delta):
        (score,) = score_answers(
            lm.model, lm.tokenizer, [delta.prefix + request.text], [request.target_new]
        )
    return score.logprob


def logprob_after_all(
    lm: LoadedModel, deltas: Sequence[Delta], request: EditRequest
) -> float:
    """log P(target_new | prompt) with ``deltas`` applied, in order (a stream's)."""
    with contextlib.ExitStack() as applied:
        for delta in deltas:
            applied.enter_context(delta_applied(lm.model, delta))
        (score,) = score_answers(
            lm.model, lm.tokenizer, [request.text], [request.target_new]
        )
    return score.logprob


def easyedit_logprob(
    lm: LoadedModel, deltas: Sequence[Delta], request: EditRequest
) -> float:
    """EasyEdit's post-edit log-prob of the target: the one its own model gave, where
    the last delta kept it (GRACE, whose adapter kebench's codebook hooks do not
    replay), else with ``deltas`` applied to kebench's model."""
    if "logprob" in deltas[-1].meta:
        return float(deltas[-1].meta["logprob"])
    return logprob_after_all(lm, deltas, request)


def summary(rows: Sequence[dict[str, Any]], keys: Sequence[str]) -> dict[str, float]:
    """The mean of each numeric key over the edits that have it finite (a cosine is
    NaN when one side changed nothing)."""
    means = {}
    for key in keys:
        values = [
            r[key]
            for r in rows
            if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])
        ]
        if values:
            means[key] = statistics.mean(values)
    return means


def first_difference(a: str, b: str) -> int | None:
    """The first index where two texts differ (None: equal)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@dataclass
class EditPair:
    """One edit by both implementations (``kebench`` None: kebench cannot run it)."""

    request: EditRequest
    kebench: Delta | None
    easyedit: Delta
    seconds_kebench: float
    seconds_easyedit: float


def timed(edit: Callable[[], Delta]) -> tuple[Delta, float]:
    started = time.perf_counter()
    delta = edit()
    return delta, time.perf_counter() - started


class Harness:
    """Runs one method's edits on both implementations, with identical inputs."""

    def __init__(self, ee, lm: LoadedModel, inputs: Inputs) -> None:
        self.ee = ee
        self.lm = lm
        self.inputs = inputs
        self.covariance = Covariance(lm, inputs.stats_dir)
        self.covariance.install(ee)
        self.cache: dict = {}

    def easyedit_params(self, method: str) -> tuple[Any, dict[str, Any]]:
        return easyedit_hparams(
            self.ee, method, self.inputs.kebench[method], self.lm, self.inputs.stats_dir
        )

    def kebench_edit(self, method: str, request: EditRequest) -> Delta:
        entry = get_method(method)
        hparams = entry.hparams.from_dict(self.inputs.kebench[method], method)
        context = self.inputs.context(self.cache, METHOD_SPECS[method].shared_templates)
        return entry.compute(self.lm, [request], hparams, context)

    def kebench_edits(self, method: str, requests: list[EditRequest]) -> list[Delta]:
        """``requests`` edited as single mode edits them (``measure_speed``)."""
        entry = get_method(method)
        if entry.compute_each is None:
            return [self.kebench_edit(method, request) for request in requests]
        hparams = entry.hparams.from_dict(self.inputs.kebench[method], method)
        # its value optimisation takes them value_batch at a time, as single mode does
        return entry.compute_each(
            self.lm, requests, hparams, self.inputs.context(self.cache)
        )

    def easyedit_edit(self, method: str, request: EditRequest) -> Delta:
        spec = METHOD_SPECS[method]
        hparams, _ = self.easyedit_params(method)
        with easyedit_call(self.lm, spec.padding_side):
            return spec.run(
                self.ee, self.lm, easyedit_request(request), hparams, self.inputs
            )

    def kebench_stream(self, method: str) -> list[Delta]:
        """The edits as kebench's sequential mode makes them, each on the ones before."""
        job = make_job(method, self.inputs.kebench[method], "sequential", method)
        with tempfile.TemporaryDirectory() as scratch:
            outcomes = run_job(
                self.lm,
                self.inputs.requests,
                job,
                store=DeltaStore(scratch),
                context=self.inputs.context(
                    self.cache, METHOD_SPECS[method].shared_templates
                ),
                max_relative_norm=math.inf,
            )
            return [outcome.delta for outcome in outcomes]

    def easyedit_stream(self, method: str) -> list[Delta]:
        spec = METHOD_SPECS[method]
        hparams, _ = self.easyedit_params(method)
        requests = [easyedit_request(r) for r in self.inputs.requests]
        with easyedit_call(self.lm, spec.padding_side):
            return spec.stream(self.ee, self.lm, requests, hparams, self.inputs)

    def stream_rows(self, ours: list[Delta], theirs: list[Delta]) -> list[dict]:
        """Each edit of a stream on both sides: its delta compared, and the log-prob of
        its target with every delta of its side so far applied."""
        rows = []
        for done, request in enumerate(self.inputs.requests, start=1):
            row = {"case_id": request.case_id}
            row.update(compare_deltas(self.lm, ours[done - 1], theirs[done - 1]))
            row["logprob_kebench"] = logprob_after_all(self.lm, ours[:done], request)
            row["logprob_easyedit"] = easyedit_logprob(self.lm, theirs[:done], request)
            row["logprob_diff"] = row["logprob_kebench"] - row["logprob_easyedit"]
            rows.append(row)
        return rows

    def pair(self, method: str, request: EditRequest, kebench: bool) -> EditPair:
        ours, seconds = (
            timed(lambda: self.kebench_edit(method, request))
            if kebench
            else (None, float("nan"))
        )
        theirs, their_seconds = timed(lambda: self.easyedit_edit(method, request))
        return EditPair(request, ours, theirs, seconds, their_seconds)

    def templates_of(self, method: str) -> dict[str, Any]:
        """The context templates each side made for ``method`` and whether they are
        the same, where each makes its own (WISE's); else nothing."""
        if METHOD_SPECS[method].shared_templates or unavailable(method):
            return {}
        ours = wise_templates(self.lm, self.inputs.context(self.cache, False))
        theirs = easyedit_wise_templates(self.ee)
        found = {"kebench": ours, "easyedit": theirs, "equal": ours == theirs}
        return {"context_templates": found}

    def ike_text(self, request: EditRequest) -> tuple[str, list[str]]:
        hparams, _ = self.easyedit_params("IKE")
        with easyedit_call(self.lm, METHOD_SPECS["IKE"].padding_side):
            return easyedit_ike_text(self.ee, self.lm, request, self.inputs, hparams)

    def ike_row(self, request: EditRequest, kebench: bool) -> dict[str, Any]:
        theirs_text, examples = self.ike_text(request)
        row: dict[str, Any] = {
            "case_id": request.case_id,
            "text_easyedit": theirs_text,
            "examples_easyedit": examples,
        }
        if not kebench:
            return row
        ours = self.kebench_edit("IKE", request)
        answer = answer_text(request.text, request.target_new)
        ours_text = ours.prefix + request.text + answer
        theirs_prompt = theirs_text.removesuffix(answer)
        theirs = Delta(prefix=theirs_prompt.removesuffix(request.text))
        row.update(
            same_text=ours_text == theirs_text,
            first_difference_at=first_difference(ours_text, theirs_text),
            text_kebench=ours_text,
            logprob_kebench=logprob_after(self.lm, ours, request),
            logprob_easyedit=logprob_after(self.lm, theirs, request),
        )
        return row

    def edit_row(self, pair: EditPair) -> dict[str, Any]:
        lm, request = self.lm, pair.request
        row = {"case_id": request.case_id}
        row.update(compare_deltas(lm, pair.kebench, pair.easyedit))
        if any(c.kind == "index" for c in pair.easyedit.params.values()):
            ours, theirs = neurons(pair.kebench), neurons(pair.easyedit)
            row.update(
                neurons_kebench=len(ours),
                neurons_easyedit=len(theirs),
                neurons_shared=len(ours & theirs),
            )
        row.update(
            logprob_kebench=logprob_after(lm, pair.kebench, request),
            logprob_easyedit=easyedit_logprob(lm, [pair.easyedit], request),
            seconds_kebench=pair.seconds_kebench,
            seconds_easyedit=pair.seconds_easyedit,
        )
        row["logprob_diff"] = row["logprob_kebench"] - row["logprob_easyedit"]
        return row


ROW_KEYS = (
    "cosine",
    "norm_ratio",
    "logprob_kebench",
    "logprob_easyedit",
    "logprob_diff",
    "seconds_kebench",
    "seconds_easyedit",
)


def unavailable(method: str) -> str | None:
    """Why kebench cannot run ``method`` here, or None."""
    try:
        get_method(method)
    except KeyError:
        return f"kebench has no method {method!r} registered (yet)"
    return None


def compare_method(harness: Harness, method: str, store: Store | None) -> dict:
    """Every edit of ``method`` on both sides: the rows, their mean, the hparams; with
    ``store``, EasyEdit's outputs are written as reference data (even when kebench
    cannot run the method yet)."""
    _, ee_values = harness.easyedit_params(method)
    result: dict[str, Any] = {
        "hparams_kebench": harness.inputs.kebench[method],
        "hparams_easyedit": _json_ready(ee_values, None),
    }
    why = unavailable(method)
    if why and store is None:
        return {**result, "skipped": f"{why}: skipped"}
    rows, pairs = [], []
    for request in harness.inputs.requests:
        logger.info("%s: %s", method, request.case_id)
        if method == "IKE":
            rows.append(harness.ike_row(request, kebench=not why))
        else:
            pairs.append(harness.pair(method, request, kebench=not why))
            if not why:
                rows.append(harness.edit_row(pairs[-1]))
    stream: list[Delta] = []
    if METHOD_SPECS[method].stream is not None and not harness.inputs.probes:
        logger.info("%s: the edits as one sequential stream", method)
        stream = harness.easyedit_stream(method)
        if not why:
            result["sequential"] = harness.stream_rows(
                harness.kebench_stream(method), stream
            )
    # after EasyEdit's edits: it makes its templates on its first
    result.update(harness.templates_of(method))
    if store is not None:
        store.method(harness, method, pairs, rows, ee_values, stream)
    if why:
        return {**result, "skipped": f"{why}: EasyEdit's reference outputs stored"}
    result["per_edit"] = rows
    if harness.inputs.probes and method != "IKE":
        result["quality"] = quality_of(harness, pairs)
    if method == "IKE":
        result["mean"] = {
            "same_text": statistics.mean(float(r["same_text"]) for r in rows),
            **summary(rows, ("logprob_kebench", "logprob_easyedit")),
        }
    else:
        result["mean"] = summary(rows, ROW_KEYS)
    return result


def quality_of(harness: Harness, pairs: list[EditPair]) -> dict[str, Any]:
    """EditSucc and locality (``kebench.editing.quality``, in %) of each side's deltas
    on the same edits and locality probes, and kebench − EasyEdit in points."""
    requests = [pair.request for pair in pairs]
    found: dict[str, Any] = {}
    for side in ("kebench", "easyedit"):
        deltas = [getattr(pair, side) for pair in pairs]
        quality = measure_edits(harness.lm, requests, deltas, harness.inputs.probes)
        found[side] = {
            "edit_succ": 100 * statistics.mean(q.edit_succ for q in quality),
            "locality": 100 * statistics.mean(q.locality for q in quality),
        }
    found["difference_points"] = {
        key: found["kebench"][key] - found["easyedit"][key]
        for key in ("edit_succ", "locality")
    }
    return found


def measure_speed(harness: Harness, method: str, rounds: int) -> dict[str, Any]:
    """kebench and EasyEdit alternately, ``rounds`` edits each, twice, after one
    untimed edit each (one-time costs: covariance, caches). Each side edits as a run
    of it does: EasyEdit one edit at a time; kebench as single mode does, in groups of
    ``EditContext.value_batch`` computed together (``compute_each``: ROME, R-ROME)
    where the method has it, else one at a time."""
    requests = harness.inputs.requests
    block = [requests[i % len(requests)] for i in range(rounds)]
    harness.kebench_edit(method, requests[0])
    harness.easyedit_edit(method, requests[0])
    ours, theirs = [], []
    for _ in range(2):
        started = time.perf_counter()
        harness.kebench_edits(method, block)
        ours.append((time.perf_counter() - started) / rounds)
        theirs.extend(
            timed(lambda r=request: harness.easyedit_edit(method, r))[1]
            for request in block
        )
    return {
        "rounds": rounds,
        "kebench_s_per_edit": statistics.mean(ours),
        "easyedit_s_per_edit": statistics.mean(theirs),
        "ratio": statistics.mean(theirs) / statistics.mean(ours),
        "kebench_s_per_edit_by_block": ours,
        "easyedit_s": theirs,
        "kebench_grouped": get_method(method).compute_each is not None,
    }


# --- the reference outputs for CI -----------------------------------------------------


def request_record(request: EditRequest) -> dict[str, Any]:
    return dataclasses.asdict(request)


def _json_ready(values: dict[str, Any], folder: Path | None) -> dict[str, Any]:
    """Hparams as JSON: the corpus by its file name when it is in ``folder``, no
    model objects."""
    ready = {}
    for key, value in values.items():
        if isinstance(value, (str, int, float, bool, list, dict)) or value is None:
            ready[key] = value
    corpus = Path(str(ready.get("mom2_dataset", "")))
    if folder is not None and corpus.parent == folder:
        ready["mom2_dataset"] = corpus.name
    return ready


def _write_json(path: Path, record: object) -> None:
    with atomic_path(path) as tmp:
        text = json.dumps(record, indent=1, ensure_ascii=False) + "\n"
        tmp.write_text(text, encoding="utf-8")


def _write_tensors(path: Path, tensors: dict[str, torch.Tensor]) -> None:
    with atomic_path(path) as tmp:
        save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items()}, tmp)


class Store:
    """Writes EasyEdit's outputs as the CI reference data (module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.sketches: dict[int, torch.Tensor] = {}

    def sketch(self, size: int) -> torch.Tensor:
        """The stored Gaussian matrix (size, SKETCH_COLUMNS) of a dimension ``size``."""
        if size not in self.sketches:
            generator = torch.Generator().manual_seed(SEED + size)
            self.sketches[size] = torch.randn(size, SKETCH_COLUMNS, generator=generator)
        return self.sketches[size]

    def delta_tensors(
        self, lm: LoadedModel, index: int, delta: Delta
    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The delta's layout and norms, and its tensors: exact factors or slices, or
        for a dense change its two sketches."""
        layout, tensors, total = {}, {}, 0.0
        for name, change in sorted(delta.params.items()):
            full = change.full(lm.model.get_parameter(name)).double()
            total += float(full.pow(2).sum())
            layout[name] = {
                "kind": change.kind,
                "dim": change.dim,
                "norm": float(full.norm()),
            }
            if change.kind == "dense":
                left = self.sketch(full.shape[0]).double()
                right = self.sketch(full.shape[1]).double()
                tensors[f"{index}/{name}/right_sketch"] = (full @ right).float()
                tensors[f"{index}/{name}/left_sketch"] = (left.T @ full).float()
            else:
                for key, tensor in change.tensors.items():
                    tensors[f"{index}/{name}/{key}"] = tensor
        memories = {}
        for path, memory in sorted(delta.side_memories.items()):
            weight = lm.model.get_submodule(path).weight.detach().double().cpu()
            memories[path] = {
                "ids": memory.ids.tolist(),
                "roles": memory.roles.tolist(),
                "thresholds": memory.thresholds.tolist(),
                "norms": [],
            }
            for row, shard in enumerate(memory.weights):
                change = shard.double() - weight
                total += float(change.pow(2).sum())
                memories[path]["norms"].append(float(change.norm()))
                name = f"{index}/{SIDE_MEMORY}{path}/{row}"
                left = self.sketch(change.shape[0]).double()
                right = self.sketch(change.shape[1]).double()
                tensors[f"{name}/right_sketch"] = (change @ right).float()
                tensors[f"{name}/left_sketch"] = (left.T @ change).float()
        books = {}
        for path, book in sorted(delta.codebooks.items()):
            books[path] = {"entries": len(book)}
            total += float(book.keys.double().pow(2).sum())
            total += float(book.values.double().pow(2).sum())
            for key, tensor in book.tensors().items():
                tensors[f"{index}/{CODEBOOK}{path}/{key}"] = tensor
        found = {"params": layout, "norm": math.sqrt(total)}
        if books:
            found["codebooks"] = books
        if memories:
            found["side_memories"] = memories
        return found, tensors

    def method(  # noqa: PLR0913, PLR0917 - one method's outputs
        self, harness: Harness, method: str, pairs, rows, ee_values, stream
    ) -> None:
        """``<method>.json`` and ``<method>.safetensors`` (module docstring); a
        sequential stream's deltas as ``sequential`` edits, tensors ``seq<i>/...``."""
        spec = METHOD_SPECS[method]
        record: dict[str, Any] = {
            "method": method,
            "easyedit_alg_name": spec.alg_name,
            "padding_side": spec.padding_side,
            "hparams_kebench": _json_ready(harness.inputs.kebench[method], self.folder),
            "hparams_easyedit": _json_ready(ee_values, self.folder),
            "edits": [],
        }
        if not spec.shared_templates:
            record["context_templates"] = easyedit_wise_templates(harness.ee)
        tensors: dict[str, torch.Tensor] = {}
        if method == "IKE":
            record["edits"] = [
                {
                    "case_id": row["case_id"],
                    "text": row["text_easyedit"],
                    "examples": row["examples_easyedit"],
                }
                for row in rows
            ]
        for i, pair in enumerate(pairs):
            layout, found = self.delta_tensors(harness.lm, i, pair.easyedit)
            logprob = easyedit_logprob(harness.lm, [pair.easyedit], pair.request)
            record["edits"].append(
                {"case_id": pair.request.case_id, "logprob_new": logprob, **layout}
            )
            tensors.update(found)
        if stream:
            record["sequential"] = []
        for i, (request, delta) in enumerate(
            zip(harness.inputs.requests[: len(stream)], stream, strict=True)
        ):
            layout, found = self.delta_tensors(harness.lm, f"seq{i}", delta)
            logprob = easyedit_logprob(harness.lm, stream[: i + 1], request)
            record["sequential"].append(
                {"case_id": request.case_id, "logprob_new": logprob, **layout}
            )
            tensors.update(found)
        _write_json(self.folder / f"{method.lower()}.json", record)
        if tensors:
            _write_tensors(self.folder / f"{method.lower()}.safetensors", tensors)

    def reference(self, harness: Harness) -> None:
        """``reference.json``: the edits, IKE's pool, the EasyEdit commit, and the
        fingerprint of every covariance EasyEdit was given (``covariance.safetensors``:
        C·g, g the first column of the dimension's sketch); ``sketch.safetensors``."""
        inputs = harness.inputs
        given = dict(harness.covariance.given)
        earlier = self.folder / REFERENCE
        if earlier.is_file():
            # the layers of methods stored by an earlier run of other --methods
            traces = json.loads(earlier.read_text(encoding="utf-8"))["covariance_trace"]
            for path in set(traces) - set(given):
                given[path] = harness.covariance.matrix(
                    path, str(inputs.corpus), CORPUS_TEXTS, "float32"
                )
        fingerprints = {}
        for path, moment in sorted(given.items()):
            probe = self.sketch(moment.shape[0])[:, 0].double()
            fingerprints[f"{path}/c_probe"] = (moment.double() @ probe).float()
        if fingerprints:
            _write_tensors(self.folder / COVARIANCE, fingerprints)
        _write_json(
            self.folder / REFERENCE,
            {
                "model": harness.lm.name,
                "easyedit_commit": harness.ee.commit,
                "templates": TEMPLATES,
                "corpus": CORPUS,
                "corpus_texts": CORPUS_TEXTS,
                "covariance_trace": {
                    path: float(moment.double().trace())
                    for path, moment in sorted(given.items())
                },
                "requests": [request_record(r) for r in inputs.requests],
                "pool": [request_record(r) for r in inputs.pool],
                "paraphrases": inputs.paraphrases,
            },
        )
        earlier_sketches = self.folder / SKETCH
        if earlier_sketches.is_file():
            # the dimensions of methods stored by an earlier run (seeded: the same G)
            for key in load_file(earlier_sketches):
                self.sketch(int(key.removeprefix("g")))
        if self.sketches:
            _write_tensors(
                self.folder / SKETCH,
                {f"g{n}": g for n, g in sorted(self.sketches.items())},
            )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Load the model, build the identical inputs, compare every method."""
    config = load_config({"dataset": args.dataset, "model": args.model})
    methods = args.methods.split("+")
    unknown = [m for m in methods if m not in METHOD_SPECS]
    if unknown:
        raise SystemExit(f"--methods: unknown {unknown}; known: {sorted(METHOD_SPECS)}")
    if args.quality and args.store:
        raise SystemExit("--quality runs other settings than the stored reference's")
    ee = import_easyedit(Path(args.easyedit).resolve())
    lm = project_model(args.model, config)
    cases = edit_cases(args.dataset, config)
    requests = requests_from_frame(cases)
    # the pipeline's paraphrases: those of the paraphrase probes (their questions)
    paraphrases = case_paraphrases(edit_probes(cases, "{question}", {}))
    store = Store(Path(args.store).resolve()) if args.store else None
    with tempfile.TemporaryDirectory() as scratch:
        folder = (
            store.folder
            if store
            else (DATA if (DATA / TEMPLATES).is_file() else Path(scratch))
        )
        folder.mkdir(parents=True, exist_ok=True)
        templates = make_templates(lm, folder)
        corpus = make_corpus(lm, folder)
        inputs = Inputs(
            folder=folder,
            requests=requests[: args.edits],
            pool=requests[:POOL_SIZE],
            paraphrases={
                r.case_id: paraphrases[r.case_id]
                for r in requests[:POOL_SIZE]
                if r.case_id in paraphrases
            },
            templates=templates,
            kebench=kebench_hparams(
                lm,
                config,
                args.model,
                methods,
                corpus,
                {"UltraEdit": ONE_REQUEST} if args.quality else STEP_OVERRIDES,
            ),
            stats_dir=Path(scratch) / "stats",
            probes=requests[args.edits : args.edits + N_PROBES] if args.quality else [],
        )
        harness = Harness(ee, lm, inputs)
        result: dict[str, Any] = {
            "model": lm.name,
            "easyedit": {"dir": ee.root, "commit": ee.commit},
            "edits": [r.case_id for r in inputs.requests],
            "templates": templates,
            "corpus": str(corpus),
            "methods": {},
        }
        for method in methods:
            logger.info("Comparing %s", method)
            try:
                result["methods"][method] = compare_method(harness, method, store)
            except Exception as err:  # noqa: BLE001 - reported; the other methods run
                logger.exception("%s failed", method)
                result["methods"][method] = {"error": f"{type(err).__name__}: {err}"}
        if store is not None:
            store.reference(harness)
        if args.speed:
            result["speed"] = {
                method: measure_speed(harness, method, args.speed)
                for method in SPEED_METHODS
                if method in methods and not unavailable(method)
            }
    if args.out:
        with atomic_path(Path(args.out)) as tmp:
            tmp.write_text(
                json.dumps(result, indent=1, ensure_ascii=False) + "\n", "utf-8"
            )
    return result


def main() -> None:
    parser = model_parser(__doc__)
    parser.add_argument("--easyedit", required=True, help="an EasyEdit checkout")
    parser.add_argument("--methods", default=METHODS)
    parser.add_argument("--edits", type=int, default=3)
    parser.add_argument("--speed", type=int, default=0)
    parser.add_argument(
        "--quality",
        action="store_true",
        help="the methods' own step counts, and each side's EditSucc and locality",
    )
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument(
        "--store",
        nargs="?",
        const=str(DATA),
        help=f"write EasyEdit's outputs as CI reference data (default {DATA})",
    )
    print_result(run, parser.parse_args())


if __name__ == "__main__":
    main()
