"""The user-facing ``kebench`` command."""

import click


@click.group()
@click.version_option(package_name="kebench")
def cli() -> None:
    """kebench: benchmark knowledge edits on their logical consequences."""
