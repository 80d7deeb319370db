"""The issue-49 figures of `kebench export` on the demo, read back by each layout's reader.

Usage: python benchmarks/export.py [--risk counterfactual]

Runs the demo's QA pipelines under a scratch folder (no model), exports the probes of
``--risk`` in the three layouts, and reads each back: the hf folder with
``datasets.load_from_disk``, the knowedit file as KnowEdit records, the rippleedits file
with kebench's own RippleEdits reader. Prints one JSON object: the probe count, the hf
row count, the knowedit records and the share with non-empty ``portability``, the
deductive (prompt, answer) pairs exported and read back, and whether the targets hold
(hf rows = probes; portability on at least 80 % of the records; at least 90 % of the
deductive pairs read back).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
from pathlib import Path

with contextlib.redirect_stdout(sys.stderr):
    from model_cli import print_result

    from kebench.kg.edit_cases import (
        RawEditCases,
        RelationCatalog,
        dataset_probes,
        load_edit_case_file,
    )
    from kebench.project import load_config, project_catalog, run_pipeline
    from kebench.qa.export import (
        ExportProvenance,
        ExportTables,
        probe_rows,
        write_export,
    )

QA_PIPELINES = ("kg_build", "rule_mining", "qa_generation", "risk_unification")
TABLES = (
    "probes",
    "premise_probes",
    "entailed_facts",
    "entailed_questions",
    "edit_requests",
)


def measure(args: argparse.Namespace) -> dict:
    import datasets  # noqa: PLC0415 - the hf extra

    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for name in QA_PIPELINES:
            run_pipeline(name, {"dataset": "demo"}, root)
        catalog = project_catalog({"dataset": "demo"}, root)
        tables = ExportTables(*(catalog.load(name) for name in TABLES))
        params = load_config({})["parameters"]
        relations = RelationCatalog.from_config(
            params["relations"], params["rippleedits_relations"]
        )
        rows = probe_rows(tables, [args.risk])
        provenance = ExportProvenance(
            "benchmark", "demo", {}, [args.risk], "", "benchmarks/export.py", {}, {}
        )
        out = {
            "hf": root / "hf",
            "knowedit": root / "k.json",
            "rippleedits": root / "r.json",
        }
        for export_format, path in out.items():
            write_export(rows, export_format, path, provenance, relations)
        hf_rows = len(datasets.load_from_disk(str(out["hf"])))
        records = json.loads(out["knowedit"].read_text())
        with_portability = sum(any(r["portability"].values()) for r in records)
        raw = RawEditCases(
            "r",
            "rippleedits",
            args.risk,
            str(out["rippleedits"]),
            load_edit_case_file(out["rippleedits"]),
        )
        read = dataset_probes(raw, relations)
        probes = tables.probes[tables.probes["risk"] == args.risk]
        deductive = probes[probes["tier"] == "deductive"]
        exported = set(zip(deductive["prompt"], deductive["answer_new"], strict=True))
        back = exported & set(zip(read["text"], read["answer_new"], strict=True))
    share = with_portability / len(records) if records else 0.0
    round_trip = len(back) / len(exported) if exported else 0.0
    return {
        "risk": args.risk,
        "probes": len(probes),
        "hf_rows": hf_rows,
        "knowedit_records": len(records),
        "knowedit_with_portability": with_portability,
        "deductive_pairs": len(exported),
        "deductive_pairs_read_back": len(back),
        "targets": {
            "hf_rows_equal_probes": hf_rows == len(probes),
            "portability_share_at_least_0.8": share >= 0.8,  # noqa: PLR2004
            "round_trip_at_least_0.9": round_trip >= 0.9,  # noqa: PLR2004
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--risk", default="counterfactual")
    print_result(measure, parser.parse_args())
