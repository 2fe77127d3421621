"""A real ``wfhost supervise`` for the tests that need one (the producer
client): a short temporary state dir, a config, and a stop that leaves no
process behind even when a test fails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from conftest import built_binary


class Supervisor:
    def __init__(self, deployments: str, config_name: str = "wfhost.toml") -> None:
        self.binary = built_binary("WFHOST_BIN", "wfhost")
        # Unix socket paths are limited to 107 bytes: stay short, in /tmp.
        self.dir = Path(tempfile.mkdtemp(prefix="wfh-py-", dir="/tmp"))
        self.config = self.dir / config_name
        # state_dir relative to the config's directory, as operators write it.
        self.config.write_text(
            '[supervisor]\nstate_dir = "state"\n\n'
            + deployments.replace("{python}", sys.executable)
        )
        self.socket = self.dir / "state" / "wfhost.sock"
        self.log = (self.dir / "supervisor.log").open("wb")
        self.proc = subprocess.Popen(
            [str(self.binary), "supervise", "--config", str(self.config)],
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=self.log,
        )
        deadline = time.monotonic() + 20
        import socket

        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"wfhost supervise exited early:\n{self.log_text()}")
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(self.socket))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"the control socket never listened:\n{self.log_text()}"
                    ) from None
                time.sleep(0.02)

    def log_text(self) -> str:
        return (self.dir / "supervisor.log").read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                # SIGKILL: its children die with it (PR_SET_PDEATHSIG).
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        subprocess.run(["rm", "-rf", str(self.dir)], check=False)


def python_child(deployment: str, module: str = "wfhost.conformance_child", extra: str = "") -> str:
    """A [[deployment]] table running ``python -m module``."""
    return (
        f'[[deployment]]\nid = "{deployment}"\n'
        f'command = ["{{python}}", "-m", "{module}"]\n{extra}\n'
    )


def wait_for(what: str, f, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while True:
        got = f()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


__all__ = ["Supervisor", "python_child", "wait_for", "os"]
