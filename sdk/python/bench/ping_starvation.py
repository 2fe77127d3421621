"""How long a busy child leaves a Ping unanswered: the reader thread needs
the GIL to answer, and a thread computing in pure Python hands it over only
every switch interval (``sys.getswitchinterval()``, 5 ms by default); one
long call into C that never releases the GIL (``sorted`` of a big list)
holds it for the whole call.

Runs a real child (the blocking SDK) on a real socketpair, pings it every
20 ms for a few seconds while it is idle, while its main thread runs a
pure-Python loop (at the default and at a 1 ms switch interval), and while
it sorts a large list in one call; prints the round trips.

    target/venv/bin/python sdk/python/bench/ping_starvation.py
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from peer import Peer, script  # noqa: E402

CHILD = r"""
import sys, time, wfhost
mode, seconds, interval = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
sys.setswitchinterval(interval)
rt = wfhost.connect()
rt.ready()
rt.custom("start", b"")
end = time.monotonic() + seconds
if mode == "loop":
    x = 0
    while time.monotonic() < end:
        for i in range(1000):
            x += i * i
elif mode == "sort":
    data = [((i * 7919) % 1000003) / 3.0 for i in range(3_000_000)]
    rt.custom("sorting", b"")
    while time.monotonic() < end:
        sorted(data)
else:
    time.sleep(seconds)
rt.custom("done", b"")
rt.wait_closed()
"""


def measure(mode: str, seconds: float, interval: float) -> list[float]:
    peer = Peer(script(CHILD) + [mode, str(seconds), str(interval)])
    try:
        peer.ready()
        peer.expect_custom = None
        start = peer.recv()
        assert getattr(start, "kind", None) == "start", start
        if mode == "sort":
            # Building the list is not the measurement.
            while getattr(peer.recv(60), "kind", None) != "sorting":
                pass
        rtts = []
        nonce = 0
        deadline = time.monotonic() + seconds - 0.2
        while time.monotonic() < deadline:
            nonce += 1
            rtts.append(peer.ping(nonce, timeout=30) * 1000)
            time.sleep(0.02)
        return rtts
    finally:
        peer.kill()


def summary(name: str, ms: list[float]) -> str:
    ms = sorted(ms)
    p = lambda q: ms[min(len(ms) - 1, int(q * len(ms)))]  # noqa: E731
    return (
        f"{name:<44} n={len(ms):4d}  p50 {statistics.median(ms):8.2f} ms  "
        f"p99 {p(0.99):8.2f} ms  max {ms[-1]:8.2f} ms"
    )


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
    print(
        f"python {sys.version.split()[0]}, default switch interval {sys.getswitchinterval() * 1000:.0f} ms"
    )
    print(summary("idle child", measure("idle", seconds, 0.005)))
    print(summary("pure-Python loop, switch interval 5 ms", measure("loop", seconds, 0.005)))
    print(summary("pure-Python loop, switch interval 1 ms", measure("loop", seconds, 0.001)))
    print(summary("sorted() of 3M floats (one C call)", measure("sort", seconds, 0.005)))


if __name__ == "__main__":
    main()
