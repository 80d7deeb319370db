"""Small real things that tests build: RDF stores from a few triples, project copies."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyoxigraph as ox

from kebench.project import PROJECT_ROOT


def make_store(triples: list[tuple[str, str, str | ox.Literal]]) -> ox.Store:
    """An in-memory store from (s, p, o) with IRIs as strings and literals as ox.Literal."""
    store = ox.Store()
    for s, p, o in triples:
        obj = o if isinstance(o, ox.Literal) else ox.NamedNode(o)
        store.add(ox.Quad(ox.NamedNode(s), ox.NamedNode(p), obj))
    return store


def copy_project(root: Path, model: tuple[str, Path] | None = None) -> Path:
    """Conf, code and demo data of the project in ``root``, for a real Kedro session.

    ``model``: (name, converted folder), linked under data/06_models so that the
    session does not convert the model again.
    """
    root.mkdir(parents=True, exist_ok=True)
    for name in ("pyproject.toml", ".telemetry"):
        shutil.copy(PROJECT_ROOT / name, root / name)
    shutil.copytree(
        PROJECT_ROOT / "conf", root / "conf", ignore=shutil.ignore_patterns("local")
    )
    (root / "conf" / "local").mkdir()
    shutil.copytree(
        PROJECT_ROOT / "src",
        root / "src",
        ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"),
    )
    shutil.copytree(
        PROJECT_ROOT / "data" / "01_raw" / "demo", root / "data" / "01_raw" / "demo"
    )
    if model is not None:
        name, folder = model
        (root / "data" / "06_models").mkdir(parents=True)
        (root / "data" / "06_models" / name).symlink_to(folder)
    return root
