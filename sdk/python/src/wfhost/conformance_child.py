"""The blocking surface's conformance child (``python -m
wfhost.conformance_child``, docs/conformance.md): each mail item on its own
thread, each step a ``with rt.step(...)`` block that waits on
``step.cancelled``."""

from __future__ import annotations

import sys
import threading
import time

import wfhost

from .conformance_payload import BadPayload, parse, took


def complain(line: str) -> None:
    print(f"wfhost.conformance_child: {line}", file=sys.stderr, flush=True)


def process(rt: wfhost.Runtime, mail: wfhost.Mail) -> None:
    rt.custom("conformance.took", took(mail.id, mail.attempt))
    try:
        plan = parse(mail.payload)
    except BadPayload as e:
        mail.ack(wfhost.Failed(f"bad payload: {e}"))
        return
    if plan.custom is not None:
        rt.custom(*plan.custom)
    run = plan.run if plan.run is not None else f"mail-{mail.id}"
    outcome: object = wfhost.SUCCEEDED
    for planned in plan.steps:
        try:
            with rt.step(run, planned.name, planned.drain) as step:
                if planned.ignore_cancel:
                    time.sleep(planned.ms / 1000)
                else:
                    step.cancelled.wait(planned.ms / 1000)
        except wfhost.Cancelled:
            outcome = wfhost.CANCELLED
            break
    if outcome != wfhost.CANCELLED and plan.fail is not None:
        outcome = wfhost.Failed(plan.fail)
    rt.run_terminal(run, outcome)  # type: ignore[arg-type]
    mail.ack(outcome)  # type: ignore[arg-type]
    if plan.recycle is not None:
        rt.request_recycle(plan.recycle)


def guarded(rt: wfhost.Runtime, mail: wfhost.Mail) -> None:
    try:
        process(rt, mail)
    except wfhost.ChannelClosed:
        pass  # the runtime closed under the item; main() reports why


def main() -> int:
    try:
        rt = wfhost.connect()
        rt.ready()
    except wfhost.WfhostError as e:
        complain(f"cannot connect to the supervisor: {e}")
        return 2
    for mail in rt.mail():
        threading.Thread(
            target=guarded, args=(rt, mail), name=f"mail-{mail.id}", daemon=True
        ).start()
        del mail  # the thread holds it now
    # A drain ended the loop: the items in hand finish on their threads
    # meanwhile. Shutdown or the end of the channel ends the child at once.
    reason = rt.wait_closed()
    assert reason is not None
    if reason.kind == "failed":
        complain(f"control channel failed: {reason.message}")
    return reason.exit_code


if __name__ == "__main__":
    sys.exit(main())
