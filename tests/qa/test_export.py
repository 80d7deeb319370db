"""`kebench export` on the demo's probes: each layout opens in its reader, and the
RippleEdits layout reads back through kebench's own reader (docs/export.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

import kebench
from kebench.cli import cli
from kebench.project import run_pipeline

QA_PIPELINES = ("kg_build", "rule_mining", "qa_generation", "risk_unification")
RISK = "counterfactual"


@pytest.fixture(scope="module")
def qa_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch folder where the demo's QA pipelines ran (seconds: no model)."""
    root = tmp_path_factory.mktemp("qa_demo")
    for name in QA_PIPELINES:
        run_pipeline(name, {"dataset": "demo"}, root)
    return root


@pytest.fixture(scope="module")
def probes(qa_root: Path) -> pd.DataFrame:
    """The probe table the exports are read against, loaded as a plain parquet."""
    table = pd.read_parquet(qa_root / "data/05_model_input/demo/probes.parquet")
    return table[table["risk"] == RISK]


def export(qa_root: Path, out: Path, export_format: str, *risks: str) -> dict:
    result = CliRunner().invoke(
        cli,
        [
            "export",
            "demo",
            "--format",
            export_format,
            "--out",
            str(out),
            "--data-root",
            str(qa_root),
            *(arg for risk in risks for arg in ("--risk", risk)),
        ],
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def exported(
    qa_root: Path, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Path]:
    """The demo's counterfactual probes in each layout."""
    folder = tmp_path_factory.mktemp("exports")
    paths = {
        "knowedit": folder / "demo.knowedit.json",
        "rippleedits": folder / "demo.rippleedits.json",
        "hf": folder / "demo_hf",
    }
    for export_format, path in paths.items():
        export(qa_root, path, export_format, RISK)
    return paths


def test_the_hf_folder_loads_with_one_row_per_probe_and_a_card(exported, probes):
    import datasets  # noqa: PLC0415 - the hf extra

    dataset = datasets.load_from_disk(str(exported["hf"]))
    assert len(dataset) == len(probes)
    assert set(dataset["probe_id"]) == set(probes["probe_id"])
    row = dataset.filter(lambda r: r["probe_id"] == "demo-1/direct/0")[0]
    assert (row["prompt"], row["answer_old"], row["answer_new"]) == (
        "Barack Obama is a citizen of",
        "United States",
        "Canada",
    )
    card = (exported["hf"] / "README.md").read_text()
    _, front, body = card.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["license_details"]["source"].startswith("CC BY-SA 4.0")
    assert meta["dataset_info"]["splits"] == [
        {"name": "train", "num_examples": len(probes)}
    ]
    assert {f["name"] for f in meta["dataset_info"]["features"]} >= {
        "tier",
        "kind",
        "echo",
        "property_path",
        "premises",
        "aliases_new",
    }
    entailed = probes[probes["probe_type"] == "entailed"]
    for (tier, kind), n in entailed.groupby(["tier", "kind"]).size().items():
        assert f"| {tier}/{kind} | {n} |" in body
    assert "kebench export demo --format hf" in body


def test_an_hf_row_keeps_its_derivation_and_premises(exported):
    import datasets  # noqa: PLC0415

    dataset = datasets.load_from_disk(str(exported["hf"])).to_pandas()
    currency = dataset[
        dataset["prompt"]
        == "The currency of the country of citizenship of Barack Obama is"
    ].iloc[0]
    # hand-worked: Obama -citizenship-> Canada (the edit) -currency-> Canadian dollar
    assert (currency["tier"], currency["kind"], currency["echo"]) == (
        "deductive",
        "composition",
        False,
    )
    assert currency["property_path"] == "citizenship/currency"
    assert [list(step) for step in currency["path"]] == [
        ["Barack Obama", "citizenship", "Canada"],
        ["Canada", "currency", "Canadian dollar"],
    ]
    assert [(p["subject"], p["answer"]) for p in currency["premises"]] == [
        ("Canada", "Canadian dollar")
    ]


def test_knowedit_records_read_as_easyedit_reads_them(exported, probes):
    records = json.loads(exported["knowedit"].read_text())
    assert isinstance(records, list)
    assert len(records) == probes["case_id"].nunique()
    for record in records:
        # EasyEdit's KnowEditDataset indexes these keys, locality unconditionally
        assert {"subject", "prompt", "target_new", "ground_truth", "locality"} <= set(
            record
        )
        assert set(record["portability"]) <= {
            "Logical_Generalization",
            "Reasoning",
            "Subject_Aliasing",
        }
        for items in (*record["portability"].values(), *record["locality"].values()):
            for item in items:
                # the WikiData layout: a list of names per answer
                assert isinstance(item["prompt"], str)
                assert isinstance(item["ground_truth"][0][0], str)
    with_portability = [r for r in records if any(r["portability"].values())]
    assert len(with_portability) >= 0.8 * len(records)


def test_knowedit_categories_hold_deductive_probes_only(exported, probes):
    records = {
        r["kebench"]["case_id"]: r for r in json.loads(exported["knowedit"].read_text())
    }
    obama = records["demo-1"]
    assert (obama["prompt"], obama["target_new"], obama["ground_truth"]) == (
        "Barack Obama is a citizen of",
        "Canada",
        "United States",
    )
    assert {
        "prompt": "The country of citizenship of Barack Hussein Obama is",
        "ground_truth": [["Canada"]],
        "kind": "subject_alias",
        "echo": True,
        "hops": 1,
    } in obama["portability"]["Subject_Aliasing"]
    reasoning = {
        i["prompt"]: i["ground_truth"][0][0] for i in obama["portability"]["Reasoning"]
    }
    assert reasoning[
        "The currency of the country of citizenship of Barack Obama is"
    ] == ("Canadian dollar")
    tiers = probes.set_index(["case_id", "prompt", "answer_new"])["tier"]
    for case_id, record in records.items():
        for items in record["portability"].values():
            for item in items:
                key = (case_id, item["prompt"], item["ground_truth"][0][0])
                assert tiers.loc[key] == "deductive", key
        for item in record["kebench_inductive"]:
            key = (case_id, item["prompt"], item["ground_truth"][0][0])
            assert "inductive" in set(tiers.loc[[key]]), key
    inductive = probes[probes["tier"] == "inductive"]
    assert sum(len(r["kebench_inductive"]) for r in records.values()) == len(inductive)


@pytest.fixture(scope="module")
def read_back(exported) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The RippleEdits export as `kebench edits FILE --format rippleedits` reads it."""
    result = CliRunner().invoke(
        cli, ["edits", str(exported["rippleedits"]), "--format", "rippleedits"]
    )
    assert result.exit_code == 0, result.output
    lines = [
        json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")
    ]
    requests = pd.DataFrame(
        [line["edit_request"] for line in lines if "edit_request" in line]
    )
    read = pd.DataFrame([line["probe"] for line in lines if "probe" in line])
    return requests, read


def test_rippleedits_reads_back_every_edit_of_every_demo_relation(read_back, qa_root):
    requests, _ = read_back
    edits = pd.read_parquet(qa_root / "data/02_intermediate/demo/edit_requests.parquet")
    columns = ["subject", "target_true", "target_new"]
    assert requests[columns].values.tolist() == edits[columns].values.tolist()
    # P159 is not in RippleEdits' table (kebench's own prompt phrases it); P30 and
    # P35 are, under RippleEdits' names
    assert {"P159", "CONTINENT", "HEAD_OF_STATE"} <= set(requests["relation_id"])
    apple = requests[requests["relation_id"] == "P159"].iloc[0]
    assert apple["relation_label"] == "headquarters location"


def test_rippleedits_round_trip_gives_back_every_deductive_prompt(read_back, probes):
    _, read = read_back
    deductive = probes[probes["tier"] == "deductive"]
    exported_pairs = set(zip(deductive["prompt"], deductive["answer_new"]))
    read_pairs = set(zip(read["text"], read["answer_new"]))
    assert exported_pairs <= read_pairs
    category = dict(zip(read["text"], read["origin"]))
    # hand-worked: the edit is the first hop of the first, the last of the second
    assert (
        category["The currency of the country of citizenship of Barack Obama is"]
        == "Compositionality_I"
    )
    assert (
        category["The country of citizenship of the spouse of Michelle Obama is"]
        == "Compositionality_II"
    )
    assert (
        category["The country of citizenship of Barack Hussein Obama is"]
        == "Subject_Aliasing"
    )


def test_a_probes_premises_are_its_tests_conditions(read_back):
    _, read = read_back
    currency = read[
        read["text"] == "The currency of the country of citizenship of Barack Obama is"
    ].iloc[0]
    conditions = json.loads(currency["premises"])
    assert [(c["subject"], c["answer"]) for c in conditions] == [
        ("Canada", "Canadian dollar")
    ]


def test_every_export_says_what_made_it(exported):
    meta = json.loads(
        exported["knowedit"].with_name("demo.knowedit.meta.json").read_text()
    )
    assert meta["kebench_version"] == kebench.__version__
    assert (meta["source"], meta["risks"], meta["format"]) == (
        "demo",
        [RISK],
        "knowedit",
    )
    assert set(meta["parameters"]) == {
        "kg_build",
        "rule_mining",
        "qa_generation",
        "risk_unification",
    }
    assert "editattack_injections" not in meta["licences"]
    hf_meta = json.loads((exported["hf"] / "kebench_export.json").read_text())
    assert hf_meta["written"]["rows"] == hf_meta["counts"]["probes"]


def test_an_export_of_editattacks_claims_states_their_licence(
    data_dir, qa_root, tmp_path
):
    # the demo's injected claims come from EditAttack's sets in the reference data
    export(qa_root, tmp_path / "bias.json", "knowedit", "bias")
    bias = json.loads((tmp_path / "bias.meta.json").read_text())
    assert bias["licences"]["editattack_injections"].startswith("MIT (EditAttack")
    records = json.loads((tmp_path / "bias.json").read_text())
    # an injected claim is asked as its natural question, not in kebench's QA format
    assert not any(r["prompt"].startswith("Question:") for r in records)


def test_rippleedits_skips_an_injected_claim_with_its_reason(
    data_dir, qa_root, tmp_path
):
    summary = export(qa_root, tmp_path / "m.json", "rippleedits", "misinformation")
    assert summary["records"] == 0
    assert set(summary["skipped"].values()) == {"an injected claim states no relation"}


def test_an_export_before_the_qa_pipelines_names_the_command(tmp_path):
    result = CliRunner().invoke(
        cli,
        [
            "export",
            "demo",
            "--format",
            "hf",
            "--out",
            str(tmp_path / "x"),
            "--data-root",
            str(tmp_path),
        ],
    )
    assert result.exit_code != 0
    assert "--pipelines=kg_build,rule_mining,qa_generation,risk_unification" in (
        result.output
    )
    unknown = CliRunner().invoke(
        cli, ["export", "nosuch", "--format", "hf", "--out", str(tmp_path / "y")]
    )
    assert unknown.exit_code != 0
    assert "unknown dataset source 'nosuch'" in unknown.output
