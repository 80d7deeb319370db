"""The hparams profiles' names, and the profile of a run that names none.

Kept apart from ``kebench.editing.hparams`` so that the project settings, which every
kedro command loads, register the ``machine_profile`` resolver without importing the
editing code.
"""

FAITHFUL = "faithful"
FAST = "fast"


def machine_profile() -> str:
    """The hparams profile of a run that names none: the reference values (faithful)
    where a CUDA device is visible, the CPU-tuned overlays (fast) otherwise, so that
    `make run` and a bare `kedro run` on a laptop read and write the same outputs."""
    import torch  # noqa: PLC0415 - only when a config is resolved, not on import

    return FAITHFUL if torch.cuda.is_available() else FAST
