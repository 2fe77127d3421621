"""The blocking surface: ``wfhost.connect()`` and the handles an ordinary
script holds (the runtime, mail items, steps). Every call may be made from
any thread; the reader thread of :mod:`wfhost.core` answers the supervisor
meanwhile."""

from __future__ import annotations

import os
import signal
import threading

from ._version import __version__
from .channel import already_taken, handshake, take_control_fd
from .core import CURRENT_ITEM, STOPPED, CloseReason, Core
from .custom import custom_bytes
from .env import ENV_ALL, ChildEnv
from .errors import ConnectError
from .handles import (
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
from .messages import Custom, Grants, Limits, RecycleRequest, Welcome
from .outcome import CANCELLED, SUCCEEDED, Outcome, check
from .questions import Waiter, parse_answer

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar

    T = TypeVar("T")

DEFAULT_IMPLEMENTATION = f"wfhost-python/{__version__}"


def open_core(takes_mail: bool, implementation: str, exit_on_sigterm: bool) -> Core:
    """Reads the environment (then removes ``WFHOST_*`` from it, so
    programs the workflow starts never take themselves for children),
    takes fd 3 and completes the handshake."""
    if already_taken():
        raise ConnectError(
            "this process is already connected: there is one control channel, call connect() once"
        )
    env = ChildEnv.from_environ()
    for var in ENV_ALL:
        os.environ.pop(var, None)
    if exit_on_sigterm:
        install_sigterm_exit()
    sock = take_control_fd(env.control_fd)
    try:
        welcome, frames, early = handshake(sock, env, takes_mail, implementation)
    except BaseException:
        sock.close()
        raise
    return Core(env, sock, frames, welcome, early)


def connect(
    takes_mail: bool = True,
    implementation: str = DEFAULT_IMPLEMENTATION,
    exit_on_sigterm: bool = True,
) -> "Runtime":
    """Connects to the supervisor through the inherited control channel
    (fd 3, named by the ``WFHOST_*`` environment) and completes the
    handshake. ``takes_mail=False`` tells the supervisor to refuse
    ``wfhost send`` for this deployment; ``implementation`` is shown in
    ``wfhost status``. With ``exit_on_sigterm`` (and no SIGTERM handler of
    the application's own), SIGTERM raises ``SystemExit(0)`` in the main
    thread: the supervisor sends it with ``Shutdown`` on every stop, and
    this way ``with``/``finally`` blocks run and the exit status is 0.
    Raises ``ConnectError`` when the process was not started by
    ``wfhost supervise``, or the handshake fails."""
    return Runtime(open_core(takes_mail, implementation, exit_on_sigterm))


def install_sigterm_exit() -> None:
    """SIGTERM raises ``SystemExit(0)``; only from the main thread, and
    only where SIGTERM still has its default action."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _exit_zero)


def _exit_zero(signum: int, frame: object) -> None:
    raise SystemExit(0)


class Runtime:
    """A connected child. ``deployment``, ``grants``, ``limits`` come from
    the supervisor's Welcome; ``draining`` is set when a drain starts (or
    the lease runs out); ``closed`` when the runtime closes."""

    def __init__(self, core: Core) -> None:
        self._core = core
        welcome: Welcome = core.welcome
        self.deployment: str = welcome.deployment
        self.grants: Grants = welcome.grants_snapshot
        self.limits: Limits = welcome.limits
        self.channel_id: str = core.env.channel_id
        self.protocol: int = core.protocol
        self.draining: threading.Event = core.draining
        self.closed: threading.Event = core.closed

    def ready(self) -> None:
        """Tells the supervisor this child can take work (``Ready``); the
        supervisor takes no other event before it. Calling it again does
        nothing."""
        self._core.ready()

    def mail(self, cancellable: bool = True) -> "MailIterator":
        """The mail, as an iterator that blocks for the next item and ends
        when a drain starts (or the lease runs out, or the runtime closes).
        Every iterator shares one queue, so threads may take from it in
        turn. An item is held until acknowledged or released; a drain does
        not report ``Drained`` while any is held. In protocol 3 each item is
        started as it is handed out (``MailStarted``, with ``cancellable``:
        False declares that the loop's body cannot be cancelled, so a cancel
        of an item is answered ``NotSupported``)."""
        if not isinstance(cancellable, bool):
            raise TypeError(f"cancellable is True or False, not {type(cancellable).__name__}")
        return MailIterator(self._core, cancellable)

    def serve(
        self,
        handler: Callable[["Mail"], object],
        *,
        cancellable: bool | Callable[["Mail"], bool] = True,
        workers: int = 1,
    ) -> None:
        """Calls ``handler(mail)`` for each item, on ``workers`` threads (this
        one and ``workers - 1`` more), until a drain starts (or the lease
        runs out, or the runtime closes); returns once the items in hand
        are done (at once when the runtime closes: the process is expected
        to exit, and the steps in flight are cancelled). Calling the handler
        starts the item (``MailStarted`` in protocol 3); what it returns is
        the item's result (``MailDone``):
        bytes, bytearray or memoryview as they are, str as UTF-8, None as
        nothing, anything else as its JSON. Returning ``wfhost.Failed(reason)``
        ends it failed; raising ``wfhost.Cancelled`` ends it cancelled; another
        exception fails it with ``str(e)`` (traceback on stderr). A handler
        may also settle its item itself (``mail.ack``, ``mail.release``).

        A verified cancel of the item (protocol 3) sets ``mail.cancelled``
        and cancels the runs of the steps the handler started (on this
        thread), every step whatever its drain behaviour, so the step in
        flight raises ``wfhost.Cancelled``. ``cancellable=False`` declares
        that the handler cannot be cancelled: such a cancel is answered
        ``NotSupported`` and the item runs to its end (a drain still cancels
        its cancel-behaviour steps). ``cancellable`` may also be a function
        of the item, called before the handler, to decide item by item."""
        check_serve_args(handler, cancellable, workers)
        core = self._core
        wake = threading.Event()  # set by every change of the core's, and by a worker's end
        busy = [workers]

        def work() -> None:
            try:
                while True:
                    got = core.next_mail(start=False)
                    if got is STOPPED or got is None:
                        return
                    _handle(core, Mail(core, got), handler, cancellable)  # type: ignore[arg-type]
            finally:
                with core.lock:
                    busy[0] -= 1
                wake.set()

        with core.lock:
            core.listeners.append(wake.set)
        try:
            for i in range(1, workers):
                threading.Thread(target=work, name=f"wfhost-serve-{i}", daemon=True).start()
            work()
            # The other workers finish their items; a closed runtime (the
            # process is about to exit) is not waited for.
            while True:
                wake.clear()
                if busy[0] == 0 or core.closed.is_set():
                    return
                wake.wait()
        finally:
            with core.lock:
                core.listeners.remove(wake.set)

    def step(
        self,
        run: str,
        name: str,
        drain: str = "cancel",
        fn: Callable[["Step"], T] | None = None,
    ) -> Any:
        """A step of ``run``. With ``fn``: runs ``fn(step)`` as the step and
        returns its result. Without: a context manager, reported
        ``StepStarted`` on entry and ``StepFinished`` on exit::

            with rt.step(run, "fetch", drain="cancel") as step:
                ...  # poll step.cancelled or call step.check()

        ``drain="cancel"``: a drain cancels it (its time counts against the
        drain budget); ``drain="wait"``: a drain lets it finish (the budget
        pauses). Either is cancelled by a verified cancel of its run. A step
        that ends cancelled raises ``wfhost.Cancelled`` out of the block, so
        the steps after it do not run; a step that cannot start (a
        cancel-behaviour step during a drain, a step of a cancelled run)
        raises it on entry, without running the body."""
        step = Step(self._core, run, name, drain)
        if fn is None:
            return step
        with step:
            return fn(step)

    def run_terminal(self, run: str, outcome: Outcome) -> None:
        """Reports that ``run`` reached a terminal state (``RunTerminal``).
        A run the cancel cascade already reported is not reported twice."""
        self._core.run_terminal(run, check(outcome))

    def request_recycle(self, reason: str) -> None:
        """Asks the supervisor to replace this child (``RecycleRequest``);
        it drains this one first, so the mail iterator ends soon after."""
        self._core.send(RecycleRequest(str(reason)), "a recycle request")

    def custom(self, kind: str, data: object = b"") -> None:
        """Sends an application-defined event for the supervisor's
        observers (``Custom``). ``data``: bytes, bytearray or memoryview
        (sent as they are), str (sent as UTF-8), or a dict, list, int,
        float, bool or None (sent JSON-encoded). Anything else, or a value
        json cannot encode, raises ``TypeError`` here and sends nothing."""
        body = custom_bytes(kind, data)
        self._core.send(Custom(str(kind), body), f"custom event {kind!r}")

    @property
    def close_reason(self) -> CloseReason | None:
        """Why the runtime closed, or None while it is open."""
        return self._core.close_reason

    def wait_closed(self, timeout: float | None = None) -> CloseReason | None:
        """Waits until the runtime closes (``Shutdown``, the supervisor gone,
        a broken channel) and says why; None if ``timeout`` passes first.
        ``sys.exit(rt.wait_closed().exit_code)`` ends a child as the
        supervisor expects."""
        return self._core.wait_closed(timeout)

    def close(self) -> None:
        """Flushes and closes the sending direction: the supervisor reads
        end of stream, as when this child exits. Exit soon after: a child
        that closed its channel and is still running after ``kill_timeout``
        is killed as a protocol violation."""
        self._core.close_channel()


def _handle(
    core: Core, mail: "Mail", handler: Callable[["Mail"], object], cancellable: Any
) -> None:
    """One item of ``serve``: started, handled on this thread, ended."""
    if not core.start(mail._delivery, cancellable_of(cancellable, mail)):
        mail._settled = True  # cancelled or released before it started
        return
    context = CURRENT_ITEM.set(mail.id)
    try:
        value = handler(mail)
    except Exception as e:
        if given_back(mail):
            return  # GivenBack, or whatever the handler made of it: discarded
        outcome, result = handler_raised(mail.id, e), b""
    except BaseException:
        mail._release_quietly()  # SystemExit, KeyboardInterrupt: not done
        raise
    else:
        outcome, result = handler_returned(mail.id, value)
    finally:
        CURRENT_ITEM.reset(context)
    end_item(mail, outcome, result)


class MailIterator:
    """``for mail in rt.mail():`` ends when no more mail is handed out."""

    def __init__(self, core: Core, cancellable: bool = True) -> None:
        self._core = core
        self._cancellable = cancellable

    def __iter__(self) -> "MailIterator":
        return self

    def __next__(self) -> "Mail":
        got = self._core.next_mail(cancellable=self._cancellable)
        if got is STOPPED or got is None:
            raise StopIteration
        return Mail(self._core, got)  # type: ignore[arg-type]

    def next(self, timeout: float | None = None) -> "Mail | None":
        """The next item, or None when no more mail is handed out or
        ``timeout`` seconds pass first (``rt.draining`` tells which)."""
        got = self._core.next_mail(timeout, cancellable=self._cancellable)
        if got is STOPPED or got is None:
            return None
        return Mail(self._core, got)  # type: ignore[arg-type]


class Mail(MailItem):
    """One mail item (``id``, ``attempt``, ``payload``, ``text()``,
    ``json()``), settled with :meth:`ack` or :meth:`release`; as a context
    manager, released on exit unless acknowledged. ``cancelled`` is a
    ``threading.Event`` set by a verified cancel of the item (protocol 3);
    ``check()`` raises ``wfhost.Cancelled`` once it is."""

    __slots__ = ("cancelled",)

    def __init__(self, core: Core, delivery: Any) -> None:
        super().__init__(core, delivery)
        self.cancelled: threading.Event = delivery.token.event

    def ack(self, outcome: Outcome = SUCCEEDED, result: object = None) -> None:
        """Reports how processing ended: ``"succeeded"``, ``"cancelled"`` or
        ``wfhost.Failed(reason)``, with the item's ``result`` (protocol 3's
        ``MailDone``: bytes-like as is, str as UTF-8, None as nothing,
        another value as its JSON; protocol 2's ``MailAck`` carries none);
        returns once written. The supervisor moves the item to done
        whatever the outcome. A result too large for a frame ends the item
        ``Failed`` (saying so) and raises ``TooLarge``."""
        self._ack(outcome, result)

    def release(self) -> None:
        """Leaves the item unacknowledged: the supervisor delivers it again
        (to the next child, after a drain or recycle)."""
        self._release()

    def ask(self, key: str, prompt: object) -> Any:
        """Asks a person question ``key`` (1 to 256 bytes of UTF-8, naming it
        within the item) with ``prompt`` (a JSON value, at most 64 KiB
        encoded), and blocks until the answer comes, as long as it takes;
        returns the answer, parsed JSON (protocol 3, docs/protocol.md
        §4.12). The answer is remembered for the item: asking an answered
        key again returns it at once, without asking the supervisor; several
        threads asking one key share the one question.

        A bad key raises ``ValueError`` (``TypeError`` for one that is not a
        str), a prompt json cannot encode ``TypeError``, one over 64 KiB
        ``TooLarge``; nothing is sent. Under protocol 2 it raises
        ``Unsupported``. When a drain begins (or the lease runs out, or
        ``Shutdown`` comes) while it waits, or when it is called after
        that, the item is given back to the supervisor and it raises
        ``wfhost.GivenBack``: let it pass (``rt.serve`` discards what the
        handler then returns or raises, and nothing more is sent for the
        item). The item's next attempt, delivered once the question is
        answered, runs the handler again from the start, and its ``ask`` of
        the same key returns the stored answer at once: work done before an
        ``ask`` runs again, so make it idempotent (or ask first). A verified
        cancel of the item while it waits raises ``wfhost.Cancelled``."""
        waiter = Waiter()
        answer = self._ask(key, prompt, waiter)
        if answer is not None:
            return parse_answer(answer)
        try:
            waiter.event.wait()
        finally:
            if not waiter.done:  # interrupted (KeyboardInterrupt): no longer asking
                self._core.forget_waiter(self._delivery, key, waiter)
        return waiter.result()

    def progress(self, data: object) -> None:
        """Reports the item's progress (protocol 3): ``data`` is a JSON value
        (dict, list, str, int, float, bool or None; a str is sent as a JSON
        string), at most 64 KiB encoded, kept in the supervisor's event log
        with the item (``mail_progress``). Returns once written; does not
        wait for anything. A value json cannot encode raises ``TypeError``,
        one over 64 KiB ``TooLarge``, protocol 2 ``Unsupported``; nothing is
        sent."""
        self._progress(data)

    def __enter__(self) -> "Mail":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._settled:
            self.release()


class Step(StepState):
    """A running step (see ``rt.step``). ``cancelled`` is a
    ``threading.Event`` set when the step must stop; ``cause``, ``reason``,
    ``check()``, ``sleep()`` and ``outcome`` say why and how it ended."""

    def __init__(self, core: Core, run: str, name: str, drain: str) -> None:
        super().__init__(core, run, name, drain)
        self.cancelled: threading.Event = self._token.event

    def sleep(self, seconds: float) -> None:
        """Waits ``seconds``, or raises ``wfhost.Cancelled`` as soon as the
        step must stop."""
        self._token.event.wait(seconds)
        self.check()

    def __enter__(self) -> "Step":
        started = self._start()
        self.cancelled = self._token.event
        if not started:
            raise self._cancelled()
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> bool:
        outcome = outcome_of_exit(exc, self._token)
        self._finish(outcome)
        if outcome == CANCELLED and exc is None:
            raise self._cancelled()
        return False
