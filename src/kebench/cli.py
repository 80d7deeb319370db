"""The user-facing ``kebench`` command."""

import click


@click.group()
@click.version_option(package_name="kebench")
def cli() -> None:
    """kebench: benchmark knowledge edits on their logical consequences."""


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
