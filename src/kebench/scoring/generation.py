"""Free generation of a probe's answer, and its scores (protocols ``wild``, ``bke_f1``).

"The Mirage of Model Editing" (Yang et al., ACL 2025) evaluates an edited model the
way it is used: it must *generate* the answer. kebench's version:

- **Context** (``GenerationSettings.context``): the probe's own prompt, the text teacher
  forcing scores (``prompt``: a cloze, or the question in the QA format), so that the
  two protocols ask the same thing; or, as WILD's three contexts, the probe's question
  (its cloze when it has none) alone (``question``), inside a QA instruction
  (``instruction``, the configured template with ``{question}``) or as the user turn
  of the model's own chat template (``chat``).
- **Greedy decoding** in left-padded batches with the KV cache, until the model's end
  of sequence, a configured stop string (by default a newline and a full stop, as the
  paper's repository stops), or ``max_new_tokens``. An answer cut by the cap is
  flagged (``stop == "cap"``): it never stopped on its own.
- **Scores**: ``wild`` is SQuAD-normalised exact match against the answer or any of its
  aliases; ``bke_f1`` is SQuAD token F1 against the answer alone, as the paper's
  repository reports it, so that its numbers can stand beside the paper's table.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace

import pandas as pd
import torch
from transformers import StoppingCriteria, StoppingCriteriaList, StopStringCriteria

from kebench.models.loading import LoadedModel
from kebench.schemas import GENERATIONS, UNCHANGED_TYPES
from kebench.scoring.logprobs import (
    PromptPass,
    length_batches,
    pad_batch,
    padding_id,
    shared_prefix,
    with_prefix,
)
from kebench.scoring.metrics import exact_match, token_f1

CONTEXTS = ("prompt", "question", "instruction", "chat")


@dataclass(frozen=True)
class GenerationSettings:
    """How a probe's answer is generated (the module docstring)."""

    context: str = "prompt"
    instruction: str = "Answer the question briefly.\nQuestion: {question}\nAnswer:"
    stop_strings: tuple[str, ...] = ("\n", ".")
    max_new_tokens: int = 50
    batch_size: int = 16

    def __post_init__(self) -> None:
        if self.context not in CONTEXTS:
            raise ValueError(
                f"generation context {self.context!r}: use one of {CONTEXTS}"
            )
        if self.context == "instruction" and "{question}" not in self.instruction:
            raise ValueError(
                f"generation instruction {self.instruction!r} has no {{question}}"
            )
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class Generation:
    """One generated answer: ``text`` up to its stop (without it), ``raw`` all that
    was generated, why it ended (``GENERATION_STOPS``) and how many tokens it took."""

    text: str
    raw: str
    stop: str
    n_tokens: int
    # every token generated, past the stop where the decode went on (``at_least``)
    tokens: tuple[int, ...] = ()


def model_input(lm: LoadedModel, text: str, settings: GenerationSettings) -> str:
    """What the model is given for ``text``: the probe's prompt (context ``prompt``)
    or its question (the others)."""
    if settings.context == "instruction":
        return settings.instruction.format(question=text)
    if settings.context == "chat":
        if not getattr(lm.tokenizer, "chat_template", None):
            raise ValueError(
                f"model {lm.name!r} has no chat template: use generation context "
                "'prompt', 'question' or 'instruction'"
            )
        return lm.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            add_generation_prompt=True,
            tokenize=False,
        )
    return text


def _answer(
    tokens: list[int], tokenizer: object, settings: GenerationSettings
) -> Generation:
    """The answer in one row of generated tokens (what follows an end of sequence,
    the batch's padding, dropped)."""
    eos = tokenizer.eos_token_id
    ended = eos in tokens
    kept = tokens[: tokens.index(eos)] if ended else list(tokens)
    while kept and kept[-1] == tokenizer.pad_token_id:  # a row done before the others
        kept.pop()
    raw = tokenizer.decode(kept, skip_special_tokens=True)
    cuts = [raw.find(stop) for stop in settings.stop_strings if stop and stop in raw]
    if cuts:
        return Generation(raw[: min(cuts)].strip(), raw, "stop_string", len(kept))
    # generation ends at the end of sequence, a stop string or the cap: neither of
    # the first two here means the cap cut it
    return Generation(raw.strip(), raw, "eos" if ended else "cap", len(kept))


def first_tokens_text(generation: Generation, n: int, tokenizer: object) -> str:
    """What a greedy decode capped at ``n`` tokens, without stop strings, would have
    generated: the first ``n`` of ``generation.tokens`` (made with ``at_least >= n``)."""
    uncut = GenerationSettings(stop_strings=(), max_new_tokens=n)
    return _answer(list(generation.tokens[:n]), tokenizer, uncut).raw


@contextmanager
def _first_logits(model: torch.nn.Module) -> Iterator[list[torch.Tensor]]:
    """Meanwhile, the logits at the last position of ``model``'s first forward call
    (a generation's prefill), in the list it yields."""
    first: list[torch.Tensor] = []

    def keep(_module, _args, output) -> None:
        if not first:
            first.append(output.logits[:, -1])

    handle = model.register_forward_hook(keep)
    try:
        yield first
    finally:
        handle.remove()


class _StopAfter(StoppingCriteria):
    """Ends a row at its first stop string, or at ``cap`` new tokens, once it has also
    generated ``at_least[row]`` tokens; keeps where each row's stop string ended
    (``stopped_at``, -1 for none), so the answer it would have stopped at is known."""

    def __init__(  # noqa: PLR0913 - one decode's stops
        self,
        tokenizer: object,
        stop_strings: Sequence[str],
        width: int,
        cap: int,
        at_least: torch.Tensor,
    ) -> None:
        self._strings = (
            StopStringCriteria(tokenizer=tokenizer, stop_strings=list(stop_strings))
            if stop_strings
            else None
        )
        self._width, self._cap, self._at_least = width, cap, at_least
        self.stopped_at = torch.full_like(at_least, -1)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        n = input_ids.shape[1] - self._width
        if self._strings is not None and n <= self._cap:
            hit = self._strings(input_ids, scores).cpu() & (self.stopped_at < 0)
            self.stopped_at[hit] = n
        done = (self.stopped_at >= 0) | (n >= self._cap)
        return (done & (n >= self._at_least)).to(input_ids.device)


@torch.no_grad()
def generate_answers(  # noqa: PLR0913 - what one decode also serves is keyword-only
    lm: LoadedModel,
    texts: Sequence[str],
    settings: GenerationSettings,
    prefix: str = "",
    *,
    at_least: Sequence[int] | None = None,
    on_prompt_pass: Callable[[PromptPass], None] | None = None,
) -> list[Generation]:
    """Greedy answers to ``texts`` (``model_input``'s), each after ``prefix`` (an
    in-context edit's demonstrations) and in the configured context.

    ``at_least``: per text, how many tokens its decode goes on for past its stop
    string (EOS still ends it), so that one decode also serves a shorter protocol of
    the same greedy answer (``first_tokens_text``). Each answer is the one it stops at
    without it; its ``tokens`` hold all that was generated.

    ``on_prompt_pass``: given each batch's prefill (``PromptPass``: the inputs' ids,
    prefix included, their KV cache and the log-probs after them), so that teacher
    forcing of the same prompts continues from it instead of running them again.
    """
    tokenizer = lm.tokenizer
    # the chat template already holds the special tokens
    special = settings.context != "chat"
    inputs = [
        tuple(
            tokenizer(
                prefix + model_input(lm, text, settings), add_special_tokens=special
            )["input_ids"]
        )
        for text in texts
    ]
    # an input asked more than once (a locality prompt several cases share) is
    # answered once
    distinct = list(dict.fromkeys(inputs))
    rows = [list(row) for row in distinct]
    longest = dict.fromkeys(distinct, 0)
    for row, n in zip(inputs, at_least or [0] * len(inputs), strict=True):
        longest[row] = max(longest[row], n)
    cached = shared_prefix(lm.model, tokenizer, prefix, rows, special)
    skip = len(cached) if cached is not None else 0
    answers: dict[tuple[int, ...], Generation] = {}
    for batch in length_batches([len(r) for r in rows], settings.batch_size):
        tails = [rows[i][skip:] for i in batch]
        ids, mask, positions, _ = pad_batch(tails, padding_id(tokenizer), "left")
        # generate() takes the positions from the mask, and its input ids whole
        mask, _, extra = with_prefix(cached, mask, positions)
        if cached is not None:
            # the prefix, then each row's padding and text
            ids = torch.cat([torch.tensor([cached.ids] * len(batch)), ids], dim=1)
        device = lm.model.device
        width = ids.shape[1]
        # one criterion for the stop strings and the rows that go on past them
        going_on = torch.tensor([longest[distinct[i]] for i in batch])
        stops = _StopAfter(
            tokenizer, settings.stop_strings, width, settings.max_new_tokens, going_on
        )
        keep = on_prompt_pass is not None  # the prefill's cache and logits
        with _first_logits(lm.model) if keep else nullcontext([]) as prefill:
            output = lm.model.generate(
                input_ids=ids.to(device),
                attention_mask=mask.to(device),
                max_new_tokens=max(settings.max_new_tokens, int(going_on.max())),
                do_sample=False,
                stopping_criteria=StoppingCriteriaList([stops]),
                pad_token_id=tokenizer.pad_token_id,
                return_dict_in_generate=keep,
                **extra,
            )
        generated = output.sequences if keep else output
        if keep:
            cache = output.cache
            cache.crop(-(cache.get_seq_length() - mask.shape[1]))
            on_prompt_pass(
                PromptPass(
                    rows=tuple(distinct[i] for i in batch),
                    cache=cache,
                    mask=mask,
                    first_logprobs=torch.log_softmax(prefill[0].float(), dim=-1),
                )
            )
        for index, row, stopped_at in zip(
            batch, generated, stops.stopped_at.tolist(), strict=True
        ):
            tokens = row[width:].tolist()
            end = stopped_at if stopped_at >= 0 else settings.max_new_tokens
            answer = _answer(tokens[:end], tokenizer, settings)
            answers[distinct[index]] = replace(answer, tokens=tuple(tokens))
    return [answers[row] for row in inputs]


def wild_match(text: str, answer: str, aliases: Sequence[str] = ()) -> float:
    """``wild``: 1 when the generated answer is the answer or one of its aliases,
    after SQuAD normalisation."""
    return max(exact_match(text, gold) for gold in (answer, *aliases))


def bke_f1(text: str, answer: str) -> float:
    """``bke_f1``: SQuAD token F1 of the generated answer against the answer."""
    return token_f1(text, answer)


def alias_list(value: object) -> list[str]:
    """A probe's ``aliases_*`` cell as a list ([] where it has none)."""
    return json.loads(value) if isinstance(value, str) else []


def wild_scores(
    probes: pd.DataFrame, base_texts: pd.Series, edit_texts: pd.Series
) -> pd.DataFrame:
    """``wild_em`` and ``bke_f1`` of each probe's edited answer (NaN where it has none).

    A probe is right when the edited model's answer is its new answer or an alias
    (``wild_match``; F1 against the new answer). A locality probe asks whether the
    edit left the answer alone: the edited model's answer against the base model's.
    All three are indexed alike.
    """
    rows = []
    for probe, base, edit in zip(
        probes.to_dict("records"), base_texts, edit_texts, strict=True
    ):
        if not isinstance(edit, str):
            rows.append((float("nan"), float("nan")))
        elif probe["probe_type"] in UNCHANGED_TYPES:
            kept = base if isinstance(base, str) else ""
            rows.append((exact_match(edit, kept), token_f1(edit, kept)))
        else:
            answer = probe["answer_new"]
            aliases = alias_list(probe.get("aliases_new"))
            rows.append((wild_match(edit, answer, aliases), bke_f1(edit, answer)))
    return pd.DataFrame(rows, index=probes.index, columns=["wild_em", "bke_f1"])


def generation_table(probe_scores: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """``generations``: every edited (and unedited) model's free answer per probe, with
    the probe's prompt and question and the answer expected of it."""
    done = probe_scores.dropna(subset=["edit_wild_text"])
    asked = probes.set_index("probe_id")[["prompt", "question", "answer_new"]]
    table = done.join(asked, on="probe_id")
    local = table["probe_type"].isin(list(UNCHANGED_TYPES))
    table = table.assign(
        expected=table["answer_new"].where(~local, table["base_wild_text"]),
        generation=table["edit_wild_text"],
        stop=table["edit_wild_stop"],
        n_tokens=table["edit_wild_tokens"].astype(int),
    )
    return GENERATIONS.validate(table[list(GENERATIONS.columns)].reset_index(drop=True))
