"""Codec throughput in Python: frames encoded and decoded per second, for a
Pong (the smallest frame) and a Mail with a 4 KiB payload, through the same
functions the runtime uses (``frame.encode_frame`` and
``FrameBuffer.feed``). Each figure is the best of 5 runs of N frames.

    target/venv/bin/python sdk/python/bench/codec_throughput.py
"""

from __future__ import annotations

import sys
import time

from wfhost import frame
from wfhost import messages as m


def rate(message: object, direction: str, n: int) -> tuple[float, float, float]:
    """(encode+decode, encode, decode) frames per second."""
    best_enc = best_dec = best_both = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        frames = [frame.encode_frame(seq, message) for seq in range(1, n + 1)]
        t1 = time.perf_counter()
        buf = frame.FrameBuffer(direction, frame.MAX_FRAME_LIMIT)
        decoded = 0
        for data in frames:
            decoded += len(buf.feed(data))
        t2 = time.perf_counter()
        assert decoded == n
        best_enc = min(best_enc, t1 - t0)
        best_dec = min(best_dec, t2 - t1)
        best_both = min(best_both, t2 - t0)
    return n / best_both, n / best_enc, n / best_dec


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    print(f"python {sys.version.split()[0]}, {n} frames a run, best of 5")
    for name, message, direction in (
        ("Pong (up, 7-byte frame)", m.Pong(12345), "up"),
        ("Mail, 4 KiB payload (down)", m.Mail(17, 1, bytes(range(256)) * 16), "down"),
    ):
        both, enc, dec = rate(message, direction, n)
        print(
            f"{name:<28} encode+decode {both:>10,.0f} frames/s "
            f"({1e6 / both:.2f} µs a frame; encode {enc:,.0f}/s, decode {dec:,.0f}/s)"
        )


if __name__ == "__main__":
    main()
