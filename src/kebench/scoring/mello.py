"""MeLLo (Zhong et al., EMNLP 2023): a question answered against a memory of edits.

The edits are not written into the weights: each is a sentence in a memory (``Delta.
memory``). The model answers a question in steps, each a line of its own:

    Question: <the question>
    Subquestion: <the next single-hop question>
    Tentative answer: <what the model believes>
    Retrieved fact: <the memory's sentence nearest the subquestion>
    The retrieved fact (does not contradict|contradicts) the tentative answer, so the
    answer to the subquestion is: <answer>
    ... more subquestions ...
    Final answer: <answer>

kebench writes the ``Retrieved fact`` line: the model generates until it would write
one itself (or until a blank line), the subquestion it wrote last is sent to the
retriever, and the memory's best sentence is appended. It has ``max_hops``
generations to reach a final answer, as MQuAKE's loop has four. The few-shot
demonstrations before the question are kebench's own text, in the format of MQuAKE's
prompt (its entities and sentences are not reused).

Retrievers: BM25 (Okapi, ``rank_bm25``) over lower-cased word tokens, offline; or any
sentence-transformers model (``retriever: sentence_transformers``, ``retriever_model``:
its name or folder), by cosine similarity of mean-pooled embeddings, as MQuAKE's
Contriever. Ties go to the earlier sentence.

Protocols (docs/evaluation.md):
    mello: the final answer, by generation, against the probe's answer and its aliases
        after SQuAD normalisation (MQuAKE compares the raw strings; the normalisation
        is kebench's for every generated answer); a run with no final answer is wrong.
    prob, argmax, token (teacher-forced): the probe's answers scored after the run's
        transcript, cut just after ``Final answer:``; a run that stopped without one is
        given the line, so that every probe has a teacher-forced score.

Deliberate differences from MQuAKE's notebook, documented in docs/editing.md: a blank
line also stops a generation (MQuAKE's API model stopped on its own), and a final
answer is read from any line of a generation, not only its last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kebench.editing.methods.mello import MelloSettings
from kebench.models.loading import LoadedModel
from kebench.scoring.generation import GenerationSettings, generate_answers

QUESTION = "Question: "
SUBQUESTION = "Subquestion: "
RETRIEVED = "Retrieved fact: "
FINAL = "Final answer:"
# a generation stops where the model would retrieve a fact itself, or at a blank line
STOPS = (RETRIEVED.strip(), "\n\n")

DEMONSTRATIONS = """\
Question: In which city was the composer of the opera Aurelia Nights born?
Subquestion: Who composed the opera Aurelia Nights?
Tentative answer: The opera Aurelia Nights was composed by Tomas Wren.
Retrieved fact: The opera Aurelia Nights was composed by Ilse Marrow.
The retrieved fact contradicts the tentative answer, so the answer to the \
subquestion is: Ilse Marrow
Subquestion: In which city was Ilse Marrow born?
Tentative answer: Ilse Marrow was born in Vienna.
Retrieved fact: The painter Oskar Lind was born in Bergen.
The retrieved fact does not contradict the tentative answer, so the answer to the \
subquestion is: Vienna
Final answer: Vienna

Question: What is the official language of the country where the Kestrel Dam stands?
Subquestion: In which country does the Kestrel Dam stand?
Tentative answer: The Kestrel Dam stands in Canada.
Retrieved fact: The Kestrel Dam is located in the country of Chile.
The retrieved fact contradicts the tentative answer, so the answer to the \
subquestion is: Chile
Subquestion: What is the official language of Chile?
Tentative answer: The official language of Chile is Spanish.
Retrieved fact: The official language of Norway is Portuguese.
The retrieved fact does not contradict the tentative answer, so the answer to the \
subquestion is: Spanish
Final answer: Spanish

Question: Who leads the club whose home ground is Harrow Park?
Subquestion: Which club has Harrow Park as its home ground?
Tentative answer: Harrow Park is the home ground of Millbrook Rovers.
Retrieved fact: The home ground of Millbrook Rovers is Harrow Park.
The retrieved fact does not contradict the tentative answer, so the answer to the \
subquestion is: Millbrook Rovers
Subquestion: Who leads Millbrook Rovers?
Tentative answer: Millbrook Rovers is led by Dana Holt.
Retrieved fact: The head of Millbrook Rovers is Priya Nair.
The retrieved fact contradicts the tentative answer, so the answer to the \
subquestion is: Priya Nair
Final answer: Priya Nair

"""


def words(text: str) -> list[str]:
    """BM25's tokens: lower-cased word characters."""
    return re.findall(r"\w+", text.lower())


class Retriever:
    """The memory sentence nearest each query (``MelloSettings.retriever``)."""

    def __init__(self, memory: Sequence[str], settings: MelloSettings) -> None:
        if not memory:
            raise ValueError("MeLLo's memory is empty: there is nothing to retrieve")
        self.memory = list(memory)
        if settings.retriever == "bm25":
            # rank_bm25 is the maintained Okapi BM25 (k1 1.5, b 0.75)
            from rank_bm25 import BM25Okapi  # noqa: PLC0415 - only MeLLo needs it

            self._bm25 = BM25Okapi([words(m) for m in self.memory])
            self._encoder = None
        else:
            try:
                from sentence_transformers import (  # noqa: PLC0415 - optional
                    SentenceTransformer,
                )
            except ImportError as err:
                raise ValueError(
                    "MeLLo retriever sentence_transformers needs the package: pip "
                    "install 'kebench[dense]'"
                ) from err
            self._encoder = SentenceTransformer(
                settings.retriever_model, trust_remote_code=False
            )
            self._embeddings = self._encoder.encode(
                self.memory, convert_to_numpy=True, normalize_embeddings=True
            )

    def nearest(self, queries: Sequence[str]) -> list[str]:
        """The best sentence for each query (the earlier one on a tie)."""
        if not queries:
            return []
        if self._encoder is None:
            scores = np.stack([self._bm25.get_scores(words(q)) for q in queries])
        else:
            encoded = self._encoder.encode(
                list(queries), convert_to_numpy=True, normalize_embeddings=True
            )
            scores = encoded @ self._embeddings.T
        return [self.memory[int(i)] for i in scores.argmax(axis=1)]


@dataclass(frozen=True)
class MelloRun:
    """One question's run: its transcript (after the demonstrations, up to and with
    ``Final answer:``), the final answer it generated (None if it reached none), how
    many generations it took, and how it ended (``final_answer``, ``no_subquestion``:
    a generation with neither a final answer nor a subquestion to retrieve for, or
    ``max_hops``)."""

    transcript: str
    answer: str | None
    hops: int
    end: str
    retrieved: tuple[str, ...] = ()


@dataclass(frozen=True)
class Step:
    """What one generation says: its text up to its stop, and the final answer or the
    subquestion to retrieve for (both None: the run cannot go on)."""

    body: str
    answer: str | None = None
    subquestion: str | None = None


def read_step(generated: str) -> Step:
    """Parse one generation (its raw text): cut at the first stop; a ``Final answer:``
    line ends the run (its text before it kept), else the last ``Subquestion:`` line
    is retrieved for when the generation stopped to retrieve."""
    cuts = {stop: generated.find(stop) for stop in STOPS if stop in generated}
    first = min(cuts, key=cuts.get) if cuts else None
    body = generated[: cuts[first]] if first else generated
    lines = body.split("\n")
    for index, line in enumerate(lines):
        if line.strip().startswith(FINAL):
            kept = "\n".join(lines[:index])
            answer = line.strip()[len(FINAL) :].strip()
            return Step(kept + "\n" if kept else "", answer=answer)
    if first == STOPS[0]:
        asked = [
            line.strip()[len(SUBQUESTION) :].strip()
            for line in lines
            if line.strip().startswith(SUBQUESTION)
        ]
        if asked and asked[-1]:
            return Step(body, subquestion=asked[-1])
    return Step(body)


def retrieval_lines(step: Step, fact: str) -> str:
    """What a run's text gains from a step that asked a subquestion: the step's own
    lines, then the retrieved fact's line (one full stop, as MQuAKE appends one)."""
    return f"{step.body.rstrip()}\n{RETRIEVED}{fact.rstrip('.')}.\n"


def answer_questions(
    lm: LoadedModel,
    questions: Sequence[str],
    memory: Sequence[str],
    settings: MelloSettings,
    batch_size: int = 16,
) -> list[MelloRun]:
    """MeLLo's run for each question against ``memory``, the questions batched."""
    retriever = Retriever(memory, settings)
    # MQuAKE's run reads every character of a step, its stops wherever they fall
    generation = GenerationSettings(
        stop_strings=STOPS,
        sentence_end=False,
        answer_first=False,
        max_new_tokens=settings.max_new_tokens,
        batch_size=batch_size,
    )
    texts = [f"{QUESTION}{q.strip()}\n" for q in questions]
    retrieved: list[list[str]] = [[] for _ in questions]
    runs: dict[int, MelloRun] = {}
    active = list(range(len(questions)))
    for hop in range(1, settings.max_hops + 1):
        # Each hop runs its transcript again, without the last hop's KV cache: the
        # retrieved fact is text appended to it, and re-tokenised with it (a token can
        # merge across the join), so the cached tokens are not in general the new
        # text's first tokens. The demonstrations, most of the tokens, run once per
        # model state (PrefixCache.of keeps them); the question and earlier hops, a
        # few dozen tokens each, run again.
        generated = generate_answers(
            lm, [texts[i] for i in active], generation, DEMONSTRATIONS
        )
        steps = {i: read_step(g.raw) for i, g in zip(active, generated, strict=True)}
        asking = [i for i in active if steps[i].subquestion is not None]
        facts = retriever.nearest([steps[i].subquestion for i in asking])
        for i, fact in zip(asking, facts, strict=True):
            texts[i] += retrieval_lines(steps[i], fact)
            retrieved[i].append(fact)
        for i in active:
            step = steps[i]
            if step.subquestion is not None:
                continue
            if step.answer is not None:
                transcript, end = texts[i] + step.body + FINAL, "final_answer"
            else:
                body = step.body.rstrip()
                transcript = texts[i] + (body + "\n" if body else "") + FINAL
                end = "no_subquestion"
            runs[i] = MelloRun(transcript, step.answer, hop, end, tuple(retrieved[i]))
        active = asking
        if not active:
            break
    for i in active:
        runs[i] = MelloRun(
            texts[i] + FINAL, None, settings.max_hops, "max_hops", tuple(retrieved[i])
        )
    return [runs[i] for i in range(len(questions))]
