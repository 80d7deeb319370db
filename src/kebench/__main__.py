"""kebench file for ensuring the package is executable as `python -m kebench`."""

from kebench.cli import cli

if __name__ == "__main__":
    cli()
