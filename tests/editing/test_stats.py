"""Covariance statistics on the real SmolLM2: values, provenance, resuming, corpora.

Expected values come from plain computations written here: C by a per-text loop with
the model's own forward pre-hooks in float64, token counts and hashes recomputed, and
an uninterrupted run for the resumed one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from kebench.editing.forward import get_module
from kebench.editing.interface import EditContext
from kebench.editing.stats import (
    CorpusUnavailableError,
    ProvenanceMismatchError,
    paced_batches,
    read_provenance,
    resolve_corpus,
    second_moments,
)
from kebench.models.loading import LoadedModel
from kebench.project import PROJECT_ROOT
from tests.models.shared import MODEL
from tests.models.tiny import build_checkpoint, load_checkpoint

PATHS = ["model.layers.3.mlp.down_proj", "model.layers.5.mlp.down_proj"]
PARAGRAPHS = [
    "The Eiffel Tower is in Paris, the capital of France.",
    "Marie Curie was born in Warsaw. She won two Nobel prizes, in physics and in "
    "chemistry, and was the first woman to win one at all.",
    "Rivers flow into the sea.",
]


def write_corpus(folder: Path, paragraphs: list[str], name: str = "corpus.txt") -> Path:
    path = folder / name
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return path


@torch.no_grad()
def plain_second_moment(
    lm: LoadedModel, texts: list[str], path: str, max_tokens: int
) -> tuple[torch.Tensor, int]:
    """E[k kᵀ] over every token of each text alone (cut to max_tokens), in float64."""
    keys: list[torch.Tensor] = []
    handle = get_module(lm.model, path).register_forward_pre_hook(
        lambda _module, args: keys.append(args[0][0].double())
    )
    try:
        for text in texts:
            ids = lm.tokenizer(text)["input_ids"][:max_tokens]
            lm.model(input_ids=torch.tensor([ids], device=lm.device), use_cache=False)
    finally:
        handle.remove()
    stacked = torch.cat(keys)
    return stacked.T @ stacked / len(stacked), len(stacked)


def test_the_cached_statistic_is_the_plain_second_moment_with_its_provenance(
    lm, tmp_path
):
    corpus = write_corpus(tmp_path, PARAGRAPHS)
    context = EditContext(stats_dir=tmp_path / "stats", seed=3)
    max_tokens = 12  # shorter than the second paragraph: the cut must apply
    assert len(lm.tokenizer(PARAGRAPHS[1])["input_ids"]) > max_tokens
    found = second_moments(
        lm,
        PATHS,
        dataset=str(corpus),
        n_samples=10,
        dtype_name="float32",
        context=context,
        max_tokens=max_tokens,
    )
    files = sorted((tmp_path / "stats" / MODEL).glob("*/*.safetensors"))
    assert [f.name for f in files] == [f"{p}.float32.safetensors" for p in PATHS]
    for path, file in zip(PATHS, files, strict=True):
        expected, tokens = plain_second_moment(lm, PARAGRAPHS, path, max_tokens)
        torch.testing.assert_close(found[path].double(), expected, rtol=1e-4, atol=1e-5)
        provenance = read_provenance(file)
        assert provenance["module"] == path
        assert provenance["model"] == MODEL
        assert provenance["tokens"] == tokens
        assert provenance["n_texts"] == len(PARAGRAPHS)
        assert provenance["n_samples"] == 10
        assert provenance["max_tokens"] == max_tokens
        assert provenance["dtype"] == "float32"
        assert provenance["corpus"] == "file:corpus.txt"
        assert (
            provenance["corpus_sha256"]
            == hashlib.sha256(corpus.read_bytes()).hexdigest()
        )
        assert (
            provenance["seed"] is None
        )  # a text file's statistic does not depend on it
        for field in ("model_config_sha256", "model_weights_sha256", "created"):
            assert provenance[field]
    # A new run reads the files (its memo is empty): the same tensors.
    again = second_moments(
        lm,
        PATHS,
        dataset=str(corpus),
        n_samples=10,
        dtype_name="float32",
        context=EditContext(stats_dir=tmp_path / "stats", seed=3),
        max_tokens=max_tokens,
    )
    assert all(torch.equal(again[p], found[p]) for p in PATHS)


def test_another_model_under_the_same_name_is_refused(lm, tmp_path):
    corpus = write_corpus(tmp_path, PARAGRAPHS)
    stats_dir = tmp_path / "stats"
    path = "model.layers.1.mlp.down_proj"

    def request(model: LoadedModel) -> None:
        second_moments(
            model,
            [path],
            dataset=str(corpus),
            n_samples=3,
            dtype_name="float32",
            context=EditContext(stats_dir=stats_dir),
        )

    request(lm)
    (file,) = (stats_dir / MODEL).glob("*/*.safetensors")
    # A tiny Llama checkpoint registered under SmolLM2's name: another config.
    other = load_checkpoint(build_checkpoint("llama", tmp_path / "tiny", lm.tokenizer))
    with pytest.raises(ProvenanceMismatchError, match="model_config_sha256") as error:
        request(dataclasses.replace(other, name=MODEL))
    assert str(file) in str(error.value)
    # The same architecture with other weights (one embedding row changed).
    embedding = lm.model.get_input_embeddings().weight
    kept = embedding[7].clone()
    try:
        with torch.no_grad():
            embedding[7] += 1.0
        with pytest.raises(ProvenanceMismatchError, match="model_weights_sha256"):
            request(lm)
    finally:
        with torch.no_grad():
            embedding[7] = kept
    request(lm)  # the model itself again: accepted


def test_a_statistic_of_another_corpus_is_refused(lm, tmp_path):
    """A statistic moved into another corpus's folder is not taken for that corpus's."""
    stats_dir = tmp_path / "stats"
    first = write_corpus(tmp_path, PARAGRAPHS[:2], "first.txt")
    second = write_corpus(tmp_path, PARAGRAPHS[1:], "second.txt")
    path = "model.layers.2.mlp.down_proj"
    options = {"n_samples": 3, "dtype_name": "float32", "max_tokens": 16}
    second_moments(
        lm, [path], dataset=str(first), context=EditContext(stats_dir), **options
    )
    (file,) = (stats_dir / MODEL).glob("*/*.safetensors")
    second_folder = file.parent.parent / file.parent.name.replace(
        "first-" + hashlib.sha256(first.read_bytes()).hexdigest()[:12],
        "second-" + hashlib.sha256(second.read_bytes()).hexdigest()[:12],
    )
    second_folder.mkdir()
    file.rename(second_folder / file.name)
    with pytest.raises(ProvenanceMismatchError, match="corpus") as error:
        second_moments(
            lm, [path], dataset=str(second), context=EditContext(stats_dir), **options
        )
    assert str(second_folder / file.name) in str(error.value)


@pytest.mark.model
def test_each_pass_logs_its_estimated_time_after_its_first_batch(lm, tmp_path, caplog):
    """A tiny Llama folder's statistic over 130 texts it writes (its SentencePiece
    vocabulary is small, so sampling is quick): sampling is 3 batches of 64 texts,
    accumulating 9 of 16; each pass's estimate comes after its first batch, counts its
    batches, and comes before the statistic is cached."""
    tiny = load_checkpoint(build_checkpoint("llama", tmp_path / "llama", lm.tokenizer))
    options = {
        "dataset": "model_samples",
        "n_samples": 130,
        "dtype_name": "float32",
        "context": EditContext(tmp_path / "stats"),
    }
    with caplog.at_level("INFO", logger="kebench.editing.stats"):
        second_moments(tiny, ["model.layers.1.mlp.down_proj"], **options)
    lines = [record.getMessage() for record in caplog.records]

    def first(fragment: str) -> int:
        return next(i for i, line in enumerate(lines) if fragment in line)

    sampling, corpus = first("Sampling 130 texts"), first("corpus (130 texts): 3 of 3")
    corpus_eta = first("corpus (130 texts): 3 batches, about ")
    accumulation = first("covariance (130 texts): 9 of 9 batches to compute")
    accumulation_eta = first("covariance (130 texts): 9 batches, about ")
    cached = first("Covariance of")
    assert sampling < corpus < corpus_eta < accumulation < accumulation_eta < cached
    # a new run reads the file: no pass, no estimate
    caplog.clear()
    options["context"] = EditContext(tmp_path / "stats")
    with caplog.at_level("INFO", logger="kebench.editing.stats"):
        second_moments(tiny, ["model.layers.1.mlp.down_proj"], **options)
    assert "batches, about" not in caplog.text
    assert "batches to compute" not in caplog.text


RESUMABLE_RUN = """
import sys
from pathlib import Path
import torch
from kebench.editing.interface import EditContext
from kebench.editing.stats import second_moments
from kebench.models.loading import load_model
from kebench.models.registry import model_spec
from kebench.project import load_config

threads, cache, corpus, stats_dir, paths = sys.argv[1:6]
torch.set_num_threads(int(threads))
registry = load_config({})["catalog"]["model"]["registry"]
lm = load_model(model_spec("smollm2-135m", registry), Path(cache))
second_moments(lm, paths.split(","), dataset=corpus, n_samples=400,
               dtype_name="float32", context=EditContext(Path(stats_dir)),
               checkpoint_every=1)
"""


def test_a_killed_accumulation_resumes_to_the_uninterrupted_result(
    lm, tmp_path, tmp_path_factory, caplog
):
    # 160 texts: 10 batches, seconds of work after the first checkpoint.
    corpus = write_corpus(
        tmp_path,
        [f"{PARAGRAPHS[i % 3]} This is paragraph number {i}." for i in range(160)],
    )
    killed = tmp_path / "killed"
    cache = tmp_path_factory.getbasetemp() / "06_models" / MODEL
    arguments = [str(torch.get_num_threads()), str(cache), str(corpus), str(killed)]
    process = subprocess.Popen(  # noqa: S603 - this interpreter, our own script
        [sys.executable, "-c", RESUMABLE_RUN, *arguments, ",".join(PATHS)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 300
        while not list(killed.glob(f"{MODEL}/*/.partial-*.safetensors")):
            assert process.poll() is None, "the run ended before its first checkpoint"
            assert time.monotonic() < deadline
            time.sleep(0.01)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    (checkpoint,) = killed.glob(f"{MODEL}/*/.partial-*.safetensors")
    assert not list(killed.glob(f"{MODEL}/*/model.*.safetensors"))
    assert set(load_file(checkpoint)) == set(PATHS)
    options = {
        "dataset": str(corpus),
        "n_samples": 400,
        "dtype_name": "float32",
        "checkpoint_every": 1,
    }
    with caplog.at_level("INFO", logger="kebench.editing.stats"):
        resumed = second_moments(lm, PATHS, context=EditContext(killed), **options)
    assert "Resuming the covariance accumulation at text" in caplog.text
    done = int(caplog.text.split("accumulation at text ")[1].split()[0])
    assert 0 < done < 160
    assert not checkpoint.exists()
    whole = tmp_path / "whole"
    uninterrupted = second_moments(lm, PATHS, context=EditContext(whole), **options)
    for path in PATHS:
        assert torch.equal(resumed[path], uninterrupted[path])
        (a,) = killed.glob(f"{MODEL}/*/{path}.float32.safetensors")
        (b,) = whole.glob(f"{MODEL}/*/{path}.float32.safetensors")
        assert read_provenance(a)["tokens"] == read_provenance(b)["tokens"]


def test_a_checkpoint_of_another_accumulation_is_not_resumed(lm, tmp_path):
    corpus = write_corpus(tmp_path, PARAGRAPHS * 12)  # 36 texts, 3 batches
    options = {
        "dataset": str(corpus),
        "n_samples": 36,
        "dtype_name": "float32",
        "checkpoint_every": 1,
    }
    path = PATHS[:1]
    whole = second_moments(lm, path, context=EditContext(tmp_path / "a"), **options)
    (file,) = (tmp_path / "a" / MODEL).glob("*/*.safetensors")
    # A checkpoint where this run's would be, of another accumulation: garbage sums.
    folder = tmp_path / "b" / MODEL / file.parent.name
    folder.mkdir(parents=True)
    garbage = {path[0]: torch.full_like(whole[path[0]].cpu(), 1e6)}
    metadata = {"identity": "another", "texts_done": "16", "tokens": "99"}
    for name in ("", "x"):
        save_file(garbage, folder / f".partial-{name}.safetensors", metadata=metadata)
    # Whatever its name, only a checkpoint with this run's identity could be resumed.
    again = second_moments(lm, path, context=EditContext(tmp_path / "b"), **options)
    assert torch.equal(again[path[0]], whole[path[0]])


def test_a_hugging_face_dataset_folder_is_read_through_datasets(lm, tmp_path):
    pytest.importorskip("datasets")  # the [hf] extra, which `make test` installs
    folder = tmp_path / "hf_corpus"
    folder.mkdir()
    rows = [{"id": i, "body": text} for i, text in enumerate(PARAGRAPHS)]
    (folder / "train.jsonl").write_text(
        "".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8"
    )
    options = {"n_samples": 2, "dtype_name": "float32", "max_tokens": 16}
    from_hf = second_moments(
        lm,
        PATHS[:1],
        dataset=f"hf:{folder}::train:body",
        context=EditContext(tmp_path / "stats"),
        **options,
    )
    from_file = second_moments(
        lm,
        PATHS[:1],
        dataset=str(write_corpus(tmp_path, PARAGRAPHS[:2])),
        context=EditContext(tmp_path / "stats"),
        **options,
    )
    assert torch.equal(from_hf[PATHS[0]], from_file[PATHS[0]])
    (hf_file,) = (tmp_path / "stats" / MODEL).glob("hf-*/*.safetensors")
    provenance = read_provenance(hf_file)
    assert provenance["corpus"] == f"hf:{folder}::train:body"
    texts = json.dumps(PARAGRAPHS[:2], ensure_ascii=False)
    assert provenance["corpus_sha256"] == hashlib.sha256(texts.encode()).hexdigest()


UNAVAILABLE = f"{CorpusUnavailableError.__module__}.{CorpusUnavailableError.__name__}: "


def hf_error(code: str, env: dict[str, str]) -> str:
    """stderr of a fresh interpreter that reads the Wikipedia corpus after ``code``."""
    script = (
        f"{code}\n"
        "from kebench.editing.stats import hf_texts, resolve_corpus\n"
        "hf_texts(resolve_corpus('wikipedia'), 2)\n"
    )
    result = subprocess.run(  # noqa: S603 - this interpreter, our own script
        [sys.executable, "-c", script],
        cwd=PROJECT_ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    return result.stderr.strip().splitlines()[-1]


def test_an_offline_hub_is_a_clear_error_naming_the_corpus_and_the_alternatives():
    pytest.importorskip("datasets")
    error = hf_error("", {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"})
    assert error.startswith(UNAVAILABLE)
    assert "hf:wikimedia/wikipedia:20231101.en:train:text" in error
    assert "HF_HUB_OFFLINE" in error
    assert "model_samples" in error and "text file" in error


def test_without_the_datasets_library_a_hf_corpus_says_how_to_install_it():
    # None in sys.modules makes `import datasets` fail, as on a machine without it.
    error = hf_error("import sys; sys.modules['datasets'] = None", {})
    assert error.startswith(UNAVAILABLE)
    assert "pip install 'kebench[hf]'" in error
    assert "model_samples" in error and "text file" in error


def test_corpus_names_resolve_to_what_provenance_records(tmp_path):
    assert resolve_corpus("model_samples").spec == "model_samples"
    assert (
        resolve_corpus("wikipedia").spec
        == "hf:wikimedia/wikipedia:20231101.en:train:text"
    )
    assert resolve_corpus("hf:user/set").hf == ("user/set", None, "train", "text")
    assert resolve_corpus("hf:user/set:cfg:test:body").hf == (
        "user/set",
        "cfg",
        "test",
        "body",
    )
    text = write_corpus(tmp_path, ["one"])
    assert resolve_corpus(str(text)).spec == "file:corpus.txt"
    with pytest.raises(ValueError, match="hf:<dataset>"):
        resolve_corpus("hf:a:b:c:d:e")
    with pytest.raises(FileNotFoundError, match="model_samples"):
        resolve_corpus(str(tmp_path / "absent.txt"))


def test_a_pass_says_its_batches_before_the_first_and_its_time_after(caplog):
    """A resumed pass of batches 2 to 4 of 5: the count before any batch runs, the
    estimate (the first batch's seconds times 3) once the first is done."""
    caplog.set_level(logging.INFO, logger="kebench.editing.stats")
    seen = []
    for batch in paced_batches(range(2, 5), "corpus"):
        seen.append((batch, [r.getMessage() for r in caplog.records]))
    assert [batch for batch, _ in seen] == [2, 3, 4]
    before_first = seen[0][1]
    assert before_first == [
        "corpus: 3 of 5 batches to compute; the estimated time follows the first"
    ]
    after_first = seen[1][1]
    assert len(after_first) == 2
    assert re.fullmatch(
        r"corpus: 3 batches, about [\d.]+ s in all at the first one's [\d.]+ s",
        after_first[1],
    )
    # nothing more is logged: the bar's ETA follows the running mean
    assert len(caplog.records) == 2
