"""The AMIE jar as an alternative backend: run ``java -jar`` and parse its output."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from kebench.rules.amie_format import HEADER, parse_amie_output
from kebench.rules.kb import RuleMiningError
from kebench.rules.miner import MiningParams
from kebench.rules.model import Rule

JAR_ENV = "KEBENCH_AMIE_JAR"
JAVA_ENV = "KEBENCH_JAVA"
_STDERR_TAIL = 2000


def configured_jar(jar: str | Path | None = None) -> Path | None:
    """The AMIE jar to use: the given path, else ``$KEBENCH_AMIE_JAR``, else None."""
    chosen = jar or os.environ.get(JAR_ENV)
    return Path(chosen) if chosen else None


def amie_arguments(params: MiningParams) -> list[str]:
    """AMIE command-line options that reproduce the given parameters."""
    if params.pruning_metric == "support":
        arguments = ["-mins", str(params.min_support)]
    else:
        arguments = ["-minhc", repr(params.min_head_coverage)]
    arguments += [
        "-minis", str(params.min_initial_support),
        "-minc", repr(params.min_std_confidence),
        "-minpca", repr(params.min_pca_confidence),
        "-maxad", str(params.max_depth),
        "-rl", str(params.recursivity_limit),
    ]  # fmt: skip
    if not params.skyline:
        arguments.append("-noSkyline")
    if not params.perfect_rule_pruning:
        arguments.append("-dpr")
    return arguments


def run_amie_jar(
    jar: str | Path, kb_path: str | Path, params: MiningParams, java: str | None = None
) -> list[Rule]:
    """Mine with AMIE's jar and return the rules it prints.

    Args:
        jar: path to an AMIE 3 jar (e.g. ``amie-dev.jar``).
        kb_path: the TSV knowledge base.
        params: mining parameters, passed as AMIE options.
        java: the java executable; default ``$KEBENCH_JAVA`` or ``java`` on PATH.

    Raises:
        RuleMiningError: if java or the jar is missing, or AMIE fails.
    """
    java_command = java or os.environ.get(JAVA_ENV) or "java"
    java_path = shutil.which(java_command)
    if java_path is None:
        raise RuleMiningError(f"{java_command}: no java executable to run the AMIE jar")
    if not Path(jar).is_file():
        raise RuleMiningError(f"{jar}: AMIE jar not found")
    command = [java_path, "-jar", str(jar), *amie_arguments(params), str(kb_path)]
    completed = subprocess.run(
        command,
        capture_output=True,
        text=True,
        encoding="utf-8",
        errors="replace",
        check=False,
    )
    if completed.returncode != 0 or HEADER not in completed.stdout:
        raise RuleMiningError(
            f"{jar}: AMIE failed on {kb_path} (exit {completed.returncode}): "
            f"{completed.stderr[-_STDERR_TAIL:].strip() or 'no rule header in its output'}"
        )
    return parse_amie_output(completed.stdout)
