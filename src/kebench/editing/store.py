"""The folder of a model's edit deltas: one safetensors file and one manifest row per edit.

Layout under the store's root (``data/07_model_output/<dataset>/<model>/<profile>/deltas``):

    <METHOD>/<mode>/<case>.safetensors   the delta (batch mode: <batch>.safetensors)
    <METHOD>/<mode>/<case>.json          its manifest row (``EDIT_DELTAS`` columns)

Both are written atomically, the delta first: a row on disk means its edit is done,
so a run killed at any point resumes from the rows it finds.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kebench.atomic import atomic_path
from kebench.editing.delta import Delta, load_delta, save_delta

MODES = ("single", "batch", "sequential")
ROW_COLUMNS = [
    "model",
    "method",
    "mode",
    "case_id",
    "order",
    "status",
    "reason",
    "delta_file",
    "param_names",
    "shapes",
    "norms",
    "tensor_bytes",
    "wall_s",
    "fingerprint",
    "hparams",
]


def file_stem(case_id: str) -> str:
    """A safe file name for ``case_id`` (unsafe characters replaced, plus a short hash)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", case_id)
    if safe == case_id and not case_id.startswith("."):
        return case_id
    return f"{safe.lstrip('.')}-{hashlib.sha256(case_id.encode()).hexdigest()[:8]}"


@dataclass
class EditOutcome:
    """One finished edit: its manifest row, and its delta unless it failed.

    In batch mode the first outcome of a batch carries the batch's delta; the others
    name the same ``delta_file`` with ``delta`` None.
    """

    row: dict[str, Any]
    delta: Delta | None = None


class DeltaStore:
    """Reads and writes the deltas and manifest rows under ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def folder(self, method: str, mode: str) -> Path:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; use one of {MODES}")
        return self.root / method / mode

    def write(self, outcome: EditOutcome) -> None:
        """Store the delta (if any), then the row that records it."""
        row = outcome.row
        folder = self.folder(row["method"], row["mode"])
        if outcome.delta is not None:
            save_delta(outcome.delta, self.root / row["delta_file"])
        with atomic_path(folder / f"{file_stem(row['case_id'])}.json") as tmp:
            tmp.write_text(json.dumps(row, sort_keys=True), encoding="utf-8")

    def rows(self, method: str, mode: str) -> dict[str, dict[str, Any]]:
        """Stored rows of one method and mode, by case id."""
        folder = self.folder(method, mode)
        found = {}
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            row = json.loads(path.read_text(encoding="utf-8"))
            found[row["case_id"]] = row
        return found

    def manifest(self) -> pd.DataFrame:
        """Every stored row, ordered by method, mode and order of the edit in its run."""
        rows = [
            json.loads(path.read_text(encoding="utf-8"))
            for path in sorted(self.root.glob("*/*/*.json"))
        ]
        frame = pd.DataFrame(rows, columns=ROW_COLUMNS)
        return frame.sort_values(["method", "mode", "order"]).reset_index(drop=True)

    def load(self, delta_file: str) -> Delta:
        """The delta stored at ``delta_file`` (a manifest row's path, relative to the root)."""
        return load_delta(self.root / delta_file)
