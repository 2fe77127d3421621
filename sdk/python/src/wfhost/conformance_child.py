"""The blocking surface's conformance child (``python -m
wfhost.conformance_child``, docs/conformance.md): ``rt.serve`` with a
thread per item in hand, each step a ``with rt.step(...)`` block that waits
on ``step.cancelled``, each question a ``mail.ask`` (a given-back item's
``wfhost.GivenBack`` let through); the handler returns the item's result
and declares itself not cancellable when the payload says so."""

from __future__ import annotations

import sys
import time

import wfhost

from .conformance_payload import BadPayload, Plan, cancellable, compact, parse, took

# The supervisor sends at most this many items unacknowledged at once.
IN_FLIGHT = 32


def complain(line: str) -> None:
    print(f"wfhost.conformance_child: {line}", file=sys.stderr, flush=True)


def process(rt: wfhost.Runtime, mail: wfhost.Mail) -> object:
    rt.custom("conformance.took", took(mail.id, mail.attempt))
    try:
        plan = parse(mail.payload)
    except BadPayload as e:
        return wfhost.Failed(f"bad payload: {e}")
    if plan.custom is not None:
        rt.custom(*plan.custom)
    run = plan.run if plan.run is not None else f"mail-{mail.id}"
    cancelled: wfhost.Cancelled | None = None
    failure = report_progress(mail, plan)
    for planned in plan.steps if failure is None else []:
        if mail.cancelled.is_set():
            cancelled = wfhost.Cancelled("cancel", mail.cancel_reason or "cancelled")
            break
        try:
            with rt.step(run, planned.name, planned.drain) as step:
                if planned.ignore_cancel:
                    time.sleep(planned.ms / 1000)
                else:
                    step.cancelled.wait(planned.ms / 1000)
        except wfhost.Cancelled as e:
            cancelled = e
            break
    if cancelled is None and mail.cancelled.is_set():
        cancelled = wfhost.Cancelled("cancel", mail.cancel_reason or "cancelled")
    result = plan.result
    for asked in plan.asks if cancelled is None and failure is None else []:
        try:
            answer = mail.ask(asked.key, asked.prompt)
        except (wfhost.GivenBack, wfhost.ChannelClosed):
            raise  # given back: nothing more is sent for the item
        except wfhost.Cancelled as e:
            cancelled = e
            break
        except Exception as e:  # the library refused the question
            failure = wfhost.Failed(str(e))
            break
        if plan.result is None:
            result = compact(answer)  # the last answer is the result
    if cancelled is not None:
        outcome: object = wfhost.CANCELLED
    elif failure is not None:
        outcome = failure
    elif plan.fail is not None:
        outcome = wfhost.Failed(plan.fail)
    else:
        outcome = wfhost.SUCCEEDED
    rt.run_terminal(run, outcome)  # type: ignore[arg-type]
    if plan.recycle is not None:
        # Ended here, so the recycle request follows the item's end.
        try:
            mail.ack(outcome, result if outcome == wfhost.SUCCEEDED else None)  # type: ignore[arg-type]
        except wfhost.TooLarge:
            pass  # ended Failed, said on stderr
        rt.request_recycle(plan.recycle)
        return None
    if cancelled is not None:
        raise cancelled
    if outcome != wfhost.SUCCEEDED:
        return outcome
    return result


def report_progress(mail: wfhost.Mail, plan: Plan) -> wfhost.Failed | None:
    """The payload's ``progress`` values, then its ``progress_bytes``
    string; the failure the library's refusal makes of the item."""
    values = list(plan.progress)
    if plan.progress_bytes is not None:
        values.append(plan.progress_string())
    for value in values:
        try:
            mail.progress(value)
        except (wfhost.TooLarge, wfhost.Unsupported, TypeError, ValueError) as e:
            return wfhost.Failed(str(e))
    return None


def guarded(rt: wfhost.Runtime, mail: wfhost.Mail) -> object:
    try:
        return process(rt, mail)
    except wfhost.ChannelClosed:
        return None  # the runtime closed under the item; main() reports why


def main() -> int:
    try:
        rt = wfhost.connect()
        rt.ready()
    except wfhost.WfhostError as e:
        complain(f"cannot connect to the supervisor: {e}")
        return 2
    rt.serve(
        lambda mail: guarded(rt, mail),
        cancellable=lambda mail: cancellable(mail.payload),
        workers=IN_FLIGHT,
    )
    # A drain ended serve once the items in hand finished. Shutdown or the
    # end of the channel ends the child at once.
    reason = rt.wait_closed()
    assert reason is not None
    if reason.kind == "failed":
        complain(f"control channel failed: {reason.message}")
    return reason.exit_code


if __name__ == "__main__":
    sys.exit(main())
