"""The asyncio surface's conformance child (``python -m
wfhost.aio.conformance_child``, docs/conformance.md): ``rt.serve`` with
each item on its own task, each step an ``await rt.step(run, name, drain,
body)`` whose task is cancelled when the step must stop, each question an
``await mail.ask`` (a given-back item's ``wfhost.GivenBack`` let through);
the handler returns the item's result and declares itself not cancellable
when the payload says so."""

from __future__ import annotations

import asyncio
import sys

import wfhost
import wfhost.aio

from ..conformance_payload import BadPayload, Plan, cancellable, compact, parse, took

# The supervisor sends at most this many items unacknowledged at once.
IN_FLIGHT = 32


def complain(line: str) -> None:
    print(f"wfhost.aio.conformance_child: {line}", file=sys.stderr, flush=True)


async def process(rt: wfhost.aio.Runtime, mail: wfhost.aio.Mail) -> object:
    await rt.custom("conformance.took", took(mail.id, mail.attempt))
    try:
        plan = parse(mail.payload)
    except BadPayload as e:
        return wfhost.Failed(f"bad payload: {e}")
    if plan.custom is not None:
        await rt.custom(*plan.custom)
    run = plan.run if plan.run is not None else f"mail-{mail.id}"
    cancelled: BaseException | None = None
    failure = await report_progress(mail, plan)
    result = plan.result
    try:
        for planned in plan.steps if failure is None else []:
            if mail.cancelled.is_set():
                cancelled = wfhost.Cancelled("cancel", mail.cancel_reason or "cancelled")
                break

            async def body(step: wfhost.aio.Step, ms: int = planned.ms) -> None:
                await asyncio.sleep(ms / 1000)

            try:
                if planned.ignore_cancel:
                    await _deaf_step(rt, run, planned.name, planned.drain, planned.ms)
                else:
                    await rt.step(run, planned.name, planned.drain, body)
            except wfhost.Cancelled as e:
                cancelled = e
                break
        if cancelled is None and mail.cancelled.is_set():
            cancelled = wfhost.Cancelled("cancel", mail.cancel_reason or "cancelled")
        for asked in plan.asks if cancelled is None and failure is None else []:
            try:
                answer = await mail.ask(asked.key, asked.prompt)
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
    except asyncio.CancelledError as e:
        # The item's own cancel, between steps or while asking: its task
        # was cancelled.
        if not mail.cancelled.is_set():
            raise
        cancelled = e
    if cancelled is None and mail.cancelled.is_set():
        cancelled = wfhost.Cancelled("cancel", mail.cancel_reason or "cancelled")
    if cancelled is not None:
        outcome: object = wfhost.CANCELLED
    elif failure is not None:
        outcome = failure
    elif plan.fail is not None:
        outcome = wfhost.Failed(plan.fail)
    else:
        outcome = wfhost.SUCCEEDED
    await rt.run_terminal(run, outcome)  # type: ignore[arg-type]
    if plan.recycle is not None:
        # Ended here, so the recycle request follows the item's end.
        try:
            await mail.ack(outcome, result if outcome == wfhost.SUCCEEDED else None)  # type: ignore[arg-type]
        except wfhost.TooLarge:
            pass  # ended Failed, said on stderr
        await rt.request_recycle(plan.recycle)
        return None
    if cancelled is not None:
        raise cancelled
    if outcome != wfhost.SUCCEEDED:
        return outcome
    return result


async def report_progress(mail: wfhost.aio.Mail, plan: Plan) -> wfhost.Failed | None:
    """The payload's ``progress`` values, then its ``progress_bytes``
    string; the failure the library's refusal makes of the item."""
    values = list(plan.progress)
    if plan.progress_bytes is not None:
        values.append(plan.progress_string())
    for value in values:
        try:
            await mail.progress(value)
        except (wfhost.TooLarge, wfhost.Unsupported, TypeError, ValueError) as e:
            return wfhost.Failed(str(e))
    return None


async def _deaf_step(rt: wfhost.aio.Runtime, run: str, name: str, drain: str, ms: int) -> None:
    """A step whose body ignores its cancellation and runs the full ``ms``:
    the task's cancellation is swallowed until the time is up, then the
    step reports cancelled (if it was) as it ends."""
    async with rt.step(run, name, drain):
        loop = asyncio.get_running_loop()
        end = loop.time() + ms / 1000
        while (left := end - loop.time()) > 0:
            try:
                await asyncio.sleep(left)
            except asyncio.CancelledError:
                continue


async def guarded(rt: wfhost.aio.Runtime, mail: wfhost.aio.Mail) -> object:
    try:
        return await process(rt, mail)
    except wfhost.ChannelClosed:
        return None  # the runtime closed under the item; main() reports why


async def main() -> int:
    try:
        rt = await wfhost.aio.connect()
        await rt.ready()
    except wfhost.WfhostError as e:
        complain(f"cannot connect to the supervisor: {e}")
        return 2
    await rt.serve(
        lambda mail: guarded(rt, mail),
        cancellable=lambda mail: cancellable(mail.payload),
        workers=IN_FLIGHT,
    )
    # A drain ended serve once the items in hand finished. Shutdown or the
    # end of the channel ends the child at once.
    reason = await rt.wait_closed()
    if reason.kind == "failed":
        complain(f"control channel failed: {reason.message}")
    return reason.exit_code


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
