"""LoRA through peft on the real SmolLM2: the model and the random state come back as
they were, and a sequential stream goes on training the same adapters."""

from __future__ import annotations

import pytest
import torch

from kebench.editing.interface import EditContext
from kebench.editing.registry import get_method
from kebench.editing.runner import make_job, run_job
from kebench.editing.store import DeltaStore
from tests.editing.cases import demo_requests, project_hparams

# cheap settings: the computation is the faithful one, on two layers for a few steps
CHEAP = {"num_steps": 4, "layers": [4, 5]}


@pytest.fixture(scope="module")
def demo():
    return demo_requests()


@pytest.mark.model
def test_an_edit_leaves_the_model_and_the_random_state_as_they_were(
    lm, demo, stats_dir
):
    entry = get_method("LoRA")
    hparams = entry.hparams.from_dict({**project_hparams()["LoRA"], **CHEAP})
    base = {name: t.clone() for name, t in lm.model.state_dict().items()}
    flags = {name: p.requires_grad for name, p in lm.model.named_parameters()}
    modules = [name for name, _ in lm.model.named_modules()]
    torch.manual_seed(123)
    expected_draw = torch.rand(3)
    torch.manual_seed(123)
    delta = entry.compute(lm, [demo[0]], hparams, EditContext(stats_dir))
    assert torch.equal(torch.rand(3), expected_draw)
    assert [name for name, _ in lm.model.named_modules()] == modules
    assert {n: p.requires_grad for n, p in lm.model.named_parameters()} == flags
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name
    # q_proj and v_proj at two layers, each at AdaLoRA's initial rank
    assert len(delta.params) == 4  # noqa: PLR2004
    assert all(c.tensors["left"].shape[1] == 12 for c in delta.params.values())  # noqa: PLR2004


@pytest.mark.model
def test_a_stream_goes_on_training_the_same_adapters(lm, demo, stats_dir, tmp_path):
    """EasyEdit's sequential LoRA keeps training one set of adapters, so the stream's
    deltas (read back from their files) add up to the last adapters' product,
    s·B(Λ ⊙ A), computed here from the stored adapter tensors."""
    job = make_job("LoRA", {**project_hparams()["LoRA"], **CHEAP}, "sequential", "LoRA")
    store = DeltaStore(tmp_path)
    for outcome in run_job(
        lm,
        [demo[0], demo[13]],
        job,
        store=store,
        context=EditContext(stats_dir),
        max_relative_norm=1.0,
    ):
        store.write(outcome)
    rows = store.rows("LoRA", "sequential")
    first, second = (
        store.load(rows[r.case_id]["delta_file"]) for r in (demo[0], demo[13])
    )
    for name, change in second.params.items():
        weight = lm.model.get_parameter(name)
        total = first.params[name].full(weight) + change.full(weight)
        path = name.removesuffix(".weight")
        a, b, e, scale = (
            second.state[f"adapter/{path}/{part}"].double()
            for part in ("A", "B", "E", "scale")
        )
        product = scale * b @ (a * e)
        torch.testing.assert_close(total.double(), product, rtol=1e-4, atol=1e-7)
        # the second edit trained the first's adapters on: its change has both parts
        assert change.tensors["left"].shape[1] == 2 * b.shape[1]
