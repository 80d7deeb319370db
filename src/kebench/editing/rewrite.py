"""Keys and target values of locate-then-edit methods (ROME, MEMIT).

The key of an edit is the input of the rewritten MLP projection at the subject's last
token, averaged over context templates (short texts the model itself wrote, put before
the prompt). The target value is found by gradient descent on a vector added to the
hidden state at that token, so that the model predicts the new target after every
context template, while the model's view of what the subject is ("<subject> is a")
stays close (KL) and the vector stays small (weight decay, norm clamp).

Layers below the edited one do not change during the optimisation, so they run once
and their output is replayed (``frozen_below``); logits are computed only at the
target tokens. Optimisation stops early once the targets' mean NLL is below a bound.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from kebench.editing.forward import Batch, add_at, capture, frozen_below, logits_at
from kebench.editing.registry import EditContext, HparamsError, HyperParams
from kebench.editing.requests import EditRequest
from kebench.editing.stats import STARTERS, second_moments
from kebench.models.loading import LoadedModel
from kebench.scoring.logprobs import encode_pair

logger = logging.getLogger(__name__)

KL_PROMPT = "{} is a"


def context_templates(
    lm: LoadedModel, length_params: Sequence[Sequence[int]], context: EditContext
) -> list[str]:
    """``{}`` plus, per ``[n_tokens, count]``, ``count`` seeded samples of the model.

    Each sample becomes ``"<sample>. {}"``. Memoised per run in ``context.cache``.
    """
    key = ("context_templates", lm.name, json.dumps(length_params), context.seed)
    if key in context.cache:
        return context.cache[key]
    templates = ["{}"]
    tokenizer = lm.tokenizer
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(context.seed)
        for n_tokens, count in length_params:
            for i in range(count):
                ids = tokenizer(STARTERS[i % len(STARTERS)], return_tensors="pt")
                out = lm.model.generate(
                    **ids.to(lm.device),
                    do_sample=True,
                    top_k=5,
                    max_new_tokens=n_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                )
                text = tokenizer.decode(out[0], skip_special_tokens=True)
                clean = " ".join(text.replace("{", " ").replace("}", " ").split())
                templates.append(clean + ". {}")
    context.cache[key] = templates
    logger.debug("Context templates of %s: %s", lm.name, templates)
    return templates


def subject_token(tokenizer: object, text: str, span: tuple[int, int]) -> int:
    """Index, in ``tokenizer(text)``, of the last token overlapping the subject ``span``."""
    if getattr(tokenizer, "is_fast", False):
        offsets = tokenizer(text, return_offsets_mapping=True)["offset_mapping"]
        hits = [
            i
            for i, (s, e) in enumerate(offsets)
            if e > s and s < span[1] and e > span[0]
        ]
        if hits:
            return hits[-1]
    return len(tokenizer(text[: span[1]])["input_ids"]) - 1


@dataclass
class Lookup:
    """Texts of (request, template) pairs and where their subject ends."""

    sequences: list[list[int]]
    subject_cols: list[int]
    request_index: list[int]
    texts: list[str]

    def batch(self, lm: LoadedModel) -> Batch:
        return Batch.of(self.sequences, lm.tokenizer.pad_token_id, lm.device)

    @property
    def rows(self) -> torch.Tensor:
        return torch.arange(len(self.sequences))

    @property
    def cols(self) -> torch.Tensor:
        return torch.tensor(self.subject_cols)


def in_templates(
    lm: LoadedModel, requests: Sequence[EditRequest], templates: Sequence[str]
) -> Lookup:
    """Every request's prompt inside every template, tokenised, with its subject token."""
    lookup = Lookup([], [], [], [])
    for index, request in enumerate(requests):
        for template in templates:
            offset = template.index("{}")
            text = template.replace("{}", request.text, 1)
            start, end = request.subject_span
            ids = lm.tokenizer(text)["input_ids"]
            lookup.sequences.append(list(ids))
            lookup.subject_cols.append(
                subject_token(lm.tokenizer, text, (offset + start, offset + end))
            )
            lookup.request_index.append(index)
            lookup.texts.append(text)
    return lookup


def average_keys(
    lm: LoadedModel,
    requests: Sequence[EditRequest],
    templates: Sequence[str],
    module_paths: Sequence[str],
) -> dict[str, torch.Tensor]:
    """Each module's input at the subject token, averaged over templates: (n_requests, d_in)."""
    lookup = in_templates(lm, requests, templates)
    captured = capture(
        lm.model, lookup.batch(lm), module_paths, lookup.rows, lookup.cols.to(lm.device)
    )
    keys = {}
    for path, values in captured.items():
        # on the module's own device (a model spread over GPUs has several)
        groups = torch.tensor(lookup.request_index, device=values.device)
        total = torch.zeros(len(requests), values.shape[-1], device=values.device)
        total.index_add_(0, groups, values.float())
        keys[path] = total / len(templates)
    return keys


@dataclass(frozen=True)
class ValueSettings:
    """The hparams of the target-value optimisation (EasyEdit's ``v_*`` keys)."""

    steps: int
    lr: float
    weight_decay: float
    kl_factor: float
    clamp_norm_factor: float
    stop_loss: float


@dataclass
class ValueResult:
    """The optimised vector, with how the optimisation went."""

    delta: torch.Tensor
    steps: int
    nll: float


def _targets(lm: LoadedModel, request: EditRequest, templates: Sequence[str]) -> tuple:
    """Rewriting sequences (template + prompt + target), the target positions and labels."""
    lookup = in_templates(lm, [request], templates)
    kl_request = EditRequest(
        request.case_id,
        KL_PROMPT,
        request.subject,
        request.target_true,
        request.target_new,
    )
    kl = in_templates(lm, [kl_request], ["{}"])
    sequences, rows, cols, labels = [], [], [], []
    for row, text in enumerate(lookup.texts):
        # the target's tokens in the joint text, as scoring reads them
        prompt_ids, target_ids = encode_pair(lm.tokenizer, text, request.target_new)
        sequences.append(prompt_ids + target_ids[:-1])
        for j, label in enumerate(target_ids):
            rows.append(row)
            cols.append(len(prompt_ids) - 1 + j)
            labels.append(label)
    sequences.append(kl.sequences[0])
    subject_cols = lookup.subject_cols + kl.subject_cols
    return sequences, subject_cols, rows, cols, labels, len(lookup.sequences)


def optimise_value(  # noqa: PLR0913 - the edit, where, and how
    lm: LoadedModel,
    request: EditRequest,
    templates: Sequence[str],
    *,
    layer_tmp: str,
    layer: int,
    init_norm: float,
    settings: ValueSettings,
) -> ValueResult:
    """The vector that, added to layer ``layer``'s output at the subject token, makes the
    model predict ``request.target_new`` after every template.

    The vector's norm is clamped to ``clamp_norm_factor * init_norm``, where
    ``init_norm`` is the norm of the value being rewritten.
    """
    model = lm.model
    sequences, subject_cols, rows, cols, labels, n_rewrite = _targets(
        lm, request, templates
    )
    batch = Batch.of(sequences, lm.tokenizer.pad_token_id, lm.device)
    kl_row = len(sequences) - 1
    kl_col = len(sequences[-1]) - 1
    at_rows = torch.tensor([*rows, kl_row], device=lm.device)
    at_cols = torch.tensor([*cols, kl_col], device=lm.device)
    labels_t = torch.tensor(labels, device=lm.device)
    rows_t = torch.tensor(rows, device=lm.device)
    counts = torch.bincount(rows_t, minlength=n_rewrite).float()
    delta = torch.zeros(model.get_output_embeddings().in_features, device=lm.device)
    delta.requires_grad_(True)
    optimiser = torch.optim.Adam([delta], lr=settings.lr)
    edit = add_at(
        torch.arange(len(sequences), device=lm.device),
        torch.tensor(subject_cols, device=lm.device),
        delta,
    )
    max_norm = settings.clamp_norm_factor * init_norm
    kl_init = None
    nll_value = float("inf")
    step = 0
    with frozen_below(model, layer_tmp, layer, batch, edit), torch.enable_grad():
        for step in range(1, settings.steps + 1):  # noqa: B007 - steps taken is reported
            logprobs = torch.log_softmax(
                logits_at(model, batch, at_rows, at_cols), dim=-1
            )
            token_lp = logprobs[:-1].gather(1, labels_t[:, None]).squeeze(1)
            per_row = torch.zeros(n_rewrite, device=lm.device).index_add(
                0, rows_t, -token_lp
            )
            nll = (per_row / counts).mean()
            kl_now = logprobs[-1]
            if kl_init is None:
                kl_init = kl_now.detach()
            kl = torch.nn.functional.kl_div(
                kl_now, kl_init, log_target=True, reduction="sum"
            )
            decay = delta.norm() ** 2 / init_norm**2
            loss = nll + settings.kl_factor * kl + settings.weight_decay * decay
            nll_value = float(nll.detach())
            if not torch.isfinite(loss):
                break
            if nll_value < settings.stop_loss:
                break
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            with torch.no_grad():
                norm = delta.norm()
                if norm > max_norm:
                    delta.mul_(max_norm / norm)
    return ValueResult(delta=delta.detach(), steps=step, nll=nll_value)


@dataclass
class RewriteHyperParams(HyperParams):
    """Hparams shared by ROME and MEMIT (EasyEdit's keys).

    ``v_stop_loss`` is kebench's: the value optimisation stops once the mean per-token
    NLL of the new target, over the context templates, is below it.
    """

    layers: list[int]
    rewrite_module_tmp: str
    layer_module_tmp: str
    fact_token: str = "subject_last"
    v_num_grad_steps: int = 20
    v_lr: float = 0.5
    v_weight_decay: float = 1e-3
    clamp_norm_factor: float = 4.0
    kl_factor: float = 0.0625
    mom2_adjustment: bool = False
    mom2_dataset: str = "model_samples"
    mom2_n_samples: int = 1000
    mom2_dtype: str = "float32"
    context_template_length_params: list[list[int]] = field(
        default_factory=lambda: [[5, 10], [10, 10]]
    )
    mlp_module_tmp: str = ""
    attn_module_tmp: str = ""
    ln_f_module: str = ""
    lm_head_module: str = ""
    v_stop_loss: float = 0.05

    def __post_init__(self) -> None:
        if self.fact_token != "subject_last":
            raise HparamsError(
                f"fact_token {self.fact_token!r}: only subject_last is supported"
            )

    def value_settings(self) -> ValueSettings:
        return ValueSettings(
            steps=self.v_num_grad_steps,
            lr=self.v_lr,
            weight_decay=self.v_weight_decay,
            kl_factor=self.kl_factor,
            clamp_norm_factor=self.clamp_norm_factor,
            stop_loss=self.v_stop_loss,
        )

    def mom2(self, lm: LoadedModel, paths: Sequence[str], context: EditContext) -> dict:
        """C = E[k kᵀ] per rewritten module; empty (C = I) without mom2_adjustment."""
        if not self.mom2_adjustment:
            return {}
        return second_moments(
            lm,
            paths,
            dataset=self.mom2_dataset,
            n_samples=self.mom2_n_samples,
            dtype_name=self.mom2_dtype,
            context=context,
        )
