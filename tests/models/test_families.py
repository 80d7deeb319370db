"""Every supported family, on a tiny random checkpoint of its real transformers class.

For each family: the folder loads as ``--params model=<folder>``; the hparams derived
from its architecture name real modules; every weight method edits, changes the output
and reverts bit-exactly; the batched scorer, left- and right-padded, equals a plain
forward pass over the joint text, whose answer tokens are found by character offsets;
the value optimisation of ROME and MEMIT equals the reference's loss computed plainly.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
import torch

from kebench.editing.datasets import EditHparamsDataset
from kebench.editing.delta import apply_delta, revert_delta
from kebench.editing.forward import get_module
from kebench.editing.hparams import Architecture, HparamsFiles, resolve_hparams
from kebench.editing.interface import EditContext
from kebench.editing.registry import get_method
from kebench.editing.rewrite import ValueSettings, optimise_values
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import (
    Batching,
    answer_text,
    encode_pair,
    forward_packed,
    packing_fits,
    padding_id,
    score_answers,
)
from kebench.models.registry import model_key
from kebench.project import PROJECT_ROOT, load_config
from tests.editing.cases import demo_requests
from tests.models.tiny import FAMILIES, build_checkpoint, load_checkpoint

WEIGHT_METHODS = ("ROME", "MEMIT", "AlphaEdit", "FT-L", "FT-M", "KN")
# and the methods that name no rewritten module (LoRA: target_modules)
EDITING_METHODS = (*WEIGHT_METHODS, "LoRA")
# Short runs: these tests check mechanics, not edit quality.
SHORT = {
    "ROME": {
        "v_num_grad_steps": 3,
        "context_template_length_params": [[3, 2]],
        "mom2_n_samples": 8,
    },
    "MEMIT": {
        "v_num_grad_steps": 3,
        "context_template_length_params": [[3, 2]],
        "mom2_n_samples": 8,
    },
    "FT-L": {"num_steps": 3},
    "FT-M": {"num_steps": 3},
    "KN": {"steps": 4, "batch_size": 4},
    "LoRA": {"num_steps": 3},
    "GRACE": {"n_iter": 3},
    "WISE": {"n_iter": 3},
    "UltraEdit": {"batch_size_once": 1},
}
SHORT["AlphaEdit"] = SHORT["MEMIT"]
WISE_FAMILIES = ("llama", "gpt2", "gemma2", "opt")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory, lm) -> dict[str, Path]:
    """Every family's tiny checkpoint folder (SmolLM2's tokenizer for the BPE ones)."""
    root = tmp_path_factory.mktemp("families")
    return {
        model_type: build_checkpoint(model_type, root / model_type, lm.tokenizer)
        for model_type in FAMILIES
    }


_loaded: dict[str, LoadedModel] = {}


def tiny(checkpoints: dict[str, Path], model_type: str) -> LoadedModel:
    if model_type not in _loaded:
        _loaded[model_type] = load_checkpoint(checkpoints[model_type])
    return _loaded[model_type]


@cache
def project_hparams() -> tuple[HparamsFiles, dict]:
    """Every hparams file of the project, and the model families, read once."""
    files = EditHparamsDataset(
        str(PROJECT_ROOT / "conf" / "base" / "hparams"), ""
    ).load()
    return files, load_config({})["parameters"]["model_families"]


def derived(lm: LoadedModel, method: str) -> dict:
    """``method``'s hparams for the folder model: all derived (it has no file)."""
    every, families = project_hparams()
    files = HparamsFiles(model=lm.name, files=every.files)
    resolved = resolve_hparams(
        method, files, Architecture.of(lm.model.config), families
    )
    assert resolved.reference is not None
    assert {"layers", "inner_params"} & set(resolved.derived)
    return resolved.values


@pytest.mark.model
@pytest.mark.parametrize("model_type", FAMILIES)
def test_a_checkpoint_folder_loads_under_its_model_key(checkpoints, model_type):
    lm = tiny(checkpoints, model_type)
    assert lm.model.config.model_type == model_type
    assert lm.name == model_key(str(checkpoints[model_type]))
    assert lm.tokenizer.pad_token_id is not None


@pytest.mark.model
@pytest.mark.parametrize("model_type", FAMILIES)
def test_derived_hparams_name_the_families_real_modules(checkpoints, model_type):
    lm = tiny(checkpoints, model_type)
    n_layers = Architecture.of(lm.model.config).n_layers
    for method in WEIGHT_METHODS:
        values = derived(lm, method)
        layers = values["layers"] or range(n_layers)  # KN: [] is every layer
        assert all(0 <= layer < n_layers for layer in layers), (method, layers)
        for layer in layers:
            rewritten = values["rewrite_module_tmp"].format(layer)
            if rewritten.endswith(".weight"):  # FT names the parameter
                assert lm.model.get_parameter(rewritten).ndim == 2
            else:
                assert get_module(lm.model, rewritten).weight.ndim == 2
            get_module(lm.model, values["layer_module_tmp"].format(layer))


@pytest.mark.model
@pytest.mark.parametrize("method", EDITING_METHODS)
@pytest.mark.parametrize("model_type", FAMILIES)
def test_every_weight_method_edits_and_reverts_bit_exactly(
    checkpoints, tmp_path_factory, model_type, method
):
    lm = tiny(checkpoints, model_type)
    entry = get_method(method)
    hparams = entry.hparams.from_dict({**derived(lm, method), **SHORT[method]})
    request = demo_requests()[0]
    context = EditContext(
        stats_dir=tmp_path_factory.getbasetemp() / "family_stats", pool=demo_requests()
    )
    base = {name: t.clone() for name, t in lm.model.state_dict().items()}
    prompt = lm.tokenizer(request.text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        before = lm.model(input_ids=prompt).logits[0, -1]
    delta = entry.compute(lm, [request], hparams, context)
    assert delta.params and delta.is_finite()

    applied = apply_delta(lm.model, delta)
    changed = {
        name
        for name, t in lm.model.state_dict().items()
        if not torch.equal(t, base[name])
    }
    with torch.no_grad():
        after = lm.model(input_ids=prompt).logits[0, -1]
    revert_delta(lm.model, applied)

    assert changed and changed <= set(delta.params)
    assert not torch.equal(after, before)  # the edit changes the model's answer
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name


@pytest.mark.model
@pytest.mark.parametrize(
    ("method", "model_type"),
    [("GRACE", family) for family in FAMILIES]
    # WISE's family-specific parts: where the activation is named (GPT-2's
    # activation_function, Gemma 2's hidden_activation) and Conv1D weights (GPT-2)
    + [("WISE", family) for family in WISE_FAMILIES],
)
def test_hooked_methods_answer_through_their_hooks_and_come_off_exactly(
    checkpoints, tmp_path_factory, model_type, method
):
    """GRACE and WISE on the family's derived module: the prompt's next-token logits
    move while the codebook or side memory is applied, no weight does, and they come
    back bit for bit."""
    lm = tiny(checkpoints, model_type)
    entry = get_method(method)
    hparams = entry.hparams.from_dict({**derived(lm, method), **SHORT[method]})
    request = demo_requests()[0]
    context = EditContext(
        stats_dir=tmp_path_factory.getbasetemp() / "family_stats",
        pool=demo_requests()[:20],
    )
    base = {name: t.clone() for name, t in lm.model.state_dict().items()}
    prompt = lm.tokenizer(request.text, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        before = lm.model(input_ids=prompt).logits[0, -1]
    delta = entry.compute(lm, [request], hparams, context)
    assert not delta.params and (delta.codebooks or delta.side_memories)
    assert delta.is_finite()
    applied = apply_delta(lm.model, delta)
    with torch.no_grad():
        after = lm.model(input_ids=prompt).logits[0, -1]
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name
    revert_delta(lm.model, applied)
    with torch.no_grad():
        again = lm.model(input_ids=prompt).logits[0, -1]
    assert not torch.equal(after, before) and torch.equal(again, before)


@pytest.mark.model
@pytest.mark.parametrize("model_type", FAMILIES)
def test_ultraedit_edits_its_derived_modules_or_names_the_missing_one(
    checkpoints, tmp_path_factory, model_type
):
    """UltraEdit's modules keep their reference's names at the family's depth: where
    the family has them, the edit changes exactly them and reverts bit for bit;
    where it names them otherwise (GPT-NeoX, OPT, Phi-3's fused gate_up_proj), the
    error names the module, and the family needs its own file."""
    lm = tiny(checkpoints, model_type)
    entry = get_method("UltraEdit")
    hparams = entry.hparams.from_dict(
        {**derived(lm, "UltraEdit"), **SHORT["UltraEdit"]}
    )
    request = demo_requests()[0]
    context = EditContext(stats_dir=tmp_path_factory.getbasetemp() / "family_stats")
    present = dict(lm.model.named_modules())
    missing = [name for name in hparams.modules if name not in present]
    if missing:
        with pytest.raises(ValueError, match=re.escape(repr(missing[0]))):
            entry.compute(lm, [request], hparams, context)
        return
    base = {name: t.clone() for name, t in lm.model.state_dict().items()}
    delta = entry.compute(lm, [request], hparams, context)
    assert set(delta.params) == {f"{name}.weight" for name in hparams.modules}
    applied = apply_delta(lm.model, delta)
    changed = {
        n for n, t in lm.model.state_dict().items() if not torch.equal(t, base[n])
    }
    revert_delta(lm.model, applied)
    assert changed and changed <= set(delta.params)
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name


def joint_text_logprob(lm: LoadedModel, prompt: str, answer: str) -> float:
    """log P(answer | prompt) from one unpadded pass over the joint text. The answer's
    tokens are those whose characters start at or after the prompt's end (offsets)."""
    joint = prompt + answer_text(prompt, answer)
    encoded = lm.tokenizer(joint, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    first = next(
        i for i, (start, end) in enumerate(offsets) if end > start >= len(prompt)
    )
    with torch.no_grad():
        logits = lm.model(input_ids=torch.tensor([ids])).logits[0].double()
    logprobs = torch.log_softmax(logits, dim=-1)
    return float(sum(logprobs[i - 1, ids[i]] for i in range(first, len(ids))))


@pytest.mark.model
@pytest.mark.parametrize("side", ["left", "right"])
@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_batched_scorer_equals_the_joint_text(checkpoints, model_type, side):
    lm = tiny(checkpoints, model_type)
    requests = demo_requests()[:4]
    prompts = [r.text for r in requests for _ in range(2)]
    answers = [a for r in requests for a in (r.target_true, r.target_new)]
    scores = score_answers(
        lm.model, lm.tokenizer, prompts, answers, batch_size=3, padding_side=side
    )
    for score, prompt, answer in zip(scores, prompts, answers, strict=True):
        expected = joint_text_logprob(lm, prompt, answer)
        assert score.logprob == pytest.approx(expected, abs=1e-4), (prompt, answer)


# families whose masks ignore packed position ids (OPT's learned positions come from
# its attention mask): worked out from their modelling code, not from kebench
UNPACKED = {"opt"}


@pytest.mark.model
@pytest.mark.parametrize("model_type", FAMILIES)
def test_packed_sequences_score_as_alone_or_packing_is_refused(checkpoints, model_type):
    lm = tiny(checkpoints, model_type)
    requests = demo_requests()[:3]
    whole = [list(lm.tokenizer(r.text)["input_ids"]) for r in requests]
    sequences = [*whole, whole[0][:3], whole[1][:2]]
    positions = [range(len(s)) for s in sequences]
    with torch.no_grad():
        alone = [lm.model(input_ids=torch.tensor([s])).logits[0] for s in sequences]
    if model_type in UNPACKED:
        assert not packing_fits(lm.model)
        # rightly: the second of two packed sequences does not score as alone
        with torch.no_grad():
            packed = lm.model(
                input_ids=torch.tensor([whole[0] + whole[1]]),
                position_ids=torch.tensor(
                    [[*range(len(whole[0])), *range(len(whole[1]))]]
                ),
                use_cache=False,
            ).logits[0, len(whole[0]) :]
        assert not torch.allclose(packed, alone[1], atol=1e-3)
        return
    assert packing_fits(lm.model)
    width = max(map(len, sequences))
    got = dict(
        forward_packed(
            lm.model,
            sequences,
            positions,
            padding_id(lm.tokenizer),
            Batching(2, 2 * width),
        )
    )
    for i, expected in enumerate(alone):
        assert torch.allclose(got[i], expected, atol=1e-4), i


def reference_value(  # noqa: PLR0913 - the edit and the optimisation's settings
    lm: LoadedModel,
    request,
    templates: list[str],
    *,
    layer_path: str,
    init_norm: float,
    settings: ValueSettings,
) -> tuple[torch.Tensor, int]:
    """δ of the reference's value optimisation, written plainly, and the updates it
    made: one unpadded full forward per text, δ added by a hook at the subject's last
    token (found by character offsets), full logits, the loss as kmeng01/rome writes
    it; kebench's ``stop_loss`` on the NLL when set."""
    tokenizer, model = lm.tokenizer, lm.model
    d = model.get_output_embeddings().in_features

    def subject_end(text: str, start: int) -> tuple[list[int], int]:
        end = start + len(request.subject)
        encoded = tokenizer(text, return_offsets_mapping=True)
        hits = [
            i
            for i, (s, e) in enumerate(encoded["offset_mapping"])
            if s < end and e > start
        ]
        return encoded["input_ids"], hits[-1]

    rewriting = []
    for template in templates:
        prompt = template.replace("{}", request.text)
        start = template.index("{}") + request.text.index(request.subject)
        prompt_ids, target_ids = encode_pair(tokenizer, prompt, request.target_new)
        _, col = subject_end(prompt, start)
        rewriting.append(
            (prompt_ids + target_ids[:-1], col, len(prompt_ids), target_ids)
        )
    kl_ids, kl_col = subject_end(f"{request.subject} is a", 0)

    delta = torch.zeros(d, requires_grad=True)
    where: dict[str, int] = {}

    def add(_module, _args, output):
        hidden = output[0] if isinstance(output, tuple) else output
        hidden = hidden.clone()
        hidden[0, where["col"]] += delta
        return (hidden, *output[1:]) if isinstance(output, tuple) else hidden

    handle = get_module(model, layer_path).register_forward_hook(add)
    optimiser = torch.optim.Adam([delta], lr=settings.lr)
    kl_start = None
    try:
        for step in range(settings.steps):
            nll = 0.0
            for ids, col, n_prompt, target_ids in rewriting:
                where["col"] = col
                logp = torch.log_softmax(
                    model(input_ids=torch.tensor([ids])).logits[0], -1
                )
                nll = nll - sum(
                    logp[n_prompt - 1 + j, t] for j, t in enumerate(target_ids)
                ) / len(target_ids)
            nll = nll / len(rewriting)
            where["col"] = kl_col
            kl_now = torch.log_softmax(
                model(input_ids=torch.tensor([kl_ids])).logits[0, kl_col], -1
            )
            if kl_start is None:
                kl_start = kl_now.detach()
            kl = (kl_now.exp() * (kl_now - kl_start)).sum()
            loss = (
                nll
                + settings.kl_factor * kl
                + settings.weight_decay * delta.norm() / init_norm**2
            )
            stopped = settings.stop_loss is not None and nll < settings.stop_loss
            if loss < 5e-2 or stopped or step == settings.steps - 1:
                break
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            with torch.no_grad():
                bound = settings.clamp_norm_factor * init_norm
                if delta.norm() > bound:
                    delta.mul_(bound / delta.norm())
    finally:
        handle.remove()
    return delta.detach(), step


@pytest.mark.model
@pytest.mark.parametrize("model_type", FAMILIES)
def test_the_value_optimisation_is_the_reference_loss_computed_plainly(
    checkpoints, model_type
):
    """optimise_values (prefix and lower layers cached, logits at the targets only,
    several edits in one batch) against the plain reference above, one edit at a time,
    on every family's architecture. The stop on the NLL is set between the two edits'
    NLLs after the first update, so that one edit stops before the other."""
    lm = tiny(checkpoints, model_type)
    values = derived(lm, "ROME")
    layer = values["layers"][0]
    requests = demo_requests()[:2]
    templates = ["{}", "The weather today is mild. {}", "I think that. {}"]
    settings = ValueSettings(
        steps=4,
        lr=0.5,
        weight_decay=0.5,
        kl_factor=0.0625,
        clamp_norm_factor=4.0,
        stop_loss=None,
    )
    init_norms = [3.0, 2.0]

    def reference(index: int, settings: ValueSettings) -> tuple[torch.Tensor, int]:
        return reference_value(
            lm,
            requests[index],
            templates,
            layer_path=values["layer_module_tmp"].format(layer),
            init_norm=init_norms[index],
            settings=settings,
        )

    def found(settings: ValueSettings) -> list:
        return optimise_values(
            lm,
            requests,
            templates,
            layer_tmp=values["layer_module_tmp"],
            layer=layer,
            init_norms=init_norms,
            settings=settings,
            per_batch=2,
        )

    # after one update, each edit's NLL: a stop between them stops the lower one
    one_step = found(replace(settings, steps=3))
    low, high = sorted(result.nll for result in one_step)
    assert low < high
    stopping = replace(settings, stop_loss=(low + high) / 2)
    for settings_now in (settings, stopping):
        results = found(settings_now)
        for index, result in enumerate(results):
            expected, steps = reference(index, settings_now)
            assert result.steps == steps
            assert steps == 0 or float(expected.abs().max()) > 0.1
            # float32 sums in another order (templates and edits batched, the prefix
            # cached) differ by ~1e-7; Adam's step, g / sqrt(v), enlarges that in
            # elements whose gradient is near zero, by as much as 4e-5 on some CPUs'
            # kernels (qwen2 here, of elements of order 0.1 to 1): the tolerance is
            # that, not the ~1e-1 a wrong loss term moves the value by
            torch.testing.assert_close(result.delta, expected, rtol=1e-3, atol=1e-4)
    taken = [result.steps for result in found(stopping)]
    assert min(taken) < max(taken)  # one stopped, the other went on
