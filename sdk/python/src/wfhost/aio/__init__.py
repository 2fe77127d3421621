"""The asyncio surface: the blocking surface's names as coroutines and
async iterators, over the same protocol core. The core's reader thread
answers the supervisor, so pings are answered even while the event loop is
busy; the loop is woken (``call_soon_threadsafe``) for mail, drains,
cancels and closure::

    import wfhost.aio

    async def main():
        rt = await wfhost.aio.connect()
        await rt.ready()
        async for mail in rt.mail():               # ends when a drain starts
            run = f"order-{mail.id}"
            try:
                await rt.step(run, "fetch", "cancel", lambda step: fetch(mail.json()))
                async with rt.step(run, "approve", "wait"):
                    await approve()
            except wfhost.Cancelled:
                await rt.run_terminal(run, "cancelled")
                await mail.release()
                continue
            await rt.run_terminal(run, "succeeded")
            await mail.ack("succeeded")
        raise SystemExit((await rt.wait_closed()).exit_code)

A step's task is cancelled (``Task.cancel``) when its token fires: on a
drain for a cancel-behaviour step, on a verified cancel of its run for any
step, and on a lease expiry, ``Shutdown`` or the loss of the channel; the
``asyncio.CancelledError`` is turned into ``wfhost.Cancelled`` (with
``cause`` and ``reason``) as it leaves the step.

``await rt.serve(handler)`` calls ``await handler(mail)`` for each item on a
task of its own; a verified cancel of the item (protocol 3) cancels the
runs of the steps that task started and, when no step of it is being
cancelled already, the task itself.
"""

from __future__ import annotations

import asyncio
import weakref

from .._version import __version__
from ..core import CURRENT_ITEM, STOPPED, CloseReason, Core, Delivery
from ..custom import custom_bytes
from ..handles import (
    MailItem,
    StepState,
    cancellable_of,
    check_serve_args,
    end_item,
    given_back,
    handler_raised,
    handler_returned,
    outcome_of_exit,
)
from ..messages import Custom, Grants, Limits, RecycleRequest
from ..outcome import CANCELLED, SUCCEEDED, Outcome, check
from ..questions import Waiter, parse_answer
from ..runtime import DEFAULT_IMPLEMENTATION, install_sigterm_exit, open_core

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Any, Awaitable, Callable, TypeVar

    T = TypeVar("T")

__all__ = ["Mail", "Runtime", "Step", "connect", "__version__"]


async def connect(
    takes_mail: bool = True,
    implementation: str = DEFAULT_IMPLEMENTATION,
    exit_on_sigterm: bool = True,
) -> "Runtime":
    """Connects to the supervisor (see ``wfhost.connect``); the handshake
    runs in a worker thread so the event loop is not blocked meanwhile."""
    if exit_on_sigterm:
        install_sigterm_exit()  # here: signal handlers belong to the main thread
    core = await asyncio.to_thread(open_core, takes_mail, implementation, False)
    return Runtime(core, asyncio.get_running_loop())


class Runtime:
    """A connected child on an event loop. ``draining`` and ``closed`` are
    ``asyncio.Event``s."""

    def __init__(self, core: Core, loop: asyncio.AbstractEventLoop) -> None:
        self._core = core
        self._loop = loop
        self.deployment: str = core.welcome.deployment
        self.grants: Grants = core.welcome.grants_snapshot
        self.limits: Limits = core.welcome.limits
        self.channel_id: str = core.env.channel_id
        self.protocol: int = core.protocol
        self.draining = asyncio.Event()
        self.closed = asyncio.Event()
        self._changed = asyncio.Event()
        with core.lock:
            core.listeners.append(self._wake)
        self._on_change()

    def _wake(self) -> None:
        """From any thread, under the core's lock: schedule a look."""
        try:
            self._loop.call_soon_threadsafe(self._on_change)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting

    def _on_change(self) -> None:
        self._changed.set()
        if self._core.draining.is_set():
            self.draining.set()
        if self._core.closed.is_set():
            self.closed.set()

    async def ready(self) -> None:
        self._core.ready()

    def _call_soon(self, callback: Callable[[], None]) -> None:
        """From any thread: run ``callback`` on the loop."""
        try:
            self._loop.call_soon_threadsafe(callback)
        except RuntimeError:
            pass  # the loop is closed: nobody is waiting

    def mail(self, cancellable: bool = True) -> "MailIterator":
        """``async for mail in rt.mail():`` ends when a drain starts (or the
        lease runs out, or the runtime closes). In protocol 3 each item is
        started as it is handed out, ``cancellable`` as declared (see
        ``wfhost.Runtime.mail``)."""
        if not isinstance(cancellable, bool):
            raise TypeError(f"cancellable is True or False, not {type(cancellable).__name__}")
        return MailIterator(self, cancellable)

    async def _next_mail(self, start: bool = True, cancellable: bool = True) -> Delivery | None:
        while True:
            self._changed.clear()
            got = self._core.next_mail(0, start, cancellable)
            if got is STOPPED:
                return None
            if got is not None:
                return got  # type: ignore[return-value]
            await self._changed.wait()

    async def serve(
        self,
        handler: Callable[["Mail"], Awaitable[object]],
        *,
        cancellable: bool | Callable[["Mail"], bool] = True,
        workers: int = 1,
    ) -> None:
        """Calls ``await handler(mail)`` for each item, each on a task of its
        own, at most ``workers`` at once, until a drain starts (or the
        lease runs out, or the runtime closes); returns once the items in
        hand are done (at once when the runtime closes). The item's start,
        result and outcome are as in ``wfhost.Runtime.serve``. A verified cancel of the item (protocol 3)
        sets ``mail.cancelled``, cancels the runs of the steps its task
        started (each step's task is cancelled and ``wfhost.Cancelled``
        leaves the step) and, when no step of it is being cancelled
        already, cancels its task: an ``asyncio.CancelledError`` the handler
        lets through ends the item cancelled. ``cancellable=False`` (or a
        function of the item saying False) declares that the handler cannot
        be cancelled: such a cancel is answered ``NotSupported``. Cancelling
        ``serve`` itself cancels the handlers' tasks and leaves their items
        unacknowledged."""
        check_serve_args(handler, cancellable, workers)
        slots = asyncio.Semaphore(workers)
        tasks: set[asyncio.Task] = set()

        def finished(task: asyncio.Task) -> None:
            tasks.discard(task)
            slots.release()

        try:
            while True:
                await slots.acquire()
                got = await self._next_mail(start=False)
                if got is None:
                    slots.release()
                    break
                task = asyncio.create_task(
                    self._handle(Mail(self, got), handler, cancellable),
                    name=f"wfhost-mail-{got.id}",
                )
                tasks.add(task)
                task.add_done_callback(finished)
            # The items in hand finish; a closed runtime (the process is
            # about to exit) is not waited for.
            closed = asyncio.ensure_future(self.closed.wait())
            try:
                while tasks and not closed.done():
                    await asyncio.wait(tasks | {closed}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                closed.cancel()
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise

    async def _handle(
        self, mail: "Mail", handler: Callable[["Mail"], Awaitable[object]], cancellable: Any
    ) -> None:
        """One item of ``serve``, on its own task (so its own context)."""
        core = self._core
        if not core.start(mail._delivery, cancellable_of(cancellable, mail)):
            mail._settled = True  # cancelled or released before it started
            return
        CURRENT_ITEM.set(mail.id)
        task = asyncio.current_task()
        assert task is not None
        ours = False

        def cancel_task() -> None:
            # On the loop. A step of this task being cancelled (the item's
            # cancel cancels its runs first) turns into wfhost.Cancelled as
            # it leaves the step: the task is not cancelled a second time.
            nonlocal ours
            if not task.done() and not ours and task.cancelling() == 0:
                ours = True
                task.cancel(f"wfhost: {mail.cancel_reason}")

        with core.lock:  # tokens are fired under it
            mail._delivery.token.on_fire(lambda cause, reason: self._call_soon(cancel_task))
        try:
            value = await handler(mail)
        except asyncio.CancelledError:
            if not ours:
                mail._release_quietly()  # cancelled from outside: not done
                raise
            outcome, result = CANCELLED, b""
        except Exception as e:
            if given_back(mail):
                return  # GivenBack, or whatever the handler made of it: discarded
            outcome, result = handler_raised(mail.id, e), b""
        except BaseException:
            mail._release_quietly()
            raise
        else:
            outcome, result = handler_returned(mail.id, value)  # it may have finished anyway
        if ours and task.cancelling():
            task.uncancel()  # the item's cancel is over: the task is not being cancelled
        end_item(mail, outcome, result)

    def step(
        self,
        run: str,
        name: str,
        drain: str = "cancel",
        fn: Callable[["Step"], Awaitable[T]] | None = None,
    ) -> Any:
        """A step of ``run``: ``async with rt.step(run, name, drain) as
        step:`` runs the block as the step (in the current task), and
        ``await rt.step(run, name, drain, fn)`` runs ``await fn(step)`` as
        the step and returns its result. The task is cancelled when the
        step must stop, and ``wfhost.Cancelled`` leaves the step."""
        step = Step(self, run, name, drain)
        if fn is None:
            return step
        return _run_step(step, fn)

    async def run_terminal(self, run: str, outcome: Outcome) -> None:
        self._core.run_terminal(run, check(outcome))

    async def request_recycle(self, reason: str) -> None:
        self._core.send(RecycleRequest(str(reason)), "a recycle request")

    async def custom(self, kind: str, data: object = b"") -> None:
        """See ``wfhost.Runtime.custom``: bytes-like, str or a JSON value;
        anything else raises ``TypeError`` here and sends nothing."""
        body = custom_bytes(kind, data)
        self._core.send(Custom(str(kind), body), f"custom event {kind!r}")

    @property
    def close_reason(self) -> CloseReason | None:
        return self._core.close_reason

    async def wait_closed(self) -> CloseReason:
        """Waits until the runtime closes and says why."""
        await self.closed.wait()
        reason = self._core.close_reason
        assert reason is not None
        return reason

    async def close(self) -> None:
        self._core.close_channel()


async def _run_step(step: "Step", fn: Callable[["Step"], Awaitable[T]]) -> T:
    async with step:
        return await fn(step)


class MailIterator:
    def __init__(self, rt: Runtime, cancellable: bool = True) -> None:
        self._rt = rt
        self._cancellable = cancellable

    def __aiter__(self) -> "MailIterator":
        return self

    async def __anext__(self) -> "Mail":
        got = await self._rt._next_mail(True, self._cancellable)
        if got is None:
            raise StopAsyncIteration
        return Mail(self._rt, got)


class Mail(MailItem):
    """One mail item (see ``wfhost.Mail``); ``ack`` and ``release`` are
    coroutines, ``cancelled`` an ``asyncio.Event``."""

    __slots__ = ("cancelled", "_loop")

    def __init__(self, rt: Runtime, delivery: Delivery) -> None:
        super().__init__(rt._core, delivery)
        self._loop = rt._loop
        self.cancelled = asyncio.Event()
        # A weak reference: the token lives as long as the item is held, and
        # an item dropped unsettled must still be collected (and released).
        ref = weakref.ref(self)

        def fired(cause: str, reason: str) -> None:
            mail = ref()
            if mail is not None:
                rt._call_soon(mail.cancelled.set)

        with rt._core.lock:  # tokens are fired under it
            delivery.token.on_fire(fired)

    async def ack(self, outcome: Outcome = SUCCEEDED, result: object = None) -> None:
        """See ``wfhost.Mail.ack``."""
        self._ack(outcome, result)

    async def release(self) -> None:
        self._release()

    async def ask(self, key: str, prompt: object) -> Any:
        """Asks a person question ``key`` with ``prompt`` and waits for the
        answer, parsed JSON, as long as it takes (see ``wfhost.Mail.ask``:
        the same checks, errors, memory of answers and give-back). A
        verified cancel of the item while it waits cancels the handler's
        task in ``rt.serve`` (``asyncio.CancelledError``, which ends the
        item cancelled if let through); with the iterator the ``ask``
        raises ``wfhost.Cancelled``. Cancelling the task that awaits it
        (``asyncio.wait_for``) stops the waiting, not the question: its
        answer is still remembered when it comes."""
        loop = self._loop
        future = loop.create_future()

        def settled() -> None:  # any thread, under the core's lock
            try:
                loop.call_soon_threadsafe(_resolve, future)
            except RuntimeError:
                pass  # the loop is closed: nobody is waiting

        waiter = Waiter(settled)
        answer = self._ask(key, prompt, waiter)
        if answer is not None:
            return parse_answer(answer)
        try:
            await future
        finally:
            if not waiter.done:  # its task was cancelled: no longer asking
                self._core.forget_waiter(self._delivery, key, waiter)
        return waiter.result()

    async def progress(self, data: object) -> None:
        """Reports the item's progress (see ``wfhost.Mail.progress``)."""
        self._progress(data)


def _resolve(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)


class Step(StepState):
    """A running step on the event loop: ``cancelled`` is an
    ``asyncio.Event``; ``cause``, ``reason``, ``outcome`` and ``check()`` as
    in ``wfhost.Step``. Its task is cancelled when the step must stop."""

    def __init__(self, rt: Runtime, run: str, name: str, drain: str) -> None:
        super().__init__(rt._core, run, name, drain)
        self._loop = rt._loop
        self.cancelled = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._active = False
        self._cancelling = False

    def _fired(self, cause: str, reason: str) -> None:
        """From the firing thread, under the core's lock."""
        try:
            self._loop.call_soon_threadsafe(self._cancel_task)
        except RuntimeError:
            pass  # the loop is closed

    def _cancel_task(self) -> None:
        """On the loop: cancels the step's task, once, while it is in the
        step (never after the step ended)."""
        self.cancelled.set()
        if self._active and not self._cancelling and self._task is not None:
            self._cancelling = True
            self._task.cancel(f"wfhost: {self._token.reason}")

    async def __aenter__(self) -> "Step":
        self._task = asyncio.current_task()
        self._active = True
        if not self._start(self._fired):
            self._active = False
            self.cancelled.set()
            raise self._cancelled()
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        self._active = False
        ours = self._cancelling
        if ours and self._task is not None:
            self._task.uncancel()
        if isinstance(exc, asyncio.CancelledError):
            self._finish(CANCELLED)
            if ours:
                raise self._cancelled() from None
            return False  # cancelled from outside the step: stays a task cancellation
        outcome = outcome_of_exit(exc, self._token)
        self._finish(outcome)
        if outcome == CANCELLED and exc is None:
            raise self._cancelled()
        return False
