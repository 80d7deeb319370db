"""GRACE (Hartvigsen et al., NeurIPS 2023): a key-value codebook at one module's output,
EasyEdit's ``GRACE.py``. No weight changes; the delta is the codebook entries the edit
made or changed (``kebench.editing.codebook``, which applies them).

An edit reads the query, the module's input at the prompt's last token of ``prompt
target_new`` (EasyEdit's text and labels, as LoRA's), and updates the codebook as GRACE
does, with ``eps`` the initial radius:
    - an empty codebook, or no key within ``eps`` + its radius: a new entry (key = the
      query, radius ``eps``);
    - the nearest key is within reach but trained for another answer: a new entry, and
      the two radii split the distance d (the old one d/2 − 1e-5, the new one d/2);
    - the nearest key is for the same answer: its radius grows to d (``eps_expand``
      ``coverage``), and with ``moving_average`` its key also moves halfway to the query.
Then the value of the entry nearest the query, a new entry's initialised uniformly
in [0, 1) (``val_init: cold``, drawn from the run's seed) or to the module's output
(``warm``), is trained with Adam (``edit_lr``, ``n_iter`` steps) on the causal LM's mean
NLL of the target, the module's output at the query position being that value.

Sequential mode is GRACE's purpose: an edit reads the codebook the model holds (the
stream's earlier deltas, applied) and returns only the entries it made or changed. In
single mode each edit starts from an empty codebook.

Deliberate differences from EasyEdit, none of which changes a single edit:
    - which position a later input is queried at (``kebench.editing.codebook``);
    - the answer identity that the conflict rule compares: kebench's is the target's
      token ids; EasyEdit's is the mean of the label tensor, prompt mask included, and
      its list of labels is kept in reverse order of its keys;
    - EasyEdit draws a fresh cold value at every training forward (only the first is
      used); kebench draws it once, from a seed forked off the global one.
``dist_fn``, ``val_reg``, ``reg``, ``dropout`` and ``num_pert`` are read and not used by
EasyEdit's GRACE (its distance is always Euclidean); kebench refuses the values it
would not honour.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import torch
from torch import nn

from kebench.editing import module_hooks
from kebench.editing.codebook import Codebook
from kebench.editing.delta import Delta
from kebench.editing.forward import get_module
from kebench.editing.interface import EditContext, HparamsError, HyperParams
from kebench.editing.methods.lora import IGNORED, left_padding, target_labels
from kebench.editing.module_hooks import by_token, module_dims
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel

# How far below half the distance a split entry's old radius goes (EasyEdit's).
SPLIT_MARGIN = 1e-5
# The weight of the old key when ``moving_average`` moves it towards a query.
MOVING_AVERAGE = 0.5
CHOICES = {
    "dist_fn": ("euc",),
    "val_init": ("cold", "warm"),
    "val_train": ("sgd",),
    "replacement": ("replace_last",),
    "eps_expand": ("coverage", "moving_average"),
}
# EasyEdit's inner_params: a weight path with the layer in brackets.
INNER_PARAM = re.compile(r"^(?P<head>.+)\[(?P<layer>\d+)\](?P<tail>.*?)(\.weight)?$")


@dataclass
class GRACEHyperParams(HyperParams):
    """EasyEdit's GRACE keys. The module is ``rewrite_module_tmp`` at the one layer of
    ``layers`` (what kebench's files say, so that other architectures derive it), or
    EasyEdit's ``inner_params`` (``model.layers[27].mlp.down_proj.weight``)."""

    layers: list[int] = field(default_factory=list)
    rewrite_module_tmp: str = ""
    inner_params: list[str] = field(default_factory=list)
    edit_lr: float = 1.0
    n_iter: int = 50
    eps: float = 1.0
    dist_fn: str = "euc"
    val_init: str = "cold"
    val_train: str = "sgd"
    val_reg: str | None = None
    reg: str = "early_stop"
    replacement: str = "replace_last"
    eps_expand: str = "coverage"
    num_pert: int = 8
    dropout: float = 0.0
    batch_size: int = 1
    max_length: int = 30

    def __post_init__(self) -> None:
        for key, allowed in CHOICES.items():
            if getattr(self, key) not in allowed:
                raise HparamsError(
                    f"GRACE {key} {getattr(self, key)!r}: kebench implements "
                    f"{list(allowed)}"
                )
        self.layers, self.rewrite_module_tmp = one_module(
            "GRACE", self.layers, self.rewrite_module_tmp, self.inner_params
        )

    @property
    def module_path(self) -> str:
        return self.rewrite_module_tmp.format(self.layers[0])


def one_module(
    method: str, layers: list[int], template: str, inner_params: list[str]
) -> tuple[list[int], str]:
    """The one layer and module template of a method that edits one module, from
    ``layers`` and ``rewrite_module_tmp`` or from EasyEdit's ``inner_params``."""
    if inner_params:
        if len(inner_params) != 1:
            raise HparamsError(
                f"{method} edits one module; inner_params names {inner_params}"
            )
        match = INNER_PARAM.match(inner_params[0])
        if match is None:
            raise HparamsError(
                f"{method} inner_params {inner_params[0]!r} is not of the form "
                "'model.layers[27].mlp.down_proj.weight'"
            )
        layers = [int(match["layer"])]
        template = f"{match['head']}.{{}}{match['tail']}"
    if len(layers) != 1 or "{}" not in template:
        raise HparamsError(
            f"{method} needs one layer in layers and a rewrite_module_tmp with {{}} "
            f"(or EasyEdit's inner_params); got layers {layers}, "
            f"rewrite_module_tmp {template!r}"
        )
    return layers, template


def stable_id(*parts: object) -> int:
    """A non-negative int64 that names ``parts`` in every run."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def place_query(
    book: Codebook,
    query: torch.Tensor,
    value: torch.Tensor,
    entry: tuple[int, int],
    hparams: GRACEHyperParams,
) -> tuple[Codebook, int]:
    """GRACE's codebook after a new edit's ``query`` (module docstring), and the row
    whose value the edit trains. ``value``: a new entry's initial value; ``entry``:
    (id, label) of the new entry."""
    book = Codebook(**{k: t.clone() for k, t in book.tensors().items()})
    add = not len(book)
    split = None
    if not add:
        distance, nearest = (t.item() for t in book.nearest(query[None]))
        reach = hparams.eps + float(book.radii[nearest])
        add = distance > reach or int(book.labels[nearest]) != entry[1]
        if distance <= reach and add:
            split = (nearest, distance)
        elif not add and distance > float(book.radii[nearest]):
            book.radii[nearest] = distance
            if hparams.eps_expand == "moving_average":
                book.keys[nearest] = MOVING_AVERAGE * book.keys[nearest] + (
                    1 - MOVING_AVERAGE
                ) * query.to(book.keys)
    if add:
        new = Codebook(
            ids=torch.tensor([entry[0]]),
            keys=query[None].detach().float().cpu(),
            values=value[None].detach().float().cpu(),
            radii=torch.tensor([hparams.eps], dtype=torch.float32),
            labels=torch.tensor([entry[1]]),
        )
        book = Codebook(
            **{k: torch.cat([getattr(book, k), getattr(new, k)]) for k in new.tensors()}
        )
    if split is not None:
        nearest, distance = split
        book.radii[nearest] = distance / 2 - SPLIT_MARGIN
        book.radii[-1] = distance / 2
    _, trained = book.nearest(query[None].float())
    return book, int(trained)


@dataclass(frozen=True)
class EditTokens:
    """An edit's ``prompt target`` tokens and labels, and its prompt's last position."""

    inputs: dict[str, torch.Tensor]
    position: int


def module_at(
    lm: LoadedModel, module: nn.Module, tokens: EditTokens
) -> tuple[torch.Tensor, torch.Tensor]:
    """The module's input and output at the prompt's last position."""
    seen = {}
    inputs, position = tokens.inputs, tokens.position

    def capture(_module: nn.Module, args: tuple, output: torch.Tensor) -> None:
        seen["input"] = by_token(args[0], 1)[0, position].detach()
        seen["output"] = by_token(output, 1)[0, position].detach()

    handle = module.register_forward_hook(capture)
    try:
        with torch.no_grad():
            lm.model(
                input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]
            )
    finally:
        handle.remove()
    return seen["input"], seen["output"]


def train_value(
    lm: LoadedModel,
    module: nn.Module,
    tokens: EditTokens,
    start: torch.Tensor,
    hparams: GRACEHyperParams,
) -> torch.Tensor:
    """The value that, as the module's output at the prompt's last position, minimises
    the target's NLL: ``n_iter`` Adam steps from ``start``."""
    inputs, position = tokens.inputs, tokens.position
    value = nn.Parameter(start.detach().float().clone().to(lm.device))
    optimiser = torch.optim.Adam([value], lr=hparams.edit_lr)

    def put(_module: nn.Module, _args: tuple, output: torch.Tensor) -> torch.Tensor:
        replaced = by_token(output, 1).clone()
        replaced[:, position] = value.to(output.dtype)
        return replaced.reshape(output.shape)

    handle = module.register_forward_hook(put)
    try:
        with torch.enable_grad():
            for _ in range(hparams.n_iter):
                loss = lm.model(**inputs).loss
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"GRACE's loss is {float(loss)}")
                loss.backward()
                optimiser.step()
                optimiser.zero_grad()
    finally:
        handle.remove()
    return value.detach().cpu()


@register("GRACE", GRACEHyperParams, carry="last")
def grace(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: GRACEHyperParams,
    context: EditContext,
) -> Delta:
    """The codebook entries this edit made or changed, at ``hparams.module_path``."""
    (request,) = requests
    path = hparams.module_path
    module = get_module(lm.model, path)
    current = module_hooks.active(lm.model, path)
    current = Codebook.empty(*module_dims(module)) if current is None else current
    current = current.to(torch.device("cpu"))
    with left_padding(lm.tokenizer):
        inputs = target_labels(
            lm.tokenizer, [request.text], [request.target_new], lm.device
        )
    labels = inputs["labels"][0]
    tokens = EditTokens(inputs, int((labels == IGNORED).sum()) - 1)
    entry = (
        stable_id(request.case_id, request.text, request.target_new),
        stable_id(labels[labels != IGNORED].tolist()),
    )
    cuda = [lm.device.index or 0] if lm.device.type == "cuda" else []
    with module_hooks.suspended(lm.model), torch.random.fork_rng(devices=cuda):
        torch.manual_seed(context.seed)
        query, output = module_at(lm, module, tokens)
        start = (
            torch.rand(1, output.shape[-1], device=lm.device)[0]
            if hparams.val_init == "cold"
            else output
        )
        book, row = place_query(current, query.cpu(), start.cpu(), entry, hparams)
        book.values[row] = train_value(lm, module, tokens, book.values[row], hparams)
    return Delta(
        codebooks={path: book.changed_since(current)},
        meta={"module": path, "entries": str(len(book))},
    )
