"""The user-facing ``kebench`` command."""

import logging
import sys

import click


def _log_to_stderr() -> None:
    # Results go to stdout (e.g. AMIE-format rules); logs must never mix into them.
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(levelname)s %(name)s: %(message)s",
        force=True,
    )


@click.group()
@click.version_option(package_name="kebench")
def cli() -> None:
    """kebench: benchmark knowledge edits on their logical consequences."""
    _log_to_stderr()


@cli.command("convert-kg")
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.argument("target", type=click.Path(dir_okay=False))
def convert_kg(source: str, target: str) -> None:
    """Convert a KG file (the paper's DBpedia TSV, Turtle, ...) to N-Triples.

    The output loads into any triple store: `oxigraph load`, Virtuoso's `ld_dir`, ...
    """
    from kebench.kg.oxigraph_server import to_ntriples  # noqa: PLC0415 - keeps --help fast

    to_ntriples(source, target)
    click.echo(f"wrote {target}")


@cli.command("build-demo")
@click.option(
    "--out",
    type=click.Path(file_okay=False),
    default="data/01_raw/demo",
    show_default=True,
    help="Folder to write kg.nt and edit_cases.json into.",
)
def build_demo(out: str) -> None:
    """Rebuild the demo KG and edit cases from the CSV tables in kebench/demo/tables."""
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from kebench.demo.build import write_demo  # noqa: PLC0415

    summary = write_demo(Path(out))
    click.echo(json.dumps(summary, ensure_ascii=False))


@cli.command("serve-kg")
@click.argument(
    "files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False)
)
@click.option(
    "--location", type=click.Path(file_okay=False), required=True, help="Store folder."
)
@click.option("--port", type=int, default=7878, show_default=True)
def serve_kg(files: tuple[str, ...], location: str, port: int) -> None:
    """Load KG files into an Oxigraph store and serve it read-only on 127.0.0.1.

    Point kebench at it with `kedro run --params endpoint=http://127.0.0.1:PORT/query`.
    """
    import threading  # noqa: PLC0415

    from kebench.kg.oxigraph_server import load_store, serve  # noqa: PLC0415

    with serve(load_store(files, location), port=port) as url:
        click.echo(f"SPARQL endpoint: {url} (Ctrl-C stops it)")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            click.echo("stopped")


@cli.command("serve-llm")
@click.option(
    "--model",
    default="smollm2-135m",
    show_default=True,
    help="A registry name, a Hugging Face id or a checkpoint folder, as --params model=.",
)
@click.option("--port", type=int, default=8000, show_default=True)
def serve_llm(model: str, port: int) -> None:
    """Serve a model as an OpenAI-compatible chat endpoint on 127.0.0.1, offline.

    For the LLM question writer and the judge: `kedro run --params
    judge_url=http://127.0.0.1:PORT/v1,evaluation.judge.enabled=true`. For real work,
    point them at vLLM, a llama.cpp server or a hosted API instead.
    """
    import threading  # noqa: PLC0415

    from kebench.project import load_config, project_model  # noqa: PLC0415
    from kebench.qa.chat_server import ChatModel, serve_chat  # noqa: PLC0415

    lm = project_model(model, load_config({"model": model}))
    with serve_chat(ChatModel(lm.model, lm.tokenizer, model), port=port) as (url, _):
        click.echo(f"chat endpoint: {url} (Ctrl-C stops it)")
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            click.echo("stopped")


@cli.command("mine-rules")
@click.argument("kb_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--mins", type=int, help="Support threshold (AMIE -mins). Default 1.")
@click.option(
    "--minhc", type=float, help="Head-coverage threshold; alone, prunes on it."
)
@click.option("--minis", type=int, help="Minimum head relation size (AMIE -minis).")
@click.option("--minc", type=float, help="Standard confidence threshold (default 0).")
@click.option("--minpca", type=float, help="PCA confidence threshold (default 0.1).")
@click.option(
    "--maxad", type=int, help="Most atoms per rule, head included (default 3)."
)
@click.option("--rl", type=int, help="Recursivity limit (default 3).")
@click.option(
    "--format",
    "output_format",
    type=click.Choice(["amie", "jsonl"]),
    default="amie",
    show_default=True,
    help="AMIE's header and rule lines, or one JSON object per rule.",
)
@click.option(
    "--jar",
    type=click.Path(dir_okay=False),
    envvar="KEBENCH_AMIE_JAR",
    help="Run this AMIE jar with java instead of the built-in miner.",
)
def mine_rules_command(  # noqa: PLR0913, PLR0917 - one parameter per AMIE option
    kb_path: str,
    mins: int | None,
    minhc: float | None,
    minis: int | None,
    minc: float | None,
    minpca: float | None,
    maxad: int | None,
    rl: int | None,
    output_format: str,
    jar: str | None,
) -> None:
    """Mine Horn rules from an AMIE TSV knowledge base, exactly as AMIE 3 does.

    With no threshold given this is AMIE's `-mins 1`. Rules go to stdout; with
    `--format amie` the lines are byte-compatible with AMIE's output.
    """
    import json  # noqa: PLC0415 - keeps --help fast

    from kebench.rules import (  # noqa: PLC0415
        HEADER,
        MiningParams,
        RuleMiningError,
        format_rule_line,
        mine_file,
        rule_record,
    )

    if mins is None and minhc is None:
        mins = 1
    try:
        params = MiningParams.from_amie_options(
            mins=mins,
            minhc=minhc,
            minis=minis,
            minc=minc,
            minpca=minpca,
            maxad=maxad,
            rl=rl,
        )
        rules = mine_file(kb_path, params, jar=jar)
    except ValueError as error:
        raise click.UsageError(str(error)) from error
    except RuleMiningError as error:
        raise click.ClickException(str(error)) from error
    if output_format == "amie":
        click.echo(HEADER)
    for rule in rules:
        if output_format == "amie":
            click.echo(format_rule_line(rule))
        else:
            click.echo(json.dumps(rule_record(rule), ensure_ascii=False))
    if not rules:
        click.echo(f"No rule in {kb_path} reaches the thresholds.", err=True)


EDIT_FORMATS = ("counterfact", "zsre", "mquake", "flat_mquake", "mlake", "rippleedits")


@cli.command("edits")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option(
    "--format",
    "edit_format",
    type=click.Choice(EDIT_FORMATS),
    required=True,
    help="The file's dataset format.",
)
@click.option(
    "--risk",
    type=click.Choice(["benign_update", "counterfactual", "misinformation", "bias"]),
    default="counterfactual",
    show_default=True,
)
def edits_command(file: str, edit_format: str, risk: str) -> None:
    """Parse an edit-case FILE as a run would, and print its edit requests and the
    dataset's own probes as JSON lines (``{"edit_request": ...}``, ``{"probe": ...}``).

    A malformed file or record stops with an error naming the file and the record:
    check a file this way before a long run.
    """
    import contextlib  # noqa: PLC0415 - keeps --help fast
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from kebench.kg.edit_cases import (  # noqa: PLC0415
        EditCaseError,
        RawEditCases,
        RelationCatalog,
        dataset_probes,
        load_edit_case_file,
        parse_edit_cases,
    )

    # importing Kedro's project sets its logging to stdout, and logs that there
    with contextlib.redirect_stdout(sys.stderr):
        from kebench.project import load_config  # noqa: PLC0415
    _log_to_stderr()
    # the project's relations, as a run parses with them (RippleEdits' phrases)
    params = load_config({})["parameters"]
    relations = RelationCatalog.from_config(
        params["relations"], params["rippleedits_relations"]
    )
    try:
        raw = RawEditCases(
            Path(file).stem, edit_format, risk, file, load_edit_case_file(file)
        )
        requests = parse_edit_cases(raw, relations)
        probes = dataset_probes(raw, relations)
    except EditCaseError as error:
        raise click.ClickException(str(error)) from error
    for kind, frame in (("edit_request", requests), ("probe", probes)):
        for record in (
            frame.astype(object).where(frame.notna(), None).to_dict("records")
        ):
            click.echo(json.dumps({kind: record}, ensure_ascii=False))


EXPORT_TABLES = (
    "probes",
    "premise_probes",
    "entailed_facts",
    "entailed_questions",
    "edit_requests",
)


@cli.command("export")
@click.argument("source")
@click.option(
    "--format",
    "export_format",
    type=click.Choice(["knowedit", "rippleedits", "hf"]),
    required=True,
    help="knowedit or rippleedits: a JSON file; hf: a Hugging Face dataset folder.",
)
@click.option(
    "--out",
    type=click.Path(),
    required=True,
    help="The JSON file (knowedit, rippleedits) or the folder (hf) to write.",
)
@click.option(
    "--risk",
    "risks",
    multiple=True,
    type=click.Choice(["benign_update", "counterfactual", "misinformation", "bias"]),
    help="Only the probes of this risk (repeat for several). Default: every risk.",
)
@click.option(
    "--data-root",
    type=click.Path(file_okay=False),
    help="The folder whose data/ holds the run's outputs. Default: the project's.",
)
def export_command(
    source: str,
    export_format: str,
    out: str,
    risks: tuple[str, ...],
    data_root: str | None,
) -> None:
    """Export the probes of dataset SOURCE for other tools (docs/export.md), once
    `kedro run --pipelines=kg_build,rule_mining,qa_generation,risk_unification
    --params dataset=SOURCE` has made them. A provenance file goes beside the JSON
    formats (<name>.meta.json); the hf folder holds a dataset card (README.md).
    """
    import contextlib  # noqa: PLC0415 - keeps --help fast
    import json  # noqa: PLC0415
    from pathlib import Path  # noqa: PLC0415

    from kebench import __version__  # noqa: PLC0415
    from kebench.kg.edit_cases import RelationCatalog  # noqa: PLC0415
    from kebench.qa.export import (  # noqa: PLC0415
        ExportError,
        ExportProvenance,
        ExportTables,
        licences,
        probe_rows,
        write_export,
    )

    with contextlib.redirect_stdout(sys.stderr):
        from kebench.project import (  # noqa: PLC0415
            PROJECT_ROOT,
            load_config,
            project_catalog,
        )
    _log_to_stderr()
    # the catalog's "Loading data from ..." lines say nothing an export's user needs
    logging.getLogger("kedro.io").setLevel(logging.WARNING)
    config = load_config({"dataset": source})
    sources = config["globals"]["sources"]
    if source not in sources:
        raise click.UsageError(
            f"unknown dataset source {source!r}; known: {', '.join(sorted(sources))}"
        )
    catalog = project_catalog({"dataset": source}, Path(data_root or PROJECT_ROOT))
    missing = [name for name in EXPORT_TABLES if not catalog.exists(name)]
    if missing:
        raise click.ClickException(
            f"no {', '.join(missing)} for {source} under {data_root or PROJECT_ROOT}: "
            "run `kedro run --pipelines=kg_build,rule_mining,qa_generation,"
            f"risk_unification --params dataset={source}` first"
        )
    params = config["parameters"]
    tables = ExportTables(*(catalog.load(name) for name in EXPORT_TABLES))
    chosen = list(risks) or sorted(tables.probes["risk"].unique())
    spec = sources[source]
    provenance = ExportProvenance(
        kebench_version=__version__,
        source=source,
        source_spec=spec,
        risks=chosen,
        format=export_format,
        command=" ".join(
            [
                "kebench export",
                source,
                f"--format {export_format} --out {out}",
                *(f"--risk {risk}" for risk in risks),
            ]
        ),
        parameters={name: params[name] for name in params["export"]["parameters"]},
        licences=licences(spec, chosen, params["export"]["injection_licence"]),
    )
    relations = RelationCatalog.from_config(
        params["relations"], params["rippleedits_relations"]
    )
    try:
        rows = probe_rows(tables, chosen)
        summary = write_export(rows, export_format, Path(out), provenance, relations)
    except ExportError as error:
        raise click.ClickException(str(error)) from error
    click.echo(json.dumps(summary, ensure_ascii=False))


STATS_DIR_OPTION = click.option(
    "--stats-dir",
    type=click.Path(file_okay=False),
    default="data/06_models/stats",
    show_default=True,
    help="The statistics folder (the catalog's covariance_stats).",
)


@cli.group()
def stats() -> None:
    """Covariance statistics of MEMIT and ROME (mom2): list, export, import."""


@stats.command("list")
@click.option("--model", help="Only this model's statistics.")
@STATS_DIR_OPTION
def stats_list(model: str | None, stats_dir: str) -> None:
    """One JSON line per cached statistic or sampled corpus: its file and provenance."""
    import json  # noqa: PLC0415 - keeps --help fast
    from pathlib import Path  # noqa: PLC0415

    from kebench.editing.stats_archive import describe_stats  # noqa: PLC0415

    root = Path(stats_dir)
    models = [model] if model else sorted(p.name for p in root.glob("*") if p.is_dir())
    for name in models:
        for entry in describe_stats(root, name):
            click.echo(json.dumps(entry, ensure_ascii=False))


@stats.command("export")
@click.option("--model", required=True, help="The model whose statistics to pack.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False),
    help="The archive to write. Default: <model>-stats.tar.",
)
@STATS_DIR_OPTION
def stats_export(model: str, out: str | None, stats_dir: str) -> None:
    """Pack a model's statistics into one tar, with a manifest of sha256 checksums."""
    from pathlib import Path  # noqa: PLC0415 - keeps --help fast

    from kebench.editing.stats_archive import (  # noqa: PLC0415
        StatsArchiveError,
        export_stats,
    )

    target = Path(out or f"{model}-stats.tar")
    try:
        manifest = export_stats(Path(stats_dir), model, target)
    except StatsArchiveError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"wrote {target}: {len(manifest['files'])} files of {model}")


@stats.command("import")
@click.argument("archive", type=click.Path(exists=True, dir_okay=False))
@STATS_DIR_OPTION
def stats_import(archive: str, stats_dir: str) -> None:
    """Install an exported archive's statistics, once every checksum is verified."""
    from pathlib import Path  # noqa: PLC0415 - keeps --help fast

    from kebench.editing.stats_archive import (  # noqa: PLC0415
        StatsArchiveError,
        import_stats,
    )

    try:
        added = import_stats(Path(archive), Path(stats_dir))
    except StatsArchiveError as error:
        raise click.ClickException(str(error)) from error
    click.echo(f"installed {len(added)} new files under {stats_dir}")
    for path in added:
        click.echo(f"  {path}")
