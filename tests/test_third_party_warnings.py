"""A library's deprecation notice goes to the log file; kebench's own warnings and
other libraries' other warnings stay on the terminal."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import kebench
from kebench.project import PROJECT_ROOT
from kebench.third_party_warnings import is_third_party_deprecation

OMEGACONF = "/venv/lib/python3.11/site-packages/omegaconf/omegaconf.py"
OWN = str(Path(kebench.__file__).parent / "kg" / "edit_cases.py")


def test_only_other_libraries_deprecations_are_routed_to_the_file():
    # OmegaConf 2.4 says it in a UserWarning's text
    assert is_third_party_deprecation(
        "register_new_resolver() is deprecated and will be removed",
        UserWarning,
        OMEGACONF,
    )
    assert is_third_party_deprecation("x", FutureWarning, OMEGACONF)
    assert is_third_party_deprecation("x", DeprecationWarning, OMEGACONF)
    # another library's other warnings may concern the user
    assert not is_third_party_deprecation("no CUDA device", UserWarning, OMEGACONF)
    # kebench's own warnings always reach the terminal, deprecations included
    assert not is_third_party_deprecation("skipped 3 records", UserWarning, OWN)
    assert not is_third_party_deprecation("x is deprecated", DeprecationWarning, OWN)


def test_kebench_edits_prints_no_warning_and_logs_it_to_the_file(tmp_path):
    """The command, as a user runs it: from a folder with the project's logging
    configuration (Kedro reads conf/logging.yml where it runs)."""
    (tmp_path / "conf").mkdir()
    shutil.copy(PROJECT_ROOT / "conf" / "logging.yml", tmp_path / "conf")
    done = subprocess.run(  # noqa: S603 - our own CLI
        [
            str(Path(sys.executable).with_name("kebench")),
            "edits",
            str(PROJECT_ROOT / "data/01_raw/demo/edit_cases.json"),
            "--format",
            "mquake",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stdout.startswith('{"edit_request": {"case_id": "edit_cases-1"')
    assert "warning" not in done.stderr.lower()
    assert "deprecated" not in done.stderr
    # the logs folder is not in git: the first routed warning makes it
    log = (tmp_path / "logs" / "kebench.log").read_text()
    assert "kebench.third_party_warnings - WARNING" in log
    assert "register_new_resolver() is deprecated" in log
