"""The conformance kit (docs/conformance.md) against both of the SDK's
conformance children: every scenario must pass. The kit is the workspace's
``wfhost-conformance`` binary, ``$WFHOST_CONFORMANCE`` or
``<repo>/target/debug/wfhost-conformance``; its table is printed (``pytest
-s`` shows it) and is in the failure message. The kit mostly waits, so both
runs are started together and each test collects its own."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import built_binary

CHILDREN = ["wfhost.conformance_child", "wfhost.aio.conformance_child"]


@pytest.fixture(scope="module")
def kit_runs():
    kit = built_binary("WFHOST_CONFORMANCE", "wfhost-conformance")
    runs = {
        module: subprocess.Popen(
            [str(kit), "--", sys.executable, "-m", module],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for module in CHILDREN
    }
    yield runs
    for proc in runs.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("module", CHILDREN)
def test_the_conformance_kit_passes(kit_runs, module):
    proc = kit_runs[module]
    try:
        table, _ = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        table, _ = proc.communicate()
        pytest.fail(f"the kit did not finish within 600 s for {module}:\n{table}")
    print(f"\nwfhost-conformance -- python -m {module}\n{table}")
    assert proc.returncode == 0, f"the kit failed for {module}:\n{table}"
    lines = [line for line in table.splitlines() if line.startswith(("PASS ", "FAIL "))]
    assert len(lines) >= 38 and all(line.startswith("PASS ") for line in lines), table
    names = {line.split()[1] for line in lines}
    assert {
        "handshake-v3",
        "handshake-v2-supervisor",
        "mail-started-and-done",
        "result-too-large",
        "cancel-mail-acknowledged",
        "cancel-mail-not-supported",
        "cancel-mail-unknown-item",
        "cancel-mail-forged",
        "redelivery-done-again",
    } <= names, "the kit plays the scenarios of protocol 3"
    assert {
        "ask-answered",
        "ask-answered-at-once",
        "ask-given-back-on-drain",
        "progress",
        "ask-bad-key",
        "ask-cancelled",
    } <= names, "the kit plays the scenarios of a person in the loop"
