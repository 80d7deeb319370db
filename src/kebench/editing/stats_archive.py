"""Share covariance statistics between machines: one tar of safetensors and JSON.

``export_stats`` packs one model's statistics (``<model>/<corpus folder>/*``: the
safetensors files and the sampled corpora) with a ``manifest.json`` first: each member's
sha256, size and provenance. ``import_stats`` checks the whole archive before it
installs anything: only regular files under the model's folder, exactly the manifest's
members, each with its checksum and, for a statistic, the manifest's provenance in its
own metadata. It then moves each file into place with an atomic rename, so a reader
never sees a half-written statistic, and a corrupted archive installs nothing. Nothing
is ever unpickled: the members are safetensors and JSON.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from safetensors import SafetensorError

import kebench
from kebench.atomic import atomic_path
from kebench.editing.stats import CORPUS_FILE, PROVENANCE, read_provenance

ARCHIVE_FORMAT = "kebench-stats-archive/1"
MANIFEST = "manifest.json"
CHUNK = 1 << 20


class StatsArchiveError(ValueError):
    """An archive that is not a sound export of statistics, or cannot be installed."""


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _provenance(path: Path) -> dict[str, Any]:
    """A statistic's metadata provenance, or a sampled corpus's."""
    if path.suffix == ".safetensors":
        return read_provenance(path)
    return json.loads(path.read_text(encoding="utf-8")).get(PROVENANCE, {})


def _is_shared(name: str) -> bool:
    """A statistic or a sampled corpus (checkpoints and temp files start with '.')."""
    path = PurePosixPath(name)
    return not path.name.startswith(".") and (
        path.suffix == ".safetensors" or path.name == CORPUS_FILE
    )


def shared_files(stats_dir: Path, model: str) -> list[Path]:
    """The finished statistics and corpora of ``model`` (not checkpoints, not temp files)."""
    return sorted(
        path
        for path in (Path(stats_dir) / model).glob("*/*")
        if path.is_file() and _is_shared(path.name)
    )


def describe_stats(stats_dir: Path, model: str) -> list[dict[str, Any]]:
    """Each shared file of ``model``: its name under ``stats_dir``, size, provenance."""
    return [
        {
            "name": path.relative_to(stats_dir).as_posix(),
            "bytes": path.stat().st_size,
            "provenance": _provenance(path),
        }
        for path in shared_files(stats_dir, model)
    ]


def export_stats(stats_dir: Path, model: str, out: Path) -> dict[str, Any]:
    """Write ``model``'s statistics to the tar ``out`` (atomically); its manifest."""
    stats_dir = Path(stats_dir)
    files = describe_stats(stats_dir, model)
    if not files:
        raise StatsArchiveError(f"no statistics of {model!r} under {stats_dir}")
    for entry in files:
        entry["sha256"] = _sha256(stats_dir / entry["name"])
    manifest = {
        "format": ARCHIVE_FORMAT,
        "model": model,
        "kebench_version": kebench.__version__,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "files": files,
    }
    encoded = json.dumps(manifest, indent=2, ensure_ascii=False).encode("utf-8")
    with atomic_path(out) as tmp, tarfile.open(tmp, "w") as archive:
        info = tarfile.TarInfo(MANIFEST)
        info.size = len(encoded)
        archive.addfile(info, io.BytesIO(encoded))
        for entry in files:
            archive.add(stats_dir / entry["name"], arcname=entry["name"])
    return manifest


def _read_manifest(archive: tarfile.TarFile, where: Path) -> dict[str, Any]:
    try:
        member = archive.getmember(MANIFEST)
        manifest = json.loads(archive.extractfile(member).read().decode("utf-8"))
    except (KeyError, AttributeError, ValueError) as err:
        raise StatsArchiveError(f"{where}: no readable {MANIFEST} ({err})") from err
    if manifest.get("format") != ARCHIVE_FORMAT:
        raise StatsArchiveError(
            f"{where}: {MANIFEST} format is {manifest.get('format')!r}, "
            f"expected {ARCHIVE_FORMAT!r}"
        )
    return manifest


def _check_names(
    archive: tarfile.TarFile, manifest: dict[str, Any], where: Path
) -> dict[str, dict[str, Any]]:
    """The manifest's entries by name, once every member is a plain file it lists."""
    entries = {entry["name"]: entry for entry in manifest["files"]}
    model = manifest["model"]
    members = [member for member in archive.getmembers() if member.name != MANIFEST]
    names = [member.name for member in members]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise StatsArchiveError(f"{where}: member {twice!r} appears twice")
    for member in members:
        parts = PurePosixPath(member.name).parts
        if not member.isfile():
            raise StatsArchiveError(f"{where}: member {member.name!r} is not a file")
        if (
            len(parts) != 3  # noqa: PLR2004 - <model>/<corpus folder>/<file>
            or parts[0] != model
            or any(part.startswith(".") for part in parts)
            or not _is_shared(member.name)
        ):
            raise StatsArchiveError(
                f"{where}: member {member.name!r} is not <{model}>/<corpus>/<file>"
            )
        if member.name not in entries:
            raise StatsArchiveError(
                f"{where}: member {member.name!r} is not in {MANIFEST}"
            )
    absent = sorted(set(entries) - set(names))
    if absent:
        raise StatsArchiveError(
            f"{where}: member {absent[0]!r} of {MANIFEST} is missing"
        )
    return entries


def _stage(
    archive: tarfile.TarFile,
    entries: dict[str, dict[str, Any]],
    staging: Path,
    where: Path,
) -> None:
    """Copy every member into ``staging``, refusing one that is not what the manifest
    says: its checksum, and the provenance inside it."""
    for name, entry in entries.items():
        target = staging / name
        target.parent.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256()
        with archive.extractfile(name) as source, target.open("wb") as sink:
            while chunk := source.read(CHUNK):
                digest.update(chunk)
                sink.write(chunk)
        if digest.hexdigest() != entry["sha256"]:
            raise StatsArchiveError(
                f"{where}: member {name!r} is corrupted (its sha256 is not the manifest's)"
            )
        try:
            provenance = _provenance(target)
        except (SafetensorError, ValueError, OSError) as err:
            raise StatsArchiveError(
                f"{where}: member {name!r} is unreadable ({err})"
            ) from err
        if provenance != entry["provenance"]:
            raise StatsArchiveError(
                f"{where}: member {name!r} carries another provenance than {MANIFEST}'s"
            )


def import_stats(archive_path: Path, stats_dir: Path) -> list[Path]:
    """Install an exported archive under ``stats_dir``; the files it added.

    A file already there with the same content is kept; one with other content is an
    error naming it (delete it to take the archive's), checked before anything moves.
    """
    archive_path, stats_dir = Path(archive_path), Path(stats_dir)
    stats_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=stats_dir, prefix=".import-"))
    try:
        try:
            with tarfile.open(archive_path, "r") as archive:
                manifest = _read_manifest(archive, archive_path)
                entries = _check_names(archive, manifest, archive_path)
                _stage(archive, entries, staging, archive_path)
        except tarfile.TarError as err:
            raise StatsArchiveError(
                f"{archive_path}: not a readable tar ({err})"
            ) from err
        new = []
        for name, entry in entries.items():
            existing = stats_dir / name
            if not existing.is_file():
                new.append(name)
            elif _sha256(existing) != entry["sha256"]:
                raise StatsArchiveError(
                    f"{existing} exists with other content than {archive_path}'s "
                    f"{name!r}; delete it to import the archive's"
                )
        for name in new:
            (stats_dir / name).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / name, stats_dir / name)
        return [stats_dir / name for name in new]
    finally:
        shutil.rmtree(staging, ignore_errors=True)
