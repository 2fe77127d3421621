"""Shared fixtures: where the repository, its golden vectors and its built
binaries are."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
VECTORS = REPO / "docs" / "protocol-vectors.json"


@pytest.fixture(scope="session")
def vectors() -> dict:
    """docs/protocol-vectors.json, generated from the Rust codec."""
    with VECTORS.open() as f:
        return json.load(f)


def built_binary(env: str, name: str) -> Path:
    """A workspace binary named by ``env`` or found in target/debug; fails
    (never skips) with the command that builds it."""
    path = Path(os.environ.get(env) or REPO / "target" / "debug" / name)
    if not path.exists():
        pytest.fail(
            f"{path} is missing: run `cargo build --workspace --bins` first "
            f"(or set {env}); scripts/test does both"
        )
    return path
