"""python-orders: a wfhost workflow child written with the Python SDK's
blocking API. Every mail item is one order, run ``order-<id>``, of two
steps, one item at a time:

| step    | drain behaviour | does                                           |
|---------|-----------------|------------------------------------------------|
| fetch   | cancel          | fetches the order (``--fetch-ms``), or computes |
|         |                 | it (``--crunch N``: N rounds of SHA-256, CPU)  |
| approve | wait            | a person approves it (``--approve-ms``)        |

The payload is JSON, e.g. ``{"order": "A-17", "approve_ms": 3000}``
(``fetch_ms``, ``approve_ms`` and ``crunch`` override the flags for one
item); any other payload is an order named by its text. ``crunch`` makes
the example CPU-bound, the case ``replicas`` is for: one Python process
uses one core.

What ends a run decides its acknowledgement:

| run ended by                              | RunTerminal | MailAck                          |
|-------------------------------------------|-------------|----------------------------------|
| both steps succeeding                     | succeeded   | succeeded                        |
| a verified signed cancel                  | cancelled   | cancelled: a decision, so done   |
| a drain (fetch stopped), Shutdown, EOF    | cancelled   | none: released for the next child |

Each step that completes leaves a marker file ``<id>.<step>`` in
``$ORDERS_MARKERS`` (default ``./markers``), written atomically once the
step has finished. On every delivery, whatever its ``attempt``, a step
whose marker exists is finalized (not run again), and every other step
runs: the markers, not the attempt number, say what was done.
``attempt > 1`` only means an earlier child was handed the item and did
not acknowledge it (the supervisor sends up to 32 items ahead, and a
child that ends gives back every one it held, started or not), and an
operator's ``wfhost mail retry`` starts an item over at attempt 1. A step
that finished just before a crash, before its marker was written, runs
again. Markers are kept after the item is acknowledged: an ack is sent,
not yet known to be stored, and an item whose ack was lost comes back.
Mail ids are never reused, so markers of done items may be deleted at
leisure. After every ``--recycle-every N`` acknowledged items the child
asks to be recycled. Every line goes to stdout, flushed, so the
supervisor's log tells the story item by item.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from pathlib import Path

import wfhost


def say(line: str) -> None:
    """One line of the story; stdout is a pipe, so flush each line."""
    print(f"orders: {line}", flush=True)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="orders.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--recycle-every",
        type=int,
        default=0,
        metavar="N",
        help="ask to be recycled after every N acknowledged items (0: never)",
    )
    p.add_argument(
        "--fetch-ms",
        type=int,
        default=200,
        help="how long fetch takes (cancel on drain)",
    )
    p.add_argument(
        "--approve-ms",
        type=int,
        default=500,
        help="how long approve takes (waited for on drain)",
    )
    p.add_argument(
        "--crunch",
        type=int,
        default=0,
        metavar="N",
        help="instead of sleeping in fetch, compute N rounds of SHA-256 (CPU-bound work)",
    )
    args = p.parse_args(argv)
    if min(args.recycle_every, args.fetch_ms, args.approve_ms, args.crunch) < 0:
        p.error(
            "--recycle-every, --fetch-ms, --approve-ms and --crunch take numbers of 0 or more"
        )
    return args


def plan(mail: wfhost.Mail, args: argparse.Namespace) -> tuple[str, int, int, int]:
    """The order's name, how long each step takes, and its rounds of work."""
    try:
        doc = mail.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        text = mail.payload.decode("utf-8", "replace").strip()
        return text or f"#{mail.id}", args.fetch_ms, args.approve_ms, args.crunch

    def ms(key: str, default: int) -> int:
        value = doc.get(key, default)
        return value if isinstance(value, int) and value >= 0 else default

    return (
        str(doc.get("order", f"#{mail.id}")),
        ms("fetch_ms", args.fetch_ms),
        ms("approve_ms", args.approve_ms),
        ms("crunch", args.crunch),
    )


def crunch(step: wfhost.Step, rounds: int) -> None:
    """CPU-bound work: ``rounds`` chained SHA-256 digests, checking every
    thousand whether the step must stop (raising ``Cancelled``)."""
    digest = b"wfhost"
    for i in range(rounds):
        digest = hashlib.sha256(digest).digest()
        if i % 1000 == 0:
            step.check()


def mark(path: Path, text: str) -> None:
    """Writes a marker atomically: it exists whole or not at all."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def process(
    rt: wfhost.Runtime, mail: wfhost.Mail, markers: Path, args: argparse.Namespace
) -> bool:
    """Runs one order and settles its mail; True when it was acknowledged."""
    run = f"order-{mail.id}"
    order, fetch_ms, approve_ms, rounds = plan(mail, args)
    say(f"mail {mail.id}: order {order} received (attempt {mail.attempt})")
    steps = (("fetch", "cancel", fetch_ms), ("approve", "wait", approve_ms))
    # The markers are checked on every delivery: an attempt above 1 does
    # not say any step ran, and attempt 1 does not say none did (a retried
    # dead item starts over at 1).
    if mail.attempt > 1:
        done = [
            name for name, _, _ in steps if (markers / f"{mail.id}.{name}").exists()
        ]
        say(
            f"mail {mail.id}: attempt {mail.attempt}: redelivered (an earlier child held it); "
            + (
                f"finalizing {', '.join(done)}"
                if done
                else "no step of it left a marker, so every step runs"
            )
        )
    try:
        for name, drain, ms in steps:
            marker = markers / f"{mail.id}.{name}"
            if marker.exists():
                say(
                    f"mail {mail.id}: {name} already ran on an earlier attempt; finalizing instead of re-running it"
                )
                continue
            with rt.step(run, name, drain) as step:
                if drain == "cancel" and rounds:
                    crunch(step, rounds)
                elif drain == "cancel":
                    step.sleep(
                        ms / 1000
                    )  # ends early, raising Cancelled, if the step must stop
                else:
                    time.sleep(ms / 1000)  # a person deciding: a drain waits for it
            mark(marker, f"{order} {name} done at attempt {mail.attempt}\n")
            say(f"mail {mail.id}: {name} done")
    except wfhost.Cancelled as e:
        rt.run_terminal(run, "cancelled")
        if e.cause == "cancel":
            mail.ack("cancelled")
            say(
                f"mail {mail.id}: cancelled by a verified cancel ({e.reason}); acknowledged cancelled"
            )
            return True
        mail.release()
        say(f"mail {mail.id}: stopped ({e.cause}); left for the next child")
        return False
    rt.run_terminal(run, "succeeded")
    # The markers stay: the ack is written to the channel, not yet stored,
    # and if it is lost (the supervisor dies first) the item comes back and
    # finds its steps done.
    mail.ack("succeeded")
    say(f"mail {mail.id}: order {order} done (attempt {mail.attempt})")
    return True


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    markers = Path(os.environ.get("ORDERS_MARKERS", "markers"))
    try:
        markers.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(
            f"orders: cannot use marker directory {markers}: {e.strerror}; set ORDERS_MARKERS to a writable directory",
            file=sys.stderr,
        )
        return 2
    try:
        rt = wfhost.connect()
        rt.ready()
    except wfhost.WfhostError as e:
        print(f"orders: cannot connect to the supervisor: {e}", file=sys.stderr)
        return 2
    every = args.recycle_every
    say(
        f"ready for deployment {rt.deployment} (fetch {args.fetch_ms} ms, crunch {args.crunch}, approve {args.approve_ms} ms, "
        f"recycle {'every ' + str(every) + ' items' if every else 'never'}, markers in {markers})"
    )
    acked = 0
    try:
        for mail in rt.mail():
            if process(rt, mail, markers, args):
                acked += 1
                if every and acked % every == 0 and not rt.draining.is_set():
                    say(f"served {acked} items: asking to be recycled")
                    rt.request_recycle(f"served {acked} items")
    except wfhost.ChannelClosed as e:
        say(f"the channel closed under an item: {e}")
    if rt.draining.is_set() and rt.close_reason is None:
        say(
            "draining: taking no more mail; waiting for the supervisor to stop this child"
        )
    reason = rt.wait_closed()
    assert reason is not None
    say(f"closed ({reason.kind}): {reason.message}; exiting")
    return reason.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
