"""What an edited model is asked after, for edits that change no weights.

An in-context edit (IKE) puts a text prefix before every prompt; a memory-based edit
(MeLLo) answers each question in steps against a memory of edited facts
(``kebench.scoring.mello``). Several deltas applied together give one context: their
prefixes joined (``joint_prefix``), their memories pooled in order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kebench.editing.delta import Delta
from kebench.editing.methods.ike import joint_prefix
from kebench.editing.methods.mello import MELLO_META, MelloSettings


@dataclass(frozen=True)
class PromptContext:
    """An in-context ``prefix``, or a ``memory`` MeLLo answers from with ``mello``."""

    prefix: str = ""
    memory: tuple[str, ...] = ()
    mello: MelloSettings | None = None


NO_CONTEXT = PromptContext()


def prompt_context(deltas: Sequence[Delta]) -> PromptContext:
    """The one context of ``deltas`` applied together.

    A prefix and a memory cannot be combined (one edit's demonstrations would precede
    another's steps), nor can memories generated with different settings.
    """
    prefix = joint_prefix(deltas)
    remembering = [d for d in deltas if d.memory]
    if not remembering:
        return PromptContext(prefix=prefix)
    if prefix:
        raise ValueError(
            "an in-context prefix and a MeLLo memory cannot be applied together: "
            f"{[d.label() for d in deltas if d.prefix][:3]} with "
            f"{[d.label() for d in remembering][:3]}"
        )
    settings = {d.meta.get(MELLO_META) for d in remembering}
    if len(settings) != 1 or None in settings:
        raise ValueError(
            "MeLLo memories applied together need one set of settings "
            f"(meta[{MELLO_META!r}]), got {sorted(map(str, settings))} from "
            f"{[d.label() for d in remembering][:3]}"
        )
    memory = dict.fromkeys(sentence for d in remembering for sentence in d.memory)
    return PromptContext(
        memory=tuple(memory), mello=MelloSettings.from_json(settings.pop())
    )
