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
whatever the loss, only reports that loss, and is not run. Several edits' values are
optimised in one batch, each as alone (``optimise_values``), and an edit that meets
its stopping rule leaves the batch: later steps run only the rows of the edits still
going. Its one extension that does change the result, ``v_stop_loss`` (stop once the
targets' mean NLL is below it), is off (None) unless an hparams file sets it: the fast
profile's files do.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from kebench.compute.engine import chunks
from kebench.editing.forward import (
    Batch,
    SplitBatch,
    capture,
    frozen_prefix,
)
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.requests import EditRequest
from kebench.editing.stats import STARTERS, second_moments
from kebench.models.loading import LoadedModel
from kebench.models.logprobs import encode_pair

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


@dataclass
class _Rewriting:
    """The sequences of several edits' value optimisations, in one batch: per edit its
    rewriting rows (template + prompt + target, as scoring reads the target's tokens),
    then one KL row per edit at the end."""

    sequences: list[list[int]] = field(default_factory=list)
    subject_cols: list[int] = field(default_factory=list)
    row_edit: list[int] = field(default_factory=list)  # every row's edit
    token_rows: list[int] = field(default_factory=list)  # each target token's row
    token_cols: list[int] = field(default_factory=list)
    labels: list[int] = field(default_factory=list)
    n_rewrite: int = 0  # rewriting rows per edit (one per template)


def _rewriting(
    lm: LoadedModel, requests: Sequence[EditRequest], templates: Sequence[str]
) -> _Rewriting:
    lookup = in_templates(lm, requests, templates)
    kl = in_templates(
        lm,
        [
            EditRequest(r.case_id, KL_PROMPT, r.subject, r.target_true, r.target_new)
            for r in requests
        ],
        ["{}"],
    )
    out = _Rewriting(n_rewrite=len(templates))
    for row, (text, index) in enumerate(
        zip(lookup.texts, lookup.request_index, strict=True)
    ):
        prompt_ids, target_ids = encode_pair(
            lm.tokenizer, text, requests[index].target_new
        )
        out.sequences.append(prompt_ids + target_ids[:-1])
        out.row_edit.append(index)
        for j, label in enumerate(target_ids):
            out.token_rows.append(row)
            out.token_cols.append(len(prompt_ids) - 1 + j)
            out.labels.append(label)
    out.sequences += kl.sequences
    out.subject_cols = lookup.subject_cols + kl.subject_cols
    out.row_edit += list(range(len(requests)))
    return out


def optimise_values(  # noqa: PLR0913 - the edits, where, and how
    lm: LoadedModel,
    requests: Sequence[EditRequest],
    templates: Sequence[str],
    *,
    layer_tmp: str,
    layer: int,
    init_norms: Sequence[float],
    settings: ValueSettings,
    per_batch: int = 1,
) -> list[ValueResult]:
    """For each request, the vector δ that, added to layer ``layer``'s output at the
    subject token, makes the model predict its ``target_new`` after every template
    (the loss and the stopping rule are the module docstring's).

    ``init_norms``: each request's ‖v‖, the norm of the value being rewritten: its
    weight decay is relative to ‖v‖², and its δ is clamped to ``clamp_norm_factor``
    · ‖v‖.

    Up to ``per_batch`` requests are optimised side by side, each exactly as alone:
    every row of the batch carries one request's δ, so a request's loss reaches no
    other δ; each δ is a parameter of its own (Adam's state is per parameter), and one
    that meets the stopping rule gets no more updates, nor rows in the batch, while the
    others go on. One batch of all their rows fills the matrix products that a single
    edit's ~35 rows leave mostly idle (docs/editing.md, "Speed at identical settings").
    """
    size = max(per_batch, 1)
    return [
        result
        for part, norms in zip(
            chunks(list(requests), size), chunks(list(init_norms), size), strict=True
        )
        for result in _optimise_batch(
            lm,
            part,
            templates,
            layer_tmp=layer_tmp,
            layer=layer,
            init_norms=norms,
            settings=settings,
        )
    ]


def _optimise_batch(  # noqa: PLR0913, PLR0915 - the edits, where, and how
    lm: LoadedModel,
    requests: Sequence[EditRequest],
    templates: Sequence[str],
    *,
    layer_tmp: str,
    layer: int,
    init_norms: Sequence[float],
    settings: ValueSettings,
) -> list[ValueResult]:
    model = lm.model
    n_edits = len(requests)
    plan = _rewriting(lm, requests, templates)
    device = lm.device
    # δ enters at each row's subject token: what precedes it is computed once
    batch = SplitBatch.of(
        plan.sequences, plan.subject_cols, lm.tokenizer.pad_token_id, device
    )
    token_rows = torch.tensor(plan.token_rows, device=device)
    kl_rows = torch.arange(
        len(plan.sequences) - n_edits, len(plan.sequences), device=device
    )
    token_cols = batch.after_cut(
        token_rows, torch.tensor(plan.token_cols, device=device)
    )
    # the KL term reads the next-token distribution at the KL prompt's subject token
    kl_cols = batch.after_cut(
        kl_rows, torch.tensor(plan.subject_cols[-n_edits:], device=device)
    )
    labels = torch.tensor(plan.labels, device=device)
    row_edit = torch.tensor(plan.row_edit, device=device)
    rewrite_rows = len(plan.sequences) - n_edits
    counts = torch.bincount(token_rows, minlength=rewrite_rows).float()
    width = model.get_output_embeddings().in_features
    deltas = [torch.zeros(width, device=device, requires_grad=True) for _ in requests]
    optimiser = torch.optim.Adam(deltas, lr=settings.lr)

    def edit(hidden: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        # each row's vector at the subject token: column 0 of the part after the cut
        at_subject = torch.zeros(
            hidden.shape[:2] + (1,), dtype=hidden.dtype, device=hidden.device
        )
        at_subject[:, 0] = 1
        edits = row_edit if rows is None else row_edit[rows]
        per_row = torch.stack(deltas)[edits].to(hidden.dtype)
        return hidden + at_subject * per_row[:, None, :]

    norms = torch.tensor(init_norms, device=device)
    max_norms = settings.clamp_norm_factor * norms
    active = [True] * n_edits
    steps = [0] * n_edits
    nll_values = [float("inf")] * n_edits
    kl_start = None
    head = model.get_output_embeddings()
    with (
        frozen_prefix(model, layer_tmp, layer, batch, edit) as run_after_cut,
        torch.enable_grad(),
    ):
        # the reference's last pass only reports its loss (δ no longer changes after
        # it), so it is not run: steps - 1 passes, each followed by an update
        for _ in range(settings.steps - 1):
            # an edit that met the stopping rule leaves the batch: only the rows of
            # the edits still going are run (each row's result is the same either way)
            going = torch.tensor(active, device=device)
            rows = going[row_edit].nonzero().squeeze(1)
            place = torch.full_like(row_edit, -1)
            place[rows] = torch.arange(len(rows), device=device)
            hidden = run_after_cut(rows)
            tokens = going[row_edit[token_rows]].nonzero().squeeze(1)
            going_edits = going.nonzero().squeeze(1)
            picked = hidden[
                place[torch.cat([token_rows[tokens], kl_rows[going_edits]])],
                torch.cat([token_cols[tokens], kl_cols[going_edits]]),
            ]
            logprobs = torch.log_softmax(head(picked).float(), dim=-1)
            token_lp = (
                logprobs[: len(tokens)].gather(1, labels[tokens, None]).squeeze(1)
            )
            per_row = torch.zeros(rewrite_rows, device=device).index_add(
                0, token_rows[tokens], -token_lp
            )
            nll = (
                torch.zeros(n_edits, device=device).index_add(
                    0, row_edit[:rewrite_rows], per_row / counts
                )
                / plan.n_rewrite
            )
            kl_now = logprobs[len(tokens) :]
            if kl_start is None:  # the first pass, which runs every edit
                kl_start = kl_now.detach()
            # KL(now ‖ start) per edit: the reference passes the start as kl_div's input
            kl = torch.zeros(n_edits, device=device).index_put(
                (going_edits,),
                torch.nn.functional.kl_div(
                    kl_start[going_edits], kl_now, log_target=True, reduction="none"
                ).sum(-1),
            )
            decay = torch.stack([d.norm() for d in deltas]) / norms**2
            losses = nll + settings.kl_factor * kl + settings.weight_decay * decay
            for i in range(n_edits):
                if not active[i]:
                    continue
                nll_values[i] = float(nll[i].detach())
                active[i] = not (
                    not torch.isfinite(losses[i])
                    or losses[i] < REFERENCE_STOP_LOSS
                    or (
                        settings.stop_loss is not None
                        and nll_values[i] < settings.stop_loss
                    )
                )
            if not any(active):
                break
            optimiser.zero_grad(set_to_none=True)
            losses[torch.tensor(active, device=device)].sum().backward()
            for delta, going in zip(deltas, active, strict=True):
                if not going:
                    delta.grad = None  # Adam leaves a parameter without a gradient
            optimiser.step()
            with torch.no_grad():
                for i, delta in enumerate(deltas):
                    if not active[i]:
                        continue
                    steps[i] += 1
                    norm = delta.norm()
                    if norm > max_norms[i]:
                        delta.mul_(max_norms[i] / norm)
    return [
        ValueResult(delta=delta.detach(), steps=taken, nll=nll_value)
        for delta, taken, nll_value in zip(deltas, steps, nll_values, strict=True)
    ]


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
        return self.second_moments(lm, paths, context)

    def second_moments(
        self, lm: LoadedModel, paths: Sequence[str], context: EditContext
    ) -> dict:
        """C = E[k kᵀ] per module, from these hparams' statistics settings."""
        return second_moments(
            lm,
            paths,
            dataset=self.mom2_dataset,
            n_samples=self.mom2_n_samples,
            dtype_name=self.mom2_dtype,
            context=context,
        )
