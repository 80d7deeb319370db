"""What the benchmarks on the real model share: their command line, the model as a
pipeline run converts it (under data/06_models), and one JSON object on stdout."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

# Kedro's rich logging writes to stdout; keep stdout for the one JSON object.
with contextlib.redirect_stdout(sys.stderr):
    pass


def model_parser(doc: str) -> argparse.ArgumentParser:
    """A parser with the options every model benchmark takes."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--model", default="smollm2-135m")
    return parser


@contextlib.contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Everything written to stdout goes to stderr meanwhile, this process's and its
    children's (Dask workers log to the stdout they inherit)."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def print_result(run: Callable[[argparse.Namespace], Any], args) -> None:
    """Run the benchmark with its logs on stderr, then print its result as JSON."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    with stdout_to_stderr():
        result = run(args)
    sys.stdout.write(json.dumps(result) + "\n")
