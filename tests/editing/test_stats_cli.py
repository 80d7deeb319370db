"""`kebench stats list/export/import`: statistics computed on the real SmolLM2 travel
in one archive, are checked on import, and are then read without being recomputed."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from kebench.cli import cli
from kebench.editing.interface import EditContext
from kebench.editing.stats import read_provenance, second_moments
from tests.models.shared import MODEL

PATHS = ["model.layers.4.mlp.down_proj", "model.layers.6.mlp.down_proj"]


@pytest.fixture
def computed(lm, tmp_path) -> tuple[Path, Path, dict]:
    """(stats folder, corpus file, statistics) of two modules over a small corpus."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text(
        "Paris is the capital of France.\n\nThe Danube flows into the Black Sea.\n",
        encoding="utf-8",
    )
    stats_dir = tmp_path / "computed"
    found = second_moments(
        lm,
        PATHS,
        dataset=str(corpus),
        n_samples=2,
        dtype_name="float32",
        context=EditContext(stats_dir),
    )
    return stats_dir, corpus, found


def invoke(*args: str) -> object:
    return CliRunner().invoke(cli, ["stats", *args], catch_exceptions=False)


def export(stats_dir: Path, out: Path) -> Path:
    result = invoke(
        "export", "--model", MODEL, "--out", str(out), "--stats-dir", str(stats_dir)
    )
    assert result.exit_code == 0, result.output
    return out


def members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def write_tar(path: Path, files: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_exported_statistics_import_elsewhere_and_are_used_as_they_are(
    lm, computed, tmp_path
):
    stats_dir, corpus, found = computed
    archive = export(stats_dir, tmp_path / "stats.tar")
    files = members(archive)
    manifest = json.loads(files.pop("manifest.json"))
    assert manifest["model"] == MODEL
    sources = sorted(stats_dir.glob(f"{MODEL}/*/*.safetensors"))
    assert sorted(files) == [p.relative_to(stats_dir).as_posix() for p in sources]
    for entry in manifest["files"]:
        source = stats_dir / entry["name"]
        assert entry["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()
        assert entry["provenance"] == read_provenance(source)
    # The list command shows the same provenance.
    listed = invoke("list", "--stats-dir", str(stats_dir)).output.splitlines()
    assert [json.loads(line)["provenance"] for line in listed] == [
        e["provenance"] for e in manifest["files"]
    ]

    other = tmp_path / "other_machine"
    result = invoke("import", str(archive), "--stats-dir", str(other))
    assert result.exit_code == 0, result.output
    imported = sorted(other.glob(f"{MODEL}/*/*.safetensors"))
    assert [p.read_bytes() for p in imported] == [p.read_bytes() for p in sources]
    assert not [p for p in other.rglob(".*")]  # no staging left behind
    inodes = [p.stat().st_ino for p in imported]
    used = second_moments(
        lm,
        PATHS,
        dataset=str(corpus),
        n_samples=2,
        dtype_name="float32",
        context=EditContext(other),
    )
    assert all(torch.equal(used[p], found[p].cpu()) for p in PATHS)
    assert [p.stat().st_ino for p in imported] == inodes  # read, not recomputed
    # Importing again adds nothing and changes nothing.
    again = invoke("import", str(archive), "--stats-dir", str(other))
    assert again.exit_code == 0 and "installed 0 new files" in again.output


def refused(archive: Path, stats_dir: Path) -> str:
    result = CliRunner().invoke(
        cli, ["stats", "import", str(archive), "--stats-dir", str(stats_dir)]
    )
    assert result.exit_code != 0
    assert not list(stats_dir.glob(f"{MODEL}/*/*"))  # nothing installed
    return result.output


def test_a_corrupted_archive_is_refused_naming_the_bad_member(computed, tmp_path):
    stats_dir, _corpus, _found = computed
    files = members(export(stats_dir, tmp_path / "stats.tar"))
    bad = sorted(name for name in files if name != "manifest.json")[-1]
    tampered = bytearray(files[bad])
    tampered[-3] ^= 0xFF  # one byte of the tensor data
    files[bad] = bytes(tampered)
    output = refused(write_tar(tmp_path / "bad.tar", files), tmp_path / "target")
    assert bad in output and "corrupted" in output


def test_an_archive_member_outside_the_manifest_or_the_model_is_refused(
    computed, tmp_path
):
    stats_dir, _corpus, _found = computed
    files = members(export(stats_dir, tmp_path / "stats.tar"))
    name = next(n for n in files if n.endswith(".safetensors"))
    extra = {**files, name.replace("layers.4", "layers.9"): files[name]}
    output = refused(write_tar(tmp_path / "extra.tar", extra), tmp_path / "t1")
    assert "layers.9" in output and "not in manifest.json" in output
    escaping = {**files, f"{MODEL}/../../evil.safetensors": files[name]}
    output = refused(write_tar(tmp_path / "escape.tar", escaping), tmp_path / "t2")
    assert "evil.safetensors" in output
    missing = {n: data for n, data in files.items() if n != name}
    output = refused(write_tar(tmp_path / "missing.tar", missing), tmp_path / "t3")
    assert name in output and "missing" in output
    (tmp_path / "truncated.tar").write_bytes(
        (tmp_path / "stats.tar").read_bytes()[:5000]
    )
    assert "truncated.tar" in refused(tmp_path / "truncated.tar", tmp_path / "t4")


def test_an_import_never_replaces_a_different_statistic(computed, tmp_path):
    stats_dir, _corpus, _found = computed
    archive = export(stats_dir, tmp_path / "stats.tar")
    target = tmp_path / "target"
    name = sorted(stats_dir.glob(f"{MODEL}/*/*.safetensors"))[0].relative_to(stats_dir)
    (target / name).parent.mkdir(parents=True)
    (target / name).write_bytes(b"another statistic")
    result = CliRunner().invoke(
        cli, ["stats", "import", str(archive), "--stats-dir", str(target)]
    )
    assert result.exit_code != 0 and str(target / name) in result.output
    assert (target / name).read_bytes() == b"another statistic"
    assert len(list(target.glob(f"{MODEL}/*/*"))) == 1  # nothing else installed


def test_exporting_a_model_without_statistics_is_an_error(tmp_path):
    result = CliRunner().invoke(
        cli, ["stats", "export", "--model", MODEL, "--stats-dir", str(tmp_path)]
    )
    assert result.exit_code != 0 and "no statistics" in result.output
