"""The minimal method of docs/editing.md ("Adding a method"), run as it is written."""

from __future__ import annotations

import re
import sys
import types

import pytest
import torch

from kebench.editing.delta import delta_applied
from kebench.editing.interface import EditContext
from kebench.editing.registry import METHODS
from kebench.editing.requests import EditRequest
from kebench.models.logprobs import score_answers
from kebench.project import PROJECT_ROOT

DOCS = PROJECT_ROOT / "docs" / "editing.md"


def template_module() -> types.ModuleType:
    """The docs' first python block after "A minimal method, whole", as a module."""
    text = DOCS.read_text()
    after = text[text.index("**A minimal method, whole.**") :]
    (code,) = re.findall(r"```python\n(.*?)```", after, flags=re.S)[:1]
    module = types.ModuleType("nudge_from_the_docs")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(code, str(DOCS), "exec"), module.__dict__)  # noqa: S102 - our docs
    return module


@pytest.mark.model
def test_the_docs_method_edits_and_leaves_the_weights_as_it_found_them(lm, tmp_path):
    try:
        module = template_module()
        hparams = module.NudgeHyperParams.from_dict({"lr": 0.1, "layer": 5})
        request = EditRequest("c1", "The capital of {} is", "France", "Paris", "Lyon")
        before = {n: p.clone() for n, p in lm.model.named_parameters()}
        delta = METHODS["NUDGE"].compute(
            lm, [request], hparams, EditContext(stats_dir=tmp_path)
        )
        # nothing written, nothing left unfrozen
        for name, param in lm.model.named_parameters():
            assert torch.equal(param, before[name]), name
            assert not param.requires_grad, name
        assert set(delta.params) == {"model.layers.5.mlp.down_proj.weight"}

        def logprob() -> float:
            (score,) = score_answers(
                lm.model, lm.tokenizer, [request.text], [request.target_new]
            )
            return score.logprob

        base = logprob()
        with delta_applied(lm.model, delta):
            edited = logprob()
        # the step moves towards the new target (-7.15 -> -6.28 on SmolLM2)
        assert edited > base
        assert logprob() == base  # and reverting restores the model exactly
    finally:
        # the registry is the process's: leave it as found
        METHODS.pop("NUDGE", None)
        sys.modules.pop("nudge_from_the_docs", None)
