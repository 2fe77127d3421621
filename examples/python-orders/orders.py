"""python-orders: a wfhost workflow child written with the Python SDK's
blocking API (``rt.serve``). Every mail item is one order, run
``order-<id>``, of two steps, one item at a time:

| step    | drain behaviour | does                                           |
|---------|-----------------|------------------------------------------------|
| fetch   | cancel          | fetches the order (``--fetch-ms``), or computes |
|         |                 | it (``--crunch N``: N rounds of SHA-256, CPU)  |
| approve | wait            | a person approves it (``--approve-ms``); a     |
|         |                 | cancel of the order stops the wait             |

The payload is JSON, e.g. ``{"order": "A-17", "approve_ms": 3000}``
(``fetch_ms``, ``approve_ms``, ``crunch`` and ``approval`` override the
flags for one item); any other payload is an order named by its text.
``crunch`` makes the example CPU-bound, the case ``replicas`` is for: one
Python process uses one core.

**Approval by a person** (``--approval ask``, or ``"approval": "ask"`` in
one order's payload; the default, ``timer``, is the timed step above):
the approve step is replaced by ``mail.ask("approve", {"order", ...})``,
answered with ``wfhost answer ID approve '{"approved": true, "note":
"..."}'``. Approved, the order goes on as with the timer; not approved, it
ends (outcome succeeded: a decision was made) with status ``rejected``.
Either way the result gains ``"approval": {"approved", "note"}``, and the
approve entry of ``steps`` records the wait in this attempt. The question
does not hold the child: a drain gives the order back to the supervisor
(``wfhost.GivenBack``, let through), which delivers it again once the
question is answered; that attempt runs the order from the start,
finalizes ``fetch`` from its marker, and its ``ask`` returns the stored
answer at once. An answer that is not ``{"approved": true|false}`` fails
the order (it cannot be answered again).

What ends a run decides its acknowledgement, and the item's result:

| run ended by                              | RunTerminal | the item ends                     |
|-------------------------------------------|-------------|-----------------------------------|
| both steps succeeding                     | succeeded   | succeeded, status ``approved``    |
| a person's answer ``"approved": false``   | succeeded   | succeeded, status ``rejected``    |
| a verified signed cancel (of the run, or  | cancelled   | cancelled, status ``cancelled``:  |
| of the item: ``wfhost mail cancel``)      |             | a decision, so done               |
| a drain (fetch stopped), Shutdown, EOF    | cancelled   | not at all: released for the next |
|                                           |             | child                             |

The result (protocol 3: stored with the outcome, read by ``wfhost call``
and ``wfhost mail result ID``) is JSON::

    {"order": "A-17", "mail": 1, "status": "approved", "attempt": 1,
     "steps": [{"step": "fetch", "attempt": 1, "pid": 4242, "at": "…", "ms": 201,
                "rounds": 0, "sha256": null, "finalized": false},
               {"step": "approve", …}],
     "stopped": null}

``steps`` lists the steps done, each as its marker records it (``rounds``
and ``sha256``: the digest ``--crunch`` computed; ``finalized``: this
delivery found the step done instead of running it), so an order finalized
from markers returns a result of the same shape as one run in full. ``stopped`` names
the step a verified cancel stopped, and why (status ``cancelled``), or the
error that failed the order (status ``failed``).

Every order can be cancelled: each step stops on the order's cancel
(``fetch`` polls it, ``approve`` waits on it), while a drain still cancels
only ``fetch`` and waits for ``approve``. A redelivered order whose markers
already prove both steps done has nothing left to stop, so it is declared
not cancellable: a cancel of it is answered ``not-supported`` and it ends
approved, as it is.

Each step that completes leaves a marker file ``<id>.<step>`` in
``$ORDERS_MARKERS`` (default ``./markers``), written atomically once the
step has finished: a line of JSON, the step's entry in the result. On
every delivery, whatever its ``attempt``, a step whose marker exists is
finalized (not run again), and every other step runs: the markers, not
the attempt number, say what was done.
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
import json
import os
import sys
import threading
import time
from datetime import datetime, timezone
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
    p.add_argument(
        "--approval",
        choices=("ask", "timer"),
        default="timer",
        help="ask: a person approves each order (mail.ask, answered with `wfhost answer ID "
        "approve '{\"approved\":true}'`); timer: approve takes --approve-ms",
    )
    args = p.parse_args(argv)
    if min(args.recycle_every, args.fetch_ms, args.approve_ms, args.crunch) < 0:
        p.error(
            "--recycle-every, --fetch-ms, --approve-ms and --crunch take numbers of 0 or more"
        )
    return args


def plan(mail: wfhost.Mail, args: argparse.Namespace) -> tuple[str, int, int, int, str]:
    """The order's name, how long each step takes, its rounds of work, and
    how it is approved (``ask`` or ``timer``)."""
    try:
        doc = mail.json()
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        text = mail.payload.decode("utf-8", "replace").strip()
        return text or f"#{mail.id}", args.fetch_ms, args.approve_ms, args.crunch, args.approval

    def ms(key: str, default: int) -> int:
        value = doc.get(key, default)
        return value if isinstance(value, int) and value >= 0 else default

    approval = doc.get("approval")
    return (
        str(doc.get("order", f"#{mail.id}")),
        ms("fetch_ms", args.fetch_ms),
        ms("approve_ms", args.approve_ms),
        ms("crunch", args.crunch),
        approval if approval in ("ask", "timer") else args.approval,
    )


class BadAnswer(ValueError):
    """The person's answer is not ``{"approved": true|false, "note"?: str}``."""


def decision(answer: object) -> tuple[bool, str | None]:
    """Whether the answer approves the order, and its note."""
    if isinstance(answer, dict) and isinstance(answer.get("approved"), bool):
        note = answer.get("note")
        if note is None or isinstance(note, str):
            return answer["approved"], note
    raise BadAnswer(
        f'the answer {answer!r} is not {{"approved": true|false, "note"?: "..."}}; '
        f"an answer is given once, so this order cannot be approved"
    )


def ask_approval(mail: wfhost.Mail, order: str, fetched: dict | None) -> tuple[bool, str | None]:
    """Asks a person to approve the order and waits for the answer as long as
    it takes (``wfhost.GivenBack`` on a drain, ``wfhost.Cancelled`` on a
    cancel of the order, both let through)."""
    prompt = {
        "order": order,
        "mail": mail.id,
        "fetched": None if fetched is None else {k: fetched.get(k) for k in ("ms", "sha256")},
        "question": f'approve order {order}? answer {{"approved": true|false, "note": "..."}}',
    }
    say(
        f"mail {mail.id}: asking for approval (wfhost answer {mail.id} approve "
        f"'{{\"approved\":true}}')"
    )
    return decision(mail.ask("approve", prompt))


def crunch(step: wfhost.Step, rounds: int) -> str:
    """CPU-bound work: ``rounds`` chained SHA-256 digests, checking every
    thousand whether the step must stop (raising ``Cancelled``); returns
    the last digest, in hex."""
    digest = b"wfhost"
    for i in range(rounds):
        digest = hashlib.sha256(digest).digest()
        if i % 1000 == 0:
            step.check()
    return digest.hex()


STEP_FIELDS = ("step", "attempt", "pid", "at", "ms", "rounds", "sha256")


def mark(path: Path, record: dict) -> None:
    """Writes a marker atomically: it exists whole or not at all."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(record) + "\n")
    tmp.replace(path)


def marked(path: Path, name: str) -> dict:
    """The record a marker holds. A marker of an older version of this
    example (a line of text) still proves its step done; what it does not
    say is null."""
    try:
        record = json.loads(path.read_text())
    except ValueError:
        record = None
    if not isinstance(record, dict):
        record = {}
    return {k: record.get(k) for k in STEP_FIELDS} | {"step": name}


def result(
    mail: wfhost.Mail,
    order: str,
    status: str,
    steps: list,
    stopped: dict | None,
    approval: dict | None = None,
) -> dict:
    """An order's result: the same shape whatever ended it, and however
    its steps were done (run now, or finalized from their markers); an
    order a person decided has ``approval`` too."""
    doc = {
        "order": order,
        "mail": mail.id,
        "status": status,
        "attempt": mail.attempt,
        "steps": steps,
        "stopped": stopped,
    }
    if approval is not None:
        doc["approval"] = approval
    return doc


STEPS = (("fetch", "cancel"), ("approve", "wait"))


def nothing_left_to_run(mail: wfhost.Mail, markers: Path) -> bool:
    """Whether markers prove every step of the order done: its handler then
    has nothing left that a cancel could stop."""
    return all((markers / f"{mail.id}.{name}").exists() for name, _ in STEPS)


def process(
    rt: wfhost.Runtime, mail: wfhost.Mail, markers: Path, args: argparse.Namespace
) -> bool:
    """Runs one order and settles its mail, with its result; True when it
    was acknowledged."""
    run = f"order-{mail.id}"
    order, fetch_ms, approve_ms, rounds, approval = plan(mail, args)
    say(f"mail {mail.id}: order {order} received (attempt {mail.attempt})")
    steps = (("fetch", "cancel", fetch_ms), ("approve", "wait", approve_ms))
    done_steps: list[dict] = []
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
    current = None
    decided = None  # a person's answer, in ask mode: {"approved", "note"}
    try:
        for name, drain, ms in steps:
            current = name
            marker = markers / f"{mail.id}.{name}"
            if marker.exists():
                say(
                    f"mail {mail.id}: {name} already ran on an earlier attempt; finalizing instead of re-running it"
                )
                done_steps.append(marked(marker, name) | {"finalized": True})
                continue
            began = time.monotonic()
            digest = None
            if name == "approve" and approval == "ask":
                # Not a step: the question is the supervisor's to keep, and
                # its answer the record (asked again on a later attempt, it
                # returns at once), so it leaves no marker either.
                fetched = done_steps[0] if done_steps else None
                approved, note = ask_approval(mail, order, fetched)
                decided = {"approved": approved, "note": note}
                entry = step_record(name, mail, began, rounds, None)
                done_steps.append(entry | {"finalized": False})
                say(
                    f"mail {mail.id}: {'approved' if approved else 'rejected'} by a person"
                    + (f" ({note})" if note else "")
                )
                continue
            with rt.step(run, name, drain) as step:
                if drain == "cancel" and rounds:
                    digest = crunch(step, rounds)
                else:
                    # Ends early, raising Cancelled, if the step must stop:
                    # fetch on a drain or a cancel; approve (a person
                    # deciding, whom a drain waits for) on a cancel only.
                    step.sleep(ms / 1000)
            record = step_record(name, mail, began, rounds, digest)
            mark(marker, record)
            done_steps.append(record | {"finalized": False})
            say(f"mail {mail.id}: {name} done")
    except wfhost.Cancelled as e:
        rt.run_terminal(run, "cancelled")
        if e.cause == "cancel":
            stopped = {"step": current, "reason": e.reason}
            mail.ack("cancelled", result=result(mail, order, "cancelled", done_steps, stopped))
            say(
                f"mail {mail.id}: cancelled by a verified cancel ({e.reason}); acknowledged cancelled"
            )
            return True
        mail.release()
        say(f"mail {mail.id}: stopped ({e.cause}); left for the next child")
        return False
    except (OSError, BadAnswer, wfhost.Unsupported) as e:
        # A marker that cannot be written or read; an answer that says
        # neither yes nor no; ask mode under a supervisor of protocol 2.
        rt.run_terminal(run, wfhost.Failed(str(e)))
        stopped = {"step": current, "reason": str(e)}
        mail.ack(wfhost.Failed(str(e)), result=result(mail, order, "failed", done_steps, stopped))
        say(f"mail {mail.id}: failed: {e}; acknowledged failed")
        return True
    rt.run_terminal(run, "succeeded")
    # The markers stay: the ack is written to the channel, not yet stored,
    # and if it is lost (the supervisor dies first) the item comes back and
    # finds its steps done.
    status = "rejected" if decided is not None and not decided["approved"] else "approved"
    mail.ack("succeeded", result=result(mail, order, status, done_steps, None, decided))
    ended = "done" if status == "approved" else status
    say(f"mail {mail.id}: order {order} {ended} (attempt {mail.attempt})")
    return True


def step_record(
    name: str, mail: wfhost.Mail, began: float, rounds: int, digest: str | None
) -> dict:
    """A step's entry in the result, as its marker records it."""
    return {
        "step": name,
        "attempt": mail.attempt,
        "pid": os.getpid(),
        "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds")[:-6] + "Z",
        "ms": round((time.monotonic() - began) * 1000),
        "rounds": rounds if digest is not None else 0,
        "sha256": digest,
    }


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
        f"ready for deployment {rt.deployment} (fetch {args.fetch_ms} ms, crunch {args.crunch}, "
        f"approve {'by asking' if args.approval == 'ask' else str(args.approve_ms) + ' ms'}, "
        f"recycle {'every ' + str(every) + ' items' if every else 'never'}, markers in {markers})"
    )
    acked = 0
    counting = threading.Lock()

    def handle(mail: wfhost.Mail) -> None:
        """One order; it settles its item itself (ack with the result, or release)."""
        nonlocal acked
        try:
            if not process(rt, mail, markers, args):
                return
        except wfhost.ChannelClosed as e:
            say(f"the channel closed under an item: {e}")
            return
        except wfhost.GivenBack:
            # A drain came while the order waited for its approval: the
            # supervisor holds it until the question is answered, then the
            # next child runs it again. Nothing more is sent for it here.
            say(f"mail {mail.id}: given back while it waits for approval; a later child ends it")
            raise
        with counting:
            acked += 1
            served = acked
        if every and served % every == 0 and not rt.draining.is_set():
            say(f"served {served} items: asking to be recycled")
            rt.request_recycle(f"served {served} items")

    # One order at a time (asking people: 8 at once, so orders waiting for
    # a person never keep the next one waiting); returns once a drain
    # starts and the orders in hand are settled or given back.
    workers = 8 if args.approval == "ask" else 1
    rt.serve(
        handle,
        cancellable=lambda mail: not nothing_left_to_run(mail, markers),
        workers=workers,
    )
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
