"""The EasyEdit backend: a clear message without EasyEdit, a stored delta with it."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from kebench.editing.delta import apply_delta, revert_delta
from kebench.editing.easyedit import EasyEditUnavailableError
from kebench.editing.interface import EditContext
from kebench.editing.registry import get_method
from kebench.editing.runner import select_methods
from tests.editing.cases import demo_requests, project_hparams

HAVE_EASYEDIT = importlib.util.find_spec("easyeditor") is not None


def test_easyedit_methods_read_kebench_hparams_files():
    assert select_methods("easyedit:ROME+ROME", ["ROME"]) == ["easyedit:ROME", "ROME"]
    assert get_method("easyedit:FT-M").name == "easyedit:FT-M"
    with pytest.raises(KeyError, match="no EasyEdit backend for 'IKE'"):
        get_method("easyedit:IKE")


@pytest.mark.skipif(
    HAVE_EASYEDIT, reason="checks the message shown when EasyEdit is absent"
)
def test_without_easyedit_the_error_says_how_to_install_it(stats_dir):
    method = get_method("easyedit:ROME")
    hparams = method.hparams.from_dict(project_hparams()["ROME"])
    with pytest.raises(
        EasyEditUnavailableError, match="github.com/zjunlp/EasyEdit.*pip install -e"
    ):
        method.compute(None, demo_requests()[:1], hparams, EditContext(stats_dir))


@pytest.mark.easyedit
@pytest.mark.model
@pytest.mark.skipif(
    not HAVE_EASYEDIT, reason="EasyEdit (easyeditor) is not importable here"
)
def test_easyedit_rome_change_is_stored_as_an_exact_delta(lm, stats_dir):
    base = {n: t.clone() for n, t in lm.model.state_dict().items()}
    method = get_method("easyedit:ROME")
    hparams = method.hparams.from_dict(project_hparams()["ROME"])
    delta = method.compute(lm, demo_requests()[:1], hparams, EditContext(stats_dir))
    assert list(delta.params) == ["model.layers.5.mlp.down_proj.weight"]
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name
    applied = apply_delta(lm.model, delta)
    assert not torch.equal(
        lm.model.get_parameter("model.layers.5.mlp.down_proj.weight"),
        base["model.layers.5.mlp.down_proj.weight"],
    )
    revert_delta(lm.model, applied)
    for name, tensor in lm.model.state_dict().items():
        assert torch.equal(tensor, base[name]), name
