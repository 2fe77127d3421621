"""The runtime's own lines on stderr, which the supervisor logs with the
deployment."""

from __future__ import annotations

import sys


def log(line: str) -> None:
    """One line on stderr, prefixed ``wfhost:``."""
    try:
        sys.stderr.write(f"wfhost: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr closed: nothing to tell
