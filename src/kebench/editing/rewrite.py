"""Keys and target values of locate-then-edit methods (ROME, R-ROME, MEMIT).

What the reference code (kmeng01/rome, kmeng01/memit, EasyEdit's ``rome``, ``r_rome``
and ``memit``) computes, in our own implementation:

- **Context templates** are short texts the model itself writes after fixed first
  words, each put before the prompt as ``"<text>. {}"``. They come in groups: the bare
  prompt ``["{}"]``, then one group per ``[n_tokens, count]`` of the hparams
  ``context_template_length_params`` (``n_tokens`` counts the first word's tokens, as
  the reference's ``max_out_len`` does).
- **The key** of an edit is the rewritten projection's input at the subject's last
  token, averaged within each group and then over the groups: MEMIT's weighting, in
  which the bare prompt counts as much as all samples of one length together. ROME
  averages over all templates at once (one group).
- **The target value** is found by Adam on a vector δ added to the hidden state at the
  subject's last token of every prompt. The loss is the reference's:
  NLL(target_new after every template, per token, averaged over templates)
  + kl_factor · KL(now ‖ start) of the next-token distribution at the subject's last
  token of ``"<subject> is a"`` + v_weight_decay · ‖δ‖ / ‖v‖², v the value being
  rewritten. After each step δ is clamped to ``clamp_norm_factor`` · ‖v‖. The loop
  stops when the loss is below 0.05, or after ``v_num_grad_steps`` evaluations
  (``v_num_grad_steps`` − 1 steps), as the reference's does.

kebench's own speed levers change nothing that is computed. δ enters at the subject's
last token, so the tokens before it never change, and the layers up to the edited one
never change for any token: both are computed once (``frozen_prefix``), and each step
runs only the tokens from the subject on through the layers above. Logits are computed
only at the target tokens. The reference's last evaluation, after which it stops
whatever the loss, only reports that loss, and is not run. Its one extension that does
change the result, ``v_stop_loss`` (stop once the targets' mean NLL is below it), is
off (None) unless an hparams file sets it: the fast profile's files do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from kebench.editing.forward import (
    Batch,
    SplitBatch,
    add_at,
    capture,
    frozen_prefix,
)
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.requests import EditRequest
from kebench.editing.stats import STARTERS, second_moments
from kebench.models.loading import LoadedModel
from kebench.scoring.logprobs import encode_pair

logger = logging.getLogger(__name__)

KL_PROMPT = "{} is a"


def context_templates(
    lm: LoadedModel, length_params: Sequence[Sequence[int]], context: EditContext
) -> list[list[str]]:
    """The template groups: ``["{}"]``, then per ``[n_tokens, count]`` a group of
    ``count`` seeded samples of ``n_tokens`` tokens (the first word's included).

    ``context.context_templates``, when set, is used instead. Memoised per run in
    ``context.cache``.
    """
    if context.context_templates is not None:
        groups = [list(group) for group in context.context_templates]
        if not groups or groups[0] != ["{}"]:
            raise ValueError(
                "EditContext.context_templates: the first group must be ['{}'] "
                f"(the bare prompt), got {groups[:1]}"
            )
        return groups
    key = ("context_templates", lm.name, json.dumps(length_params), context.seed)
    if key in context.cache:
        return context.cache[key]
    groups = [["{}"]]
    tokenizer = lm.tokenizer
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(context.seed)
        for n_tokens, count in length_params:
            group = []
            for i in range(count):
                ids = tokenizer(STARTERS[i % len(STARTERS)], return_tensors="pt")
                out = lm.model.generate(
                    **ids.to(lm.device),
                    do_sample=True,
                    top_k=5,
                    max_new_tokens=max(1, n_tokens - ids["input_ids"].shape[1]),
                    pad_token_id=tokenizer.pad_token_id,
                )
                text = tokenizer.decode(out[0], skip_special_tokens=True)
                clean = " ".join(text.replace("{", " ").replace("}", " ").split())
                group.append(clean + ". {}")
            groups.append(group)
    context.cache[key] = groups
    logger.debug("Context templates of %s: %s", lm.name, groups)
    return groups


def flatten(groups: Sequence[Sequence[str]]) -> list[str]:
    """Every template of every group, in order."""
    return [template for group in groups for template in group]


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
    groups: Sequence[Sequence[str]],
    module_paths: Sequence[str],
) -> dict[str, torch.Tensor]:
    """Each module's input at the subject token, averaged within each template group
    and then over the groups: (n_requests, d_in). One group is the plain mean."""
    templates = flatten(groups)
    weights = [1 / (len(groups) * len(group)) for group in groups for _ in group]
    lookup = in_templates(lm, requests, templates)
    captured = capture(
        lm.model, lookup.batch(lm), module_paths, lookup.rows, lookup.cols.to(lm.device)
    )
    keys = {}
    for path, values in captured.items():
        # on the module's own device (a model spread over GPUs has several)
        groups_t = torch.tensor(lookup.request_index, device=values.device)
        weight = torch.tensor(weights * len(requests), device=values.device)
        total = torch.zeros(len(requests), values.shape[-1], device=values.device)
        total.index_add_(0, groups_t, values.float() * weight[:, None])
        keys[path] = total
    return keys


# The reference's stopping rule: the whole loss (NLL + KL + weight decay) below this.
REFERENCE_STOP_LOSS = 5e-2


@dataclass(frozen=True)
class ValueSettings:
    """The hparams of the target-value optimisation (EasyEdit's ``v_*`` keys).

    ``stop_loss`` is kebench's ``v_stop_loss`` (None: off).
    """

    steps: int
    lr: float
    weight_decay: float
    kl_factor: float
    clamp_norm_factor: float
    stop_loss: float | None


@dataclass
class ValueResult:
    """The optimised vector, with how the optimisation went: ``steps`` updates, and
    ``nll`` the targets' mean NLL at the last evaluation run (before the last update;
    inf when none ran)."""

    delta: torch.Tensor
    steps: int
    nll: float


def _targets(lm: LoadedModel, request: EditRequest, templates: Sequence[str]) -> tuple:
    """Rewriting sequences (template + prompt + target), the target positions and
    labels, then the KL prompt; each sequence's subject token."""
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
    """The vector δ that, added to layer ``layer``'s output at the subject token, makes
    the model predict ``request.target_new`` after every template (the loss and the
    stopping rule are the module docstring's).

    ``init_norm`` is ‖v‖, the norm of the value being rewritten: the weight decay is
    relative to ‖v‖², and δ is clamped to ``clamp_norm_factor`` · ‖v‖.
    """
    model = lm.model
    sequences, subject_cols, rows, cols, labels, n_rewrite = _targets(
        lm, request, templates
    )
    # δ enters at each row's subject token: what precedes it is computed once
    batch = SplitBatch.of(sequences, subject_cols, lm.tokenizer.pad_token_id, lm.device)
    rows_t = torch.tensor(rows, device=lm.device)
    kl_row = len(sequences) - 1
    # the KL term reads the next-token distribution at the KL prompt's subject token
    at_rows = torch.cat([rows_t, torch.tensor([kl_row], device=lm.device)])
    at_cols = batch.after_cut(
        at_rows,
        torch.tensor([*cols, subject_cols[-1]], device=lm.device),
    )
    labels_t = torch.tensor(labels, device=lm.device)
    counts = torch.bincount(rows_t, minlength=n_rewrite).float()
    delta = torch.zeros(model.get_output_embeddings().in_features, device=lm.device)
    delta.requires_grad_(True)
    optimiser = torch.optim.Adam([delta], lr=settings.lr)
    edit = add_at(
        torch.arange(len(sequences), device=lm.device),
        torch.zeros(len(sequences), dtype=torch.long, device=lm.device),
        delta,
    )
    max_norm = settings.clamp_norm_factor * init_norm
    kl_start = None
    nll_value = float("inf")
    taken = 0
    head = model.get_output_embeddings()
    with (
        frozen_prefix(model, layer_tmp, layer, batch, edit) as run_after_cut,
        torch.enable_grad(),
    ):
        # the reference's last pass only reports its loss (δ no longer changes after
        # it), so it is not run: steps - 1 passes, each followed by an update
        for _ in range(settings.steps - 1):
            hidden = run_after_cut()
            logprobs = torch.log_softmax(head(hidden[at_rows, at_cols]).float(), dim=-1)
            token_lp = logprobs[:-1].gather(1, labels_t[:, None]).squeeze(1)
            per_row = torch.zeros(n_rewrite, device=lm.device).index_add(
                0, rows_t, -token_lp
            )
            nll = (per_row / counts).mean()
            kl_now = logprobs[-1]
            if kl_start is None:
                kl_start = kl_now.detach()
            # KL(now ‖ start): the reference passes the start as kl_div's input
            kl = torch.nn.functional.kl_div(
                kl_start, kl_now, log_target=True, reduction="sum"
            )
            decay = delta.norm() / init_norm**2
            loss = nll + settings.kl_factor * kl + settings.weight_decay * decay
            nll_value = float(nll.detach())
            if (
                not torch.isfinite(loss)
                or loss < REFERENCE_STOP_LOSS
                or (settings.stop_loss is not None and nll_value < settings.stop_loss)
            ):
                break
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
            taken += 1
            with torch.no_grad():
                norm = delta.norm()
                if norm > max_norm:
                    delta.mul_(max_norm / norm)
    return ValueResult(delta=delta.detach(), steps=taken, nll=nll_value)


@dataclass
class RewriteHyperParams(HyperParams):
    """Hparams shared by ROME, R-ROME and MEMIT (EasyEdit's keys).

    ``v_stop_loss`` is kebench's (None: off): the value optimisation also stops once
    the mean per-token NLL of the new target, over the context templates, is below it.
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
    v_stop_loss: float | None = None

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
