"""The asyncio surface's conformance child (``python -m
wfhost.aio.conformance_child``, docs/conformance.md): each mail item on its
own task, each step an ``await rt.step(run, name, drain, body)`` whose task
is cancelled when the step must stop."""

from __future__ import annotations

import asyncio
import sys

import wfhost
import wfhost.aio

from ..conformance_payload import BadPayload, parse, took


def complain(line: str) -> None:
    print(f"wfhost.aio.conformance_child: {line}", file=sys.stderr, flush=True)


async def process(rt: wfhost.aio.Runtime, mail: wfhost.aio.Mail) -> None:
    await rt.custom("conformance.took", took(mail.id, mail.attempt))
    try:
        plan = parse(mail.payload)
    except BadPayload as e:
        await mail.ack(wfhost.Failed(f"bad payload: {e}"))
        return
    if plan.custom is not None:
        await rt.custom(*plan.custom)
    run = plan.run if plan.run is not None else f"mail-{mail.id}"
    outcome: object = wfhost.SUCCEEDED
    for planned in plan.steps:

        async def body(step: wfhost.aio.Step, ms: int = planned.ms) -> None:
            await asyncio.sleep(ms / 1000)

        try:
            if planned.ignore_cancel:
                await _deaf_step(rt, run, planned.name, planned.drain, planned.ms)
            else:
                await rt.step(run, planned.name, planned.drain, body)
        except wfhost.Cancelled:
            outcome = wfhost.CANCELLED
            break
    if outcome != wfhost.CANCELLED and plan.fail is not None:
        outcome = wfhost.Failed(plan.fail)
    await rt.run_terminal(run, outcome)  # type: ignore[arg-type]
    await mail.ack(outcome)  # type: ignore[arg-type]
    if plan.recycle is not None:
        await rt.request_recycle(plan.recycle)


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


async def guarded(rt: wfhost.aio.Runtime, mail: wfhost.aio.Mail) -> None:
    try:
        await process(rt, mail)
    except wfhost.ChannelClosed:
        pass  # the runtime closed under the item; main() reports why


async def main() -> int:
    try:
        rt = await wfhost.aio.connect()
        await rt.ready()
    except wfhost.WfhostError as e:
        complain(f"cannot connect to the supervisor: {e}")
        return 2
    tasks = set()
    async for mail in rt.mail():
        task = asyncio.create_task(guarded(rt, mail))
        tasks.add(task)  # a strong reference, as asyncio asks
        task.add_done_callback(tasks.discard)
        del mail
    # A drain ended the loop: the items in hand finish on their tasks
    # meanwhile. Shutdown or the end of the channel ends the child at once.
    reason = await rt.wait_closed()
    if reason.kind == "failed":
        complain(f"control channel failed: {reason.message}")
    return reason.exit_code


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
