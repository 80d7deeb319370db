"""Atomic file writes: a crash mid-write leaves the old file, never a truncated one.

A write goes to a temporary file beside the target, renamed over it when done. The
domain modules and the Kedro datasets (``kebench.datasets.atomic``) all write through
it, so it sits in the bottom layer (docs/architecture.md) and imports only the
standard library.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(target: str | Path) -> Iterator[Path]:
    """A temporary path that replaces ``target`` when the block exits without error."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    os.close(handle)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
