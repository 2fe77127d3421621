"""Spawn to Ready of a Python child, beside the start of a bare
interpreter: how much the SDK adds to a child's start. The child is started
as the supervisor starts one (socketpair at fd 3, WFHOST_* environment) by
tests/peer.py; the clock runs from just before the fork to the arrival of
Ready. ``python3 -c pass`` is timed from fork to exit. 20 runs each,
alternating, so load drifts hit all of them alike.

    target/venv/bin/python sdk/python/bench/spawn_ready.py
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
sys.path.insert(0, str(HERE.parents[1] / "tests"))

from peer import Peer  # noqa: E402
from wfhost import messages as m  # noqa: E402

REPO = HERE.parents[3]
ORDERS = REPO / "examples" / "python-orders" / "orders.py"


def bare(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(argv, check=True)
    return time.perf_counter() - t


def to_ready(argv: list[str]) -> float:
    t = time.perf_counter()
    peer = Peer(argv, env={"ORDERS_MARKERS": "/tmp/wfh-bench-markers"})
    try:
        peer.handshake()
        peer.expect(m.Ready)
        return time.perf_counter() - t
    finally:
        peer.kill()


def main() -> None:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    cases = {
        "python3 -c pass (python3 on PATH, to exit)": lambda: bare(["python3", "-c", "pass"]),
        "venv python -c pass (the interpreter, to exit)": lambda: bare(
            [sys.executable, "-c", "pass"]
        ),
        "venv python -c 'import wfhost' (to exit)": lambda: bare(
            [sys.executable, "-c", "import wfhost"]
        ),
        "examples/python-orders (spawn to Ready)": lambda: to_ready([sys.executable, str(ORDERS)]),
        "python -m wfhost.conformance_child (to Ready)": lambda: to_ready(
            [sys.executable, "-m", "wfhost.conformance_child"]
        ),
        "python -m wfhost.aio.conformance_child (to Ready)": lambda: to_ready(
            [sys.executable, "-m", "wfhost.aio.conformance_child"]
        ),
    }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(runs):
        for name, run in cases.items():
            samples[name].append(run() * 1000)
    print(
        f"python {sys.version.split()[0]}, {runs} runs each, load average {open('/proc/loadavg').read().split()[0]}"
    )
    print(
        f"python3 on PATH is {shutil.which('python3')} (a pyenv shim is a shell script); venv python is {sys.executable}"
    )
    for name, ms in samples.items():
        ms.sort()
        print(
            f"{name:<52} p50 {statistics.median(ms):7.1f} ms   p90 {ms[int(0.9 * (len(ms) - 1))]:7.1f} ms"
        )


if __name__ == "__main__":
    main()
