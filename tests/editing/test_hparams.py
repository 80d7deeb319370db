"""Hparams for any model: the depth rule, derivation from a reference, the own file on top."""

from __future__ import annotations

import pytest
import yaml
from kedro.io import DatasetError

from kebench.editing.datasets import EditHparamsDataset
from kebench.editing.hparams import (
    Architecture,
    HparamsFiles,
    describe_resolved,
    resolve_all,
    resolve_hparams,
    scale_layers,
)
from kebench.editing.interface import HparamsError
from kebench.editing.registry import get_method, method_names
from kebench.project import PROJECT_ROOT, load_config

HPARAMS = PROJECT_ROOT / "conf" / "base" / "hparams"


@pytest.fixture(scope="module")
def families() -> dict:
    return load_config({})["parameters"]["model_families"]


@pytest.fixture(scope="module")
def project_files() -> HparamsFiles:
    return EditHparamsDataset(str(HPARAMS), "my-model").load()


def test_the_depth_rule_by_hand():
    # at the reference's depth: the published layers themselves
    assert scale_layers([17], 48, 48) == [17]
    assert scale_layers([13, 14, 15, 16, 17], 48, 48) == [13, 14, 15, 16, 17]
    # Llama-3-8B's ROME layer 5 of 32 on 16 layers: 5 * 15 / 31 = 2.42 -> 2
    assert scale_layers([5], 32, 16) == [2]
    # MEMIT's window 4..8 of 32 on 16 layers: ends 1.94 -> 2 and 3.87 -> 4, all between
    assert scale_layers([4, 5, 6, 7, 8], 32, 16) == [2, 3, 4]
    # a window on a deeper model stays a window: 3..8 of 28 on 48: 5.2 -> 5, 13.9 -> 14
    assert scale_layers([3, 4, 5, 6, 7, 8], 28, 48) == list(range(5, 15))
    # separate layers stay separate (and merge when they meet)
    assert scale_layers([0, 21], 32, 16) == [0, 10]
    assert scale_layers([0, 1], 32, 2) == [0]
    assert scale_layers([], 32, 16) == []


def file_values(method: str, model: str) -> dict:
    return yaml.safe_load((HPARAMS / method / f"{model}.yaml").read_text())


@pytest.mark.parametrize("method", ["ROME", "MEMIT", "FT-L", "FT-M", "KN", "IKE"])
@pytest.mark.parametrize(
    ("model_type", "n_layers", "reference"),
    [("gpt2", 48, "gpt2-xl"), ("gptj", 28, "gpt-j-6b"), ("qwen2", 28, "qwen2.5-7b")],
)
def test_a_model_at_its_references_depth_gets_the_published_file(  # noqa: PLR0913, PLR0917
    families, project_files, method, model_type, n_layers, reference
):
    resolved = resolve_hparams(
        method, project_files, Architecture(model_type, n_layers), families
    )
    assert resolved.reference == reference
    assert resolved.values == file_values(method, reference)
    assert set(resolved.derived) == set(file_values(method, reference))


def test_the_models_own_file_overrides_key_by_key(families):
    files = HparamsFiles(
        model="my-model",
        files={
            "my-model": {"ROME": {"layers": [2], "v_lr": 0.1}},
            "qwen2.5-7b": {"ROME": file_values("ROME", "qwen2.5-7b")},
        },
    )
    resolved = resolve_hparams("ROME", files, Architecture("qwen2", 12), families)
    assert resolved.values["layers"] == [2]
    assert resolved.values["v_lr"] == 0.1
    assert "layers" not in resolved.derived and "v_lr" not in resolved.derived
    # the rest is Qwen2.5-7B's, with the architecture's last layer
    assert (
        resolved.values["v_num_grad_steps"]
        == file_values("ROME", "qwen2.5-7b")["v_num_grad_steps"]
    )
    assert resolved.values["v_loss_layer"] == 11
    get_method("ROME").hparams.from_dict(resolved.values)


def test_a_family_changes_the_module_paths_of_its_reference(families, project_files):
    # OPT takes GPT-2 XL's values, on its own modules
    arch = Architecture("opt", 12)
    rome = resolve_hparams("ROME", project_files, arch, families).values
    ft = resolve_hparams("FT-M", project_files, arch, families).values
    assert rome["rewrite_module_tmp"] == "model.decoder.layers.{}.fc2"
    assert ft["rewrite_module_tmp"] == "model.decoder.layers.{}.fc2"
    assert rome["layers"] == [round(17 * 11 / 47)]


def test_an_unknown_architecture_without_a_file_is_a_clear_error(
    families, project_files
):
    with pytest.raises(HparamsError, match=r"model_type 'mamba' is in no family"):
        resolve_hparams("ROME", project_files, Architecture("mamba", 8), families)
    # with its own file it runs as the file says
    files = HparamsFiles("m", {"m": {"ROME": {"layers": [1]}}})
    resolved = resolve_hparams("ROME", files, Architecture("mamba", 8), families)
    assert resolved.values == {"layers": [1]} and resolved.derived == ()


def test_every_method_resolves_for_every_family(families, project_files):
    for family in families.values():
        for model_type in family["model_types"]:
            resolved = resolve_all(
                method_names(), project_files, Architecture(model_type, 6), families
            )
            assert {"ROME", "MEMIT", "FT-L", "FT-M", "KN", "IKE"} <= set(resolved)
            for method, result in resolved.items():
                get_method(method).hparams.from_dict(result.values, method)


def test_smollm2s_own_files_are_used_as_written(families):
    files = EditHparamsDataset(str(HPARAMS), "smollm2-135m").load()
    for method, result in resolve_all(
        method_names(), files, Architecture("llama", 30), families
    ).items():
        own = file_values(method, "smollm2-135m")
        assert {k: result.values[k] for k in own} == own
        # what the file leaves out is the method's default, so nothing changes
        defaults = get_method(method).hparams
        for key in result.derived:
            field = defaults.__dataclass_fields__[key]
            assert result.values[key] == field.default, (method, key)


def test_an_instruct_model_reads_its_base_models_files():
    registry = load_config({})["catalog"]["model"]["registry"]
    files = EditHparamsDataset(str(HPARAMS), "llama3-8b-instruct", registry).load()
    assert files.model == "llama3-8b"
    assert files.own["ROME"] == file_values("ROME", "llama3-8b")


def test_a_malformed_hparams_file_is_named(tmp_path):
    (tmp_path / "ROME").mkdir()
    (tmp_path / "ROME" / "broken.yaml").write_text("layers: [5\n")
    with pytest.raises(DatasetError, match=r"ROME/broken\.yaml: not valid YAML"):
        EditHparamsDataset(str(tmp_path), "broken").load()
    (tmp_path / "ROME" / "broken.yaml").write_text("- 5\n")
    with pytest.raises(DatasetError, match=r"ROME/broken\.yaml: expected a mapping"):
        EditHparamsDataset(str(tmp_path), "broken").load()


def write_hparams(root, relative: str, values: dict) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(values), encoding="utf-8")


def test_a_profile_overlays_only_its_keys_and_says_which(tmp_path, families):
    write_hparams(
        tmp_path, "ROME/m.yaml", {"layers": [3], "v_lr": 0.5, "v_num_grad_steps": 25}
    )
    write_hparams(tmp_path, "ROME/fast/m.yaml", {"v_lr": 1.0})
    write_hparams(tmp_path, "FT-L/m.yaml", {"layers": [2], "lr": 1e-4})
    write_hparams(tmp_path, "FT-L/fast/_default.yaml", {"num_steps": 3})
    write_hparams(tmp_path, "KN/m.yaml", {"steps": 20})
    arch = Architecture("unknown-type", 6)
    faithful = EditHparamsDataset(str(tmp_path), "m").load()
    fast = EditHparamsDataset(str(tmp_path), "m", profile="fast").load()
    rome = resolve_hparams("ROME", fast, arch, families)
    assert rome.values == {"layers": [3], "v_lr": 1.0, "v_num_grad_steps": 25}
    assert (rome.profile, rome.overlaid) == ("fast", ("v_lr",))
    # a model without its own overlay takes the profile's _default one
    ft = resolve_hparams("FT-L", fast, arch, families)
    assert ft.values == {"layers": [2], "lr": 1e-4, "num_steps": 3}
    # a method without any overlay runs faithful, and says so
    kn = resolve_hparams("KN", fast, arch, families)
    assert (kn.values, kn.profile, kn.overlaid) == ({"steps": 20}, "faithful", ())
    plain = resolve_hparams("ROME", faithful, arch, families)
    assert plain.values["v_lr"] == 0.5 and plain.profile == "faithful"
    # the overlays are not read as models' files
    assert "fast" not in faithful.files and "_default" not in faithful.files


def test_an_unknown_profile_lists_the_profiles(tmp_path):
    write_hparams(tmp_path, "ROME/m.yaml", {"layers": [3]})
    write_hparams(tmp_path, "ROME/fast/m.yaml", {"v_lr": 1.0})
    with pytest.raises(DatasetError, match=r"'turbo'.*\['faithful', 'fast'\]"):
        EditHparamsDataset(str(tmp_path), "m", profile="turbo").load()


def test_faithful_files_leave_kebenchs_extensions_off():
    """kebench's own keys are off in every faithful file; only overlays set them."""
    for path in sorted(HPARAMS.glob("*/*.yaml")):
        values = yaml.safe_load(path.read_text(encoding="utf-8"))
        assert values.get("v_stop_loss") is None, path
        assert values.get("max_neurons") is None, path


def covariance_files(root) -> None:
    """A reference with the published 100,000 covariance texts for ROME, MEMIT and
    AlphaEdit, and fast overlays: MEMIT's 128, AlphaEdit's 256, ROME's without a count
    (it turns the covariance off)."""
    for method in ("ROME", "MEMIT", "AlphaEdit"):
        write_hparams(
            root,
            f"{method}/ref.yaml",
            {"layers": [4], "mom2_n_samples": 100000, "v_lr": 0.5},
        )
    write_hparams(root, "MEMIT/fast/_default.yaml", {"mom2_n_samples": 128})
    write_hparams(root, "AlphaEdit/fast/_default.yaml", {"mom2_n_samples": 256})
    write_hparams(root, "ROME/fast/_default.yaml", {"mom2_adjustment": False})


REF_FAMILY = {"toy": {"reference": "ref", "reference_layers": 8, "modules": {}}}


def test_derived_hparams_take_the_fast_profiles_covariance_count(tmp_path):
    covariance_files(tmp_path)
    files = EditHparamsDataset(str(tmp_path), "folder-model").load()  # faithful run
    arch = Architecture("toy", 8)

    def count(method: str, rule: str | int) -> tuple[int, dict]:
        resolved = resolve_hparams(
            method, files, arch, REF_FAMILY, derived_mom2_n_samples=rule
        )
        return resolved.values["mom2_n_samples"], resolved

    # fast: the method's own fast count; ROME's overlay names none, so the smallest
    # count the fast profile sets (MEMIT's 128, not AlphaEdit's 256)
    assert count("MEMIT", "fast")[0] == 128
    assert count("AlphaEdit", "fast")[0] == 256
    rome, resolved = count("ROME", "fast")
    assert rome == 128
    # the faithful run keeps the rest of ROME faithful: its covariance stays on
    assert "mom2_adjustment" not in resolved.values and resolved.profile == "faithful"
    assert "mom2_n_samples" not in resolved.derived
    assert set(resolved.adjusted) == {"mom2_n_samples"}
    assert "100000" in resolved.adjusted["mom2_n_samples"]
    # faithful: the reference's, as derived; a number (or its digits): that number
    faithful, resolved = count("MEMIT", "faithful")
    assert faithful == 100000 and "mom2_n_samples" in resolved.derived
    assert not resolved.adjusted
    assert count("MEMIT", 500)[0] == 500 and count("MEMIT", "500")[0] == 500
    for wrong in ("fats", 0, "-3", True):
        with pytest.raises(ValueError, match=r"mom2_n_samples.*'fast'.*'faithful'"):
            count("MEMIT", wrong)


def test_the_count_rule_leaves_an_own_file_and_an_overlay_as_they_are(tmp_path):
    covariance_files(tmp_path)
    write_hparams(tmp_path, "MEMIT/mine.yaml", {"mom2_n_samples": 2000})
    write_hparams(tmp_path, "ROME/fast/mine.yaml", {"mom2_n_samples": 64})
    arch = Architecture("toy", 8)
    faithful = EditHparamsDataset(str(tmp_path), "mine").load()
    memit = resolve_hparams(
        "MEMIT", faithful, arch, REF_FAMILY, derived_mom2_n_samples="fast"
    )
    assert memit.values["mom2_n_samples"] == 2000 and not memit.adjusted
    # the fast profile's own overlay for the model sets ROME's count: that one
    fast = EditHparamsDataset(str(tmp_path), "mine", profile="fast").load()
    rome = resolve_hparams("ROME", fast, arch, REF_FAMILY, derived_mom2_n_samples=9)
    assert rome.values["mom2_n_samples"] == 64
    assert "mom2_n_samples" in rome.overlaid and not rome.adjusted


def test_the_provenance_and_the_log_say_which_count_and_how_to_ask_for_the_reference(
    tmp_path, caplog
):
    covariance_files(tmp_path)
    files = EditHparamsDataset(str(tmp_path), "folder-model").load()
    with caplog.at_level("INFO", logger="kebench.editing.hparams"):
        resolved = resolve_all(
            ["ROME", "MEMIT"],
            files,
            Architecture("toy", 8),
            REF_FAMILY,
            derived_mom2_n_samples="fast",
        )
    lines = [r.getMessage() for r in caplog.records if "mom2_n_samples=" in r.message]
    assert len(lines) == 2
    memit = next(line for line in lines if line.startswith("MEMIT on folder-model"))
    assert "mom2_n_samples=128 (the fast profile's count" in memit
    assert "100000" in memit and "--params mom2_n_samples=faithful" in memit
    provenance = {
        m: {"derived": list(r.derived), "adjusted": dict(r.adjusted)}
        for m, r in resolved.items()
    }
    values = {m: r.values for m, r in resolved.items()}
    described = describe_resolved(["ROME", "MEMIT"], values, provenance)
    for method in ("ROME", "MEMIT"):
        assert described["hparams_adjusted"][method].startswith("mom2_n_samples: ")
        assert "mom2_n_samples" not in described["hparams_derived"][method]
        assert described["hparams"][method]["mom2_n_samples"] == 128


def test_the_runs_default_rule_is_fast_and_fits_qwen2(families):
    """The run's rule by default, on a Qwen2 folder (Qwen2.5-7B's 100,000 texts):
    MEMIT and ROME take MEMIT's fast count, the value written in its fast overlay."""
    rule = load_config({})["parameters"]["editing"]["derived_mom2_n_samples"]
    assert rule == "fast"
    fast_memit = yaml.safe_load((HPARAMS / "MEMIT/fast/_default.yaml").read_text())
    files = EditHparamsDataset(str(HPARAMS), "a-qwen2-folder").load()
    for method in ("ROME", "MEMIT"):
        resolved = resolve_hparams(
            method,
            files,
            Architecture("qwen2", 4),
            families,
            derived_mom2_n_samples=rule,
        )
        assert resolved.values["mom2_n_samples"] == fast_memit["mom2_n_samples"]
        assert file_values(method, "qwen2.5-7b")["mom2_n_samples"] == 100000
