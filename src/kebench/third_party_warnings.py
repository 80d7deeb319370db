"""Where Python warnings go: a library's deprecation notice is for that library's
users who write code against it, not for a person running kebench, so it goes to the
log file (conf/logging.yml's ``kebench.third_party_warnings`` logger). Every other
warning, kebench's own above all, stays on the terminal."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path

import kebench

LOGGER_NAME = "kebench.third_party_warnings"
DEPRECATIONS = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_KEBENCH_DIR = Path(kebench.__file__).parent


def is_third_party_deprecation(
    message: Warning | str, category: type[Warning], filename: str
) -> bool:
    """Whether a warning is a deprecation raised outside kebench: of a deprecation
    category, or saying so in its text (OmegaConf's ``register_new_resolver() is
    deprecated`` is a UserWarning)."""
    if Path(filename).is_relative_to(_KEBENCH_DIR):
        return False
    return issubclass(category, DEPRECATIONS) or "deprecated" in str(message).lower()


def _log_to_file(text: str) -> None:
    logger = logging.getLogger(LOGGER_NAME)
    for handler in logger.handlers:
        # the log file opens on its first record, in a folder (logs/) git does not hold
        if isinstance(handler, logging.FileHandler):
            Path(handler.baseFilename).parent.mkdir(parents=True, exist_ok=True)
    logger.warning("%s", text)


def route_third_party_warnings() -> None:
    """Send third-party deprecations to ``LOGGER_NAME``; leave the others to Python's
    logging of warnings (``py.warnings``, which Kedro's console handler shows)."""
    if getattr(warnings.showwarning, "routes_third_party", False):
        return
    # first: a later captureWarnings(True), which Kedro's RichHandler calls, then keeps
    # this function in place instead of replacing it
    logging.captureWarnings(True)
    shown = warnings.showwarning

    def showwarning(  # noqa: PLR0913, PLR0917 - warnings.showwarning's signature
        message, category, filename, lineno, file=None, line=None
    ):
        # a warning written to a given file is that caller's business
        if file is None and is_third_party_deprecation(message, category, filename):
            text = warnings.formatwarning(message, category, filename, lineno, line)
            _log_to_file(text.rstrip())
        else:
            shown(message, category, filename, lineno, file, line)

    showwarning.routes_third_party = True
    warnings.showwarning = showwarning
