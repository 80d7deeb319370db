"""KN computes what EasyEdit's knowledge_neurons port computes, on the real SmolLM2.

Oracles: a plain integrated-gradients loop written here (one α at a time, the whole
model, a hook on the MLP's first projection, as EasyEdit patches it), the edit's
embedding arithmetic done by hand, and the neurons EasyEdit found (stored output of
zjunlp/EasyEdit 14cea82 on SmolLM2-135M, ``KnowledgeNeurons`` with model_type llama,
the faithful llama3-8b values: steps 1, batch_size 1, adaptive_threshold 0.2).
"""

from __future__ import annotations

import pytest
import torch

from kebench.editing.interface import EditContext, HparamsError
from kebench.editing.methods.kn import KNHyperParams, answer_ids, kn, layer_scores
from kebench.models.loading import LoadedModel
from tests.editing.cases import demo_requests, project_hparams, tiny_gpt2

# EasyEdit's knowledge neurons (layer, neuron) for the first three demo edits.
EASYEDIT_NEURONS = {
    "demo-1": [(10, 198), (10, 222), (10, 590), (10, 1254)],
    "demo-2": [(10, 198), (10, 222), (10, 590), (10, 1254)],
    "demo-3": [
        (27, 903),
        *((28, n) for n in (11, 87, 106, 147, 243, 285, 316, 364, 473, 511, 524)),
        *((28, n) for n in (539, 592, 956, 1067, 1210, 1315, 1330, 1445, 1486)),
    ],
}


@pytest.fixture(scope="module")
def faithful() -> KNHyperParams:
    return KNHyperParams.from_dict(project_hparams("faithful")["KN"])


@pytest.fixture(scope="module")
def context(stats_dir) -> EditContext:
    return EditContext(stats_dir=stats_dir)


def greedy(lm: LoadedModel, prompt: str, n: int) -> tuple[list[list[int]], list[int]]:
    """Greedy decoding by text: each chosen token's text is appended and re-tokenised."""
    contexts, chosen, text = [], [], prompt
    for _ in range(n):
        ids = lm.tokenizer(text)["input_ids"]
        with torch.no_grad():
            logits = lm.model(input_ids=torch.tensor([ids])).logits[0, -1]
        contexts.append(ids)
        chosen.append(int(logits.argmax()))
        text += lm.tokenizer.decode([chosen[-1]])
    return contexts, chosen


def reference_score(
    lm: LoadedModel, first_projection: str, ids: list[int], token: int, steps: int
) -> torch.Tensor:
    """x · Σ_α ∂P(token)/∂(αx) / steps, α over linspace(0, 1, steps), x the output of
    the MLP's first projection at the last token: one α per full forward pass."""
    module = lm.model.get_submodule(first_projection)
    baseline = {}

    def record(_m, _i, output):
        baseline["x"] = output[0, -1].detach().clone()

    handle = module.register_forward_hook(record)
    with torch.no_grad():
        lm.model(input_ids=torch.tensor([ids]))
    handle.remove()
    x = baseline["x"]
    total = torch.zeros_like(x)
    for alpha in torch.linspace(0, 1, steps):
        scaled = (alpha * x).requires_grad_(True)

        def replace(_m, _i, output, scaled=scaled):
            output = output.clone()
            output[0, -1] = scaled
            return output

        handle = module.register_forward_hook(replace)
        with torch.enable_grad():
            logits = lm.model(input_ids=torch.tensor([ids])).logits[0, -1]
            prob = torch.softmax(logits.float(), dim=-1)[token]
            (grad,) = torch.autograd.grad(prob, scaled)
        handle.remove()
        total += grad
    return x * total / steps


@pytest.mark.model
@pytest.mark.parametrize(("steps", "batch_size"), [(1, 1), (4, 2)])
def test_scores_are_integrated_gradients_at_the_first_projection(
    lm, faithful, steps, batch_size
):
    request = demo_requests()[1]  # "United States": two tokens, greedy context
    hparams = KNHyperParams.from_dict(
        {**project_hparams("faithful")["KN"], "steps": steps, "batch_size": batch_size}
    )
    answer = answer_ids(lm, request.target_true)
    assert answer == lm.tokenizer(request.target_true)["input_ids"]
    assert len(answer) == 2  # noqa: PLR2004 - the test's premise
    layers = [3, 28]
    scores = layer_scores(lm, request.text, answer, hparams, layers)
    contexts, _ = greedy(lm, request.text, len(answer))
    for row, layer in enumerate(layers):
        expected = torch.stack(
            [
                reference_score(
                    lm, f"model.layers.{layer}.mlp.gate_proj", ids, token, steps
                )
                for ids, token in zip(contexts, answer, strict=True)
            ]
        ).mean(dim=0)
        atol = 1e-4 * float(expected.abs().max())
        torch.testing.assert_close(scores[row], expected, rtol=1e-3, atol=atol)


@pytest.mark.model
def test_the_edit_finds_easyedits_neurons_and_moves_them_by_the_embeddings(
    lm, faithful, context
):
    embeddings = lm.model.get_input_embeddings().weight
    for request in demo_requests()[:3]:
        delta = kn(lm, [request], faithful, context)
        found = sorted(
            (int(name.split(".")[2]), int(i))
            for name, change in delta.params.items()
            for i in change.tensors["index"]
        )
        assert found == EASYEDIT_NEURONS[request.case_id]
        new = lm.tokenizer(request.target_new)["input_ids"]
        _, chosen = greedy(lm, request.text, len(new))
        factor = 2.0 if len(new) == 1 else 1.0
        shift = embeddings[new].sum(0) - factor * embeddings[chosen].sum(0)
        for name, change in delta.params.items():
            assert name.endswith("mlp.down_proj.weight") and change.dim == 1
            values = change.tensors["values"]
            for column in values.T:
                torch.testing.assert_close(column, shift, rtol=0, atol=1e-6)


@pytest.mark.model
def test_the_neuron_cap_keeps_the_best_scores_and_refining_one_prompt_keeps_all(
    lm, faithful, context
):
    request = demo_requests()[2]
    answer = answer_ids(lm, request.target_true)
    scores = layer_scores(lm, request.text, answer, faithful, list(range(30)))
    best = scores.flatten().topk(3).indices
    expected = sorted(
        (int(i) // scores.shape[1], int(i) % scores.shape[1]) for i in best
    )
    capped = KNHyperParams.from_dict(
        {**project_hparams("faithful")["KN"], "max_neurons": 3}
    )
    delta = kn(lm, [request], capped, context)
    found = sorted(
        (int(name.split(".")[2]), int(i))
        for name, change in delta.params.items()
        for i in change.tensors["index"]
    )
    assert found == expected
    # EasyEdit refines over the edit's one prompt: every coarse neuron is shared by it
    refined = KNHyperParams.from_dict(
        {**project_hparams("faithful")["KN"], "refine": True}
    )
    assert kn(lm, [request], refined, context).meta["neurons"] == str(
        len(EASYEDIT_NEURONS[request.case_id])
    )


@pytest.mark.model
def test_gpt2_scores_every_token_at_the_prompt_and_edits_conv1d_rows(lm, context):
    gpt2 = tiny_gpt2(lm)
    hparams = KNHyperParams(
        rewrite_module_tmp="transformer.h.{}.mlp.c_proj",
        layer_module_tmp="transformer.h.{}",
        steps=4,
        batch_size=4,
        greedy_continuation=False,
    )
    request = demo_requests()[1]
    answer = answer_ids(gpt2, request.target_true)
    scores = layer_scores(gpt2, request.text, answer, hparams, [0, 1])
    prompt = lm.tokenizer(request.text)["input_ids"]
    for layer in (0, 1):
        expected = torch.stack(
            [
                reference_score(gpt2, f"transformer.h.{layer}.mlp.c_fc", prompt, t, 4)
                for t in answer
            ]
        ).mean(dim=0)
        atol = 1e-4 * float(expected.abs().max())
        torch.testing.assert_close(scores[layer], expected, rtol=1e-3, atol=atol)
    delta = kn(gpt2, [request], hparams, context)
    for change in delta.params.values():
        assert change.dim == 0
        assert change.tensors["values"].shape == (len(change.tensors["index"]), 32)


def test_steps_must_be_a_multiple_of_the_batch():
    with pytest.raises(HparamsError, match="multiple of batch_size"):
        KNHyperParams("a.{}.b", "a.{}", steps=5, batch_size=2)
