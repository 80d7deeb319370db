"""MeLLo (Zhong et al., EMNLP 2023): edits kept as sentences in a memory.

No weight changes. An edit's delta is its new fact as MQuAKE writes it into MeLLo's
memory: the filled-in prompt, one space, the new answer (``The capital of France is
Lyon``). A batch's delta holds every edit's sentence; deltas applied together pool their
memories. The scorer answers each probe's question in MeLLo's steps against that memory
(``kebench.scoring.mello``), with the settings (``MelloSettings``) stored in the delta's
``meta["mello"]``: the retriever, and the generations a question gets.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from kebench.editing.delta import Delta
from kebench.editing.interface import EditContext, HyperParams
from kebench.editing.methods.ike import fact
from kebench.editing.registry import register
from kebench.editing.requests import EditRequest
from kebench.models.loading import LoadedModel

# where a memory delta keeps the settings its answers are generated with
MELLO_META = "mello"
RETRIEVERS = ("bm25", "sentence_transformers")


@dataclass(frozen=True)
class MelloSettings:
    """How MeLLo answers (``kebench.scoring.mello``): the retriever, and how many
    generations of at most ``max_new_tokens`` tokens a question gets. The method
    stores them in its delta, the scorer reads them back."""

    retriever: str = "bm25"
    retriever_model: str | None = None
    max_hops: int = 4
    max_new_tokens: int = 64

    def __post_init__(self) -> None:
        if self.retriever not in RETRIEVERS:
            raise ValueError(
                f"MeLLo retriever {self.retriever!r}: use one of {RETRIEVERS}"
            )
        if self.retriever == "sentence_transformers" and not self.retriever_model:
            raise ValueError(
                "MeLLo retriever sentence_transformers needs retriever_model (a "
                "sentence-transformers model name or folder)"
            )
        if self.max_hops < 1 or self.max_new_tokens < 1:
            raise ValueError(
                f"MeLLo needs max_hops and max_new_tokens >= 1, got {self.max_hops} "
                f"and {self.max_new_tokens}"
            )

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> MelloSettings:
        return cls(**json.loads(text))


@dataclass
class MeLLoHyperParams(HyperParams):
    """MeLLo's settings (``MelloSettings``): ``retriever`` ``bm25`` or
    ``sentence_transformers`` with ``retriever_model``; ``max_hops`` generations of at
    most ``max_new_tokens`` tokens per question."""

    retriever: str = "bm25"
    retriever_model: str | None = None
    max_hops: int = 4
    max_new_tokens: int = 64

    def settings(self) -> MelloSettings:
        # the same fields: the hparams are the scorer's settings as a YAML file holds them
        return MelloSettings(**asdict(self))


@register("MeLLo", MeLLoHyperParams, batchable=True)
def mello(
    lm: LoadedModel,
    requests: list[EditRequest],
    hparams: MeLLoHyperParams,
    context: EditContext,
) -> Delta:
    """The memory of ``requests``' new facts; no weight changes."""
    settings = hparams.settings()  # refuses bad settings before any edit is stored
    return Delta(
        memory=[fact(r.text, r.target_new) for r in requests],
        meta={MELLO_META: settings.to_json()},
    )
