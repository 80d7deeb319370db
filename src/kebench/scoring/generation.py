"""Free generation of a probe's answer, and its scores (protocols ``wild``,
``wild_strict``, ``bke_f1``).

"The Mirage of Model Editing" (Yang et al., ACL 2025) evaluates an edited model the
way it is used: it must *generate* the answer. kebench's version:

- **Context**: a probe is asked the way a person would ask it (``asked_prompts``). A
  cloze ("The capital of France is") is a plain continuation. A question is the user
  turn of the model's chat template (``chat_template``) when the model has one, and
  the probe's plain QA prompt (``qa_prompt``) otherwise or when ``question_context``
  is ``prompt``. Teacher forcing scores the very same text, so ``prob`` and ``wild``
  differ only in how the answer is read. The context is stored with each generation.
- **Greedy decoding** in left-padded batches with the KV cache, until the model's end
  of sequence, a stop string or the end of the reply's first sentence once the answer
  has started (leading whitespace and newlines are no answer), or ``max_new_tokens``.
  An answer cut by the cap is flagged (``stop == "cap"``): it never stopped on its
  own. An empty reply is counted and reported, never silently scored.
- **Scores**: ``wild`` reads the reply as a grader would (``kebench.scoring.answers``);
  ``wild_strict`` is SQuAD-normalised exact match of the reply cut at the first of
  ``strict_cut`` (a newline or a full stop, as the paper's repository cuts), against
  the answer or an alias; ``bke_f1`` is SQuAD token F1 of that cut against the answer
  alone, as the paper's repository reports it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace

import pandas as pd
import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from kebench.models.loading import LoadedModel
from kebench.models.logprobs import (
    PromptPass,
    encode_text,
    length_batches,
    pad_batch,
    padding_id,
    shared_prefix,
    with_prefix,
)
from kebench.schemas import ASK_CONTEXTS, GENERATIONS, UNCHANGED_TYPES
from kebench.scoring.answers import (
    SHORT_FORMS,
    strict_match,
    unchanged_answer,
    wild_match,
)
from kebench.scoring.metrics import token_f1

# How a question-form probe is asked: through the model's chat template where it has
# one (``chat``), or always as its plain QA prompt (``prompt``).
QUESTION_CONTEXTS = ("chat", "prompt")
# The context a probe was asked in, as stored with its scores and generation.
CONTINUATION, CHAT_TEMPLATE, QA_PROMPT = ASK_CONTEXTS


@dataclass(frozen=True)
class GenerationSettings:
    """How an answer is decoded (the module docstring).

    ``stop_strings`` end a decode, and ``sentence_end`` also ends it at the end of the
    reply's first sentence; with ``answer_first`` neither counts before the answer has
    started (its first non-space character). MeLLo's steps, which read every
    character, turn both off."""

    stop_strings: tuple[str, ...] = ("\n",)
    sentence_end: bool = True
    answer_first: bool = True
    max_new_tokens: int = 50
    batch_size: int = 16

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(frozen=True)
class Generation:
    """One generated answer: ``text`` from its start to its stop (without it),
    ``raw`` all that was generated, why it ended (``GENERATION_STOPS``) and how many
    tokens it took."""

    text: str
    raw: str
    stop: str
    n_tokens: int
    # every token generated, past the stop where the decode went on (``at_least``)
    tokens: tuple[int, ...] = ()


def chat_prompt(tokenizer: object, question: str) -> str:
    """``question`` as the user turn of the tokenizer's chat template, ready for the
    assistant's reply. The template's own BOS is dropped where the tokenizer adds
    one itself, so that the text tokenises to the template's tokens."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}],
        add_generation_prompt=True,
        tokenize=False,
    )
    bos = tokenizer.bos_token
    if bos and text.startswith(bos) and adds_bos(tokenizer):
        text = text[len(bos) :]
    return text


def adds_bos(tokenizer: object) -> bool:
    """Whether the tokenizer puts its BOS token before a text it encodes."""
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("a")["input_ids"][:1] == [bos]


def has_chat_template(lm: LoadedModel) -> bool:
    return bool(getattr(lm.tokenizer, "chat_template", None))


def asked_prompts(
    lm: LoadedModel, probes: pd.DataFrame, question_context: str = "chat"
) -> tuple[list[str], list[str]]:
    """Each probe's text as the model is asked it, and the name of that context.

    A ``cloze`` probe's prompt is continued as it is; a ``question`` probe goes
    through the chat template (``question_context`` ``chat`` and a model that has
    one), else it is its plain QA prompt."""
    if question_context not in QUESTION_CONTEXTS:
        raise ValueError(
            f"question_context {question_context!r}: use one of {QUESTION_CONTEXTS}"
        )
    chat = question_context == "chat" and has_chat_template(lm)
    texts, contexts = [], []
    for prompt, question, form in zip(
        probes["prompt"], probes["question"], probes["form"], strict=True
    ):
        if form != "question":
            texts.append(prompt)
            contexts.append(CONTINUATION)
        elif chat and isinstance(question, str):
            texts.append(chat_prompt(lm.tokenizer, question))
            contexts.append(CHAT_TEMPLATE)
        else:
            texts.append(prompt)
            contexts.append(QA_PROMPT)
    return texts, contexts


# A full stop ends a sentence unless it ends an initial ("D.C.", "J. K.") or one of
# these abbreviations ("St. Louis"): the reader's short forms, and more that a reply
# may go on after
_ABBREVIATED = SHORT_FORMS | frozenset(
    "no vs etc rep rev lt col capt sgt ave blvd rd bros".split()
)
# the shortest word a full stop at the end of a text can end a sentence after
MIN_WORD = 2
_END_MARK = re.compile(r"[.!?](?=\s|$)")
_LAST_WORD = re.compile(r"([^\W_]+)\W*$")


def sentence_end(text: str) -> int | None:
    """Where the first sentence of ``text`` ends (the index of its final mark), or
    None while it has not ended. A full stop at the very end of the text ends it only
    after a word of two or more letters (a number may go on: "3.5")."""
    for match in _END_MARK.finditer(text):
        at = match.start()
        if text[at] != ".":
            return at
        word = _LAST_WORD.search(text[:at])
        word = word.group(1) if word else ""
        if len(word) < MIN_WORD or word.lower() in _ABBREVIATED:
            continue
        if at + 1 == len(text) and not word.isalpha():
            continue
        return at
    return None


def answer_end(text: str, settings: GenerationSettings) -> tuple[int, int, str] | None:
    """Where the answer in ``text`` starts, where it ends and why (``stop_string``,
    ``sentence_end``), or None while it goes on."""
    start = len(text) - len(text.lstrip()) if settings.answer_first else 0
    if settings.answer_first and start == len(text):
        return None
    body = text[start:]
    ends = [
        (body.find(s), "stop_string") for s in settings.stop_strings if s and s in body
    ]
    if settings.sentence_end:
        at = sentence_end(body)
        if at is not None:
            ends.append((at + 1, "sentence_end"))
    if not ends:
        return None
    at, why = min(ends)
    return start, start + at, why


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
    end = answer_end(raw, settings)
    if end is not None:
        start, stop, why = end
        return Generation(raw[start:stop].strip(), raw, why, len(kept))
    # generation ends at the end of sequence, a stop or the cap: neither of the
    # first two here means the cap cut it
    return Generation(raw.strip(), raw, "eos" if ended else "cap", len(kept))


def first_tokens_text(generation: Generation, n: int, tokenizer: object) -> str:
    """What a greedy decode capped at ``n`` tokens, without stop strings, would have
    generated: the first ``n`` of ``generation.tokens`` (made with ``at_least >= n``)."""
    uncut = GenerationSettings(stop_strings=(), sentence_end=False, max_new_tokens=n)
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
    """Ends a row where its answer ends (``answer_end``: a stop string or a sentence
    end once the answer has started), or at ``settings.max_new_tokens`` new tokens,
    once it has also generated ``at_least[row]`` tokens; keeps where each row's answer
    ended (``stopped_at``, -1 for none), so the answer it would have stopped at is
    known. A row's text is decoded again at each step: a stop is a property of the
    text (a newline inside a token, an answer that has not started), and rows are few
    and short."""

    def __init__(
        self,
        tokenizer: object,
        settings: GenerationSettings,
        width: int,
        at_least: torch.Tensor,
    ) -> None:
        self._tokenizer, self._settings = tokenizer, settings
        self._width, self._at_least = width, at_least
        self.stopped_at = torch.full_like(at_least, -1)

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        n = input_ids.shape[1] - self._width
        cap = self._settings.max_new_tokens
        if n <= cap:
            open_rows = (self.stopped_at < 0).nonzero().flatten().tolist()
            texts = self._tokenizer.batch_decode(
                input_ids[open_rows, self._width :], skip_special_tokens=True
            )
            for row, text in zip(open_rows, texts, strict=True):
                if answer_end(text, self._settings) is not None:
                    self.stopped_at[row] = n
        done = (self.stopped_at >= 0) | (n >= cap)
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
    """Greedy answers to ``texts`` (as the model is asked them: ``asked_prompts``),
    each after ``prefix`` (an in-context edit's demonstrations).

    ``at_least``: per text, how many tokens its decode goes on for past its stop
    string (EOS still ends it), so that one decode also serves a shorter protocol of
    the same greedy answer (``first_tokens_text``). Each answer is the one it stops at
    without it; its ``tokens`` hold all that was generated.

    ``on_prompt_pass``: given each batch's prefill (``PromptPass``: the inputs' ids,
    prefix included, their KV cache and the log-probs after them), so that teacher
    forcing of the same prompts continues from it instead of running them again.
    """
    tokenizer = lm.tokenizer
    # the tokens teacher forcing reads for the same text (``encode_text``)
    inputs = [tuple(encode_text(tokenizer, prefix + text)) for text in texts]
    # an input asked more than once (a locality prompt several cases share) is
    # answered once
    distinct = list(dict.fromkeys(inputs))
    rows = [list(row) for row in distinct]
    longest = dict.fromkeys(distinct, 0)
    for row, n in zip(inputs, at_least or [0] * len(inputs), strict=True):
        longest[row] = max(longest[row], n)
    cached = shared_prefix(lm.model, tokenizer, prefix, rows)
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
        stops = _StopAfter(tokenizer, settings, width, going_on)
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


def strict_text(reply: str, cut: Sequence[str]) -> str:
    """The reply up to the first of ``cut`` (``wild_strict``'s and ``bke_f1``'s answer,
    as the paper's repository cuts a generation at a newline or a full stop)."""
    ends = [reply.find(c) for c in cut if c and c in reply]
    return (reply[: min(ends)] if ends else reply).strip()


def bke_f1(text: str, answer: str) -> float:
    """``bke_f1``: SQuAD token F1 of the generated answer against the answer."""
    return token_f1(text, answer)


def alias_list(value: object) -> list[str]:
    """A probe's ``aliases_*`` cell as a list ([] where it has none)."""
    return json.loads(value) if isinstance(value, str) else []


def asked_question(probe: dict) -> str:
    """What a reply to ``probe`` may restate: its question when it is asked one, its
    cloze otherwise."""
    question = probe.get("question")
    if probe.get("form") == "question" and isinstance(question, str):
        return question
    return probe["prompt"]


WILD_COLUMNS = ["wild_em", "wild_strict", "bke_f1", "wild_kg"]


def wild_scores(
    probes: pd.DataFrame,
    base_texts: pd.Series,
    edit_texts: pd.Series,
    strict_cut: Sequence[str] = ("\n", "."),
) -> pd.DataFrame:
    """The free-generation scores of each probe's edited reply (NaN where it has
    none); all three inputs are indexed alike.

    A probe that states a new answer is right when the reply gives it or an alias:
    ``wild`` as a grader reads it (``wild_match``), ``wild_strict`` by exact match of
    the reply's ``strict_cut`` (``bke_f1``: token F1 of that cut). A control probe
    (locality, relation specificity) asks whether the edit left the answer alone:
    ``wild`` whether the edited reply gives the base model's answer
    (``unchanged_answer``), ``wild_strict`` and ``bke_f1`` compare the two cuts, all
    three NaN where the base model gave no answer; ``wild_kg``, on the controls whose
    KG answer the base model gives, whether the edited model still gives it.
    """
    rows = []
    for probe, base, edit in zip(
        probes.to_dict("records"), base_texts, edit_texts, strict=True
    ):
        asked = asked_question(probe)
        if not isinstance(edit, str):
            rows.append((float("nan"),) * len(WILD_COLUMNS))
        elif probe["probe_type"] in UNCHANGED_TYPES:
            rows.append(_control_scores(probe, base, edit, asked, strict_cut))
        else:
            answer = probe["answer_new"]
            aliases = alias_list(probe.get("aliases_new"))
            cut = strict_text(edit, strict_cut)
            rows.append(
                (
                    wild_match(edit, answer, aliases, asked),
                    strict_match(cut, answer, aliases),
                    bke_f1(cut, answer),
                    float("nan"),
                )
            )
    return pd.DataFrame(rows, index=probes.index, columns=WILD_COLUMNS)


def _control_scores(
    probe: dict, base: object, edit: str, asked: str, strict_cut: Sequence[str]
) -> tuple[float, float, float, float]:
    """``WILD_COLUMNS`` of a control probe (``wild_scores``)."""
    answer, aliases = probe["answer_old"], alias_list(probe.get("aliases_old"))
    if not isinstance(base, str) or not base.strip():
        return (float("nan"),) * len(WILD_COLUMNS)
    base_cut, edit_cut = strict_text(base, strict_cut), strict_text(edit, strict_cut)
    known = isinstance(answer, str) and wild_match(base, answer, aliases, asked)
    return (
        unchanged_answer(base, edit, answer, aliases, asked),
        strict_match(edit_cut, base_cut) if base_cut else float("nan"),
        bke_f1(edit_cut, base_cut) if base_cut else float("nan"),
        wild_match(edit, answer, aliases, asked) if known else float("nan"),
    )


def generation_table(probe_scores: pd.DataFrame, probes: pd.DataFrame) -> pd.DataFrame:
    """``generations``: every edited (and unedited) model's free answer per probe, with
    the probe's prompt and question, the context it was asked in and the answer
    expected of it (a control's: the base model's reply)."""
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
