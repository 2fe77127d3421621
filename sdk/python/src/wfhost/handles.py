"""What the blocking and the asyncio surface's mail items and steps share:
the item's fields and how it is settled, how a handler's return or raise
becomes the item's end (``serve``), the step's token and how its end is
reported. Each surface adds its own ``ack``/``release``, its own way of
calling a handler and of entering and leaving a step."""

from __future__ import annotations

from . import token as t
from .core import Core, Delivery
from .log import log
from .custom import result_bytes
from .errors import Cancelled, ChannelClosed, GivenBack, MailSettled, TooLarge
from .outcome import CANCELLED, SUCCEEDED, Failed, Outcome, check
from .questions import Waiter, check_key, json_bytes
from .token import CancelToken

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Any


class MailItem:
    """One mail item. ``id`` is stable across redeliveries; ``attempt`` is 1
    on the first delivery and more when the child that held it before died
    or was recycled without acknowledging it, so work already done can be
    finalized instead of re-run. Settle it with ``ack`` (done) or
    ``release`` (not done: delivered again, to the next child); an item
    dropped unsettled is released. In protocol 3 a verified cancel of the
    item fires its ``cancelled`` (unless it was declared not cancellable)."""

    __slots__ = ("_core", "_delivery", "id", "attempt", "payload", "_settled", "__weakref__")

    def __init__(self, core: Core, delivery: Delivery) -> None:
        self._core = core
        self._delivery = delivery
        self.id: int = delivery.id
        self.attempt: int = delivery.attempt
        self.payload: bytes = delivery.payload
        self._settled = False

    @property
    def cancellable(self) -> bool:
        """Whether a cancel of this item can stop it (declared when it was
        started: ``cancellable=`` of ``rt.serve`` or ``rt.mail``)."""
        return self._delivery.cancellable

    @property
    def cancel_reason(self) -> str | None:
        """Why the item was cancelled (a verified cancel of it), or None."""
        return self._delivery.token.reason

    def check(self) -> None:
        """Raises ``wfhost.Cancelled`` (cause ``cancel``) if a verified
        cancel of this item has come."""
        token = self._delivery.token
        if token.event.is_set():
            raise Cancelled(t.CANCEL, token.reason or "cancelled")

    def text(self, encoding: str = "utf-8") -> str:
        """The payload as text."""
        return self.payload.decode(encoding)

    def json(self) -> Any:
        """The payload parsed as JSON (``ValueError`` if it is not)."""
        import json  # here: imported once, on the first call, not at start-up

        return json.loads(self.payload)

    @property
    def settled(self) -> bool:
        return self._settled

    @property
    def given_back(self) -> bool:
        """Whether the item was given back to the supervisor while its
        handler waited in ``ask`` (``wfhost.GivenBack``): nothing more is
        sent for it."""
        return self._delivery.given_back

    def _ask(self, key: str, prompt: object, waiter: Waiter) -> bytes | None:
        """Checks the question (nothing is sent if it is bad), then asks it:
        the remembered answer's bytes at once, or None once ``waiter``
        waits."""
        key = check_key(key)
        data = json_bytes(f"the prompt of question {key!r}", prompt)
        return self._core.ask(self._delivery, key, data, waiter)

    def _progress(self, data: object) -> None:
        self._core.progress(self._delivery, json_bytes(f"mail {self.id}'s progress", data))

    def _discarded(self, what: str) -> bool:
        """Whether the item was given back, so ``what`` the handler does now
        is not sent (said on stderr)."""
        if not self._delivery.given_back:
            return False
        if not self._settled:
            self._settled = True
            log(f"mail {self.id} was given back; its {what} is discarded")
        return True

    def _ack(self, outcome: Outcome, result: object = None) -> None:
        if self._discarded("ack"):
            return
        outcome = check(outcome)
        data = result_bytes(result)  # a result that cannot be sent raises here, before anything
        note = self._core.ack(self.id, outcome, data)
        self._settled = True
        if note is not None:
            log(f"mail {self.id}: {note}; it ended Failed")
            raise TooLarge(f"mail {self.id} ended Failed: {note}; return or send a smaller result")

    def _release_quietly(self) -> None:
        if not self._settled:
            self._settled = True
            self._core.release(self.id, quiet=True)

    def _release(self) -> None:
        if self._discarded("release"):
            return
        self._settled = True
        self._core.release(self.id)

    def __del__(self) -> None:
        if not getattr(self, "_settled", True) and not self._delivery.given_back:
            self._core.mail_dropped(self.id)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.Mail id={self.id} attempt={self.attempt} {len(self.payload)} bytes>"


# --- serve: a handler per item ------------------------------------------------


def check_serve_args(handler: object, cancellable: object, workers: object) -> None:
    if not callable(handler):
        raise TypeError(f"the handler must be callable, not {type(handler).__name__}")
    if not isinstance(cancellable, bool) and not callable(cancellable):
        raise TypeError(
            f"cancellable is True, False or a function of the item, not {type(cancellable).__name__}"
        )
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers is a whole number of at least 1, not {workers!r}")


def cancellable_of(cancellable: Any, mail: MailItem) -> bool:
    """What ``cancellable=`` declares for ``mail``: the bool itself, or
    what the function of the item says (if it raises, the item is taken as
    cancellable, with a line on stderr)."""
    if cancellable is True or cancellable is False:
        return cancellable
    try:
        return bool(cancellable(mail))
    except Exception as e:
        log(f"mail {mail.id}: cancellable(mail) raised {e!r}; taking the item as cancellable")
        return True


def handler_returned(mail_id: int, value: object) -> tuple[Outcome, bytes]:
    """The end of an item whose handler returned ``value``: a
    ``wfhost.Failed`` is its outcome (no result); anything else is the
    result of a success, as bytes (a value that cannot be turned into bytes
    fails the item, with a line on stderr)."""
    if isinstance(value, Failed):
        return check(value), b""
    try:
        return SUCCEEDED, result_bytes(value)
    except TypeError as e:
        log(f"mail {mail_id}: {e}; it ends Failed")
        return Failed(f"the result could not be sent: {e}"), b""


def given_back(mail: MailItem) -> bool:
    """Whether the item was given back while its handler ran: what the
    handler returned or raised is then discarded, and nothing is sent."""
    if mail._delivery.given_back:
        mail._settled = True
        return True
    return False


def handler_raised(mail_id: int, exc: Exception) -> Outcome:
    """The end of an item whose handler raised ``exc``: ``Cancelled`` ends
    it cancelled; another exception fails it with ``str(exc)`` (and its
    traceback on stderr)."""
    if isinstance(exc, Cancelled):
        return CANCELLED
    reason = str(exc) or type(exc).__name__
    if isinstance(exc, ChannelClosed):
        return Failed(reason)  # the runtime's closure, seen through rt.closed
    import traceback  # here: only a failing handler needs it

    trace = "".join(traceback.format_exception(exc)).rstrip()
    log(
        f"mail {mail_id}: the handler raised {type(exc).__name__}: {reason}; it ends Failed\n{trace}"
    )
    return Failed(reason)


def end_item(mail: MailItem, outcome: Outcome, result: bytes) -> None:
    """Ends the item as its handler left it, unless the handler settled it
    itself (``ack`` or ``release``) or it was given back; a result too
    large for a frame ends it ``Failed``, with a line on stderr."""
    if mail._settled or given_back(mail):
        return
    try:
        note = mail._core.ack(mail.id, outcome, result)
    except (MailSettled, ChannelClosed):
        note = None  # settled meanwhile, or the runtime closed: nothing to send
    mail._settled = True
    if note is not None:
        log(f"mail {mail.id}: {note}; it ended Failed")


def outcome_of_exit(exc: BaseException | None, token: CancelToken) -> Outcome:
    """How a step whose body ended with ``exc`` is reported: cancelled when
    its token fired or it raised ``Cancelled`` or ``GivenBack`` (its item
    given back while it asked), or an exit (e.g. KeyboardInterrupt);
    failed with ``str(exc)`` on another exception."""
    if token.event.is_set() or isinstance(exc, (Cancelled, GivenBack)):
        return CANCELLED
    if exc is None:
        return SUCCEEDED
    if isinstance(exc, Exception):
        return Failed(str(exc) or type(exc).__name__)
    return CANCELLED


class StepState:
    """A step: its run, name and drain behaviour, the token that says when
    and why it must stop (``cause`` is one of ``drain``, ``lease``,
    ``shutdown``, ``disconnected``, ``cancel``; ``reason`` says it in
    words), and ``outcome``, how it was reported, once it ended."""

    def __init__(self, core: Core, run: str, name: str, drain: str) -> None:
        self._core = core
        self.run = run
        self.name = name
        self.drain = drain
        self._token = CancelToken()
        self._sid: int | None = None
        self.outcome: Outcome | None = None

    @property
    def cause(self) -> str | None:
        return self._token.cause

    @property
    def reason(self) -> str | None:
        return self._token.reason

    def check(self) -> None:
        """Raises ``wfhost.Cancelled`` if the step must stop."""
        if self._token.event.is_set():
            raise self._cancelled()

    def _cancelled(self) -> Cancelled:
        return Cancelled(self._token.cause or "cancel", self._token.reason or "cancelled")

    def _start(self, on_fire: Any = None) -> bool:
        """Reports StepStarted; False (the step reported cancelled at once)
        when it must not begin."""
        if self._sid is not None:
            raise RuntimeError(f"step {self.name!r} of run {self.run!r} was already entered")
        self._sid, self._token = self._core.start_step(self.run, self.name, self.drain, on_fire)
        if self._token.event.is_set():
            self._finish(CANCELLED)
            return False
        return True

    def _finish(self, outcome: Outcome) -> None:
        self.outcome = outcome
        if self._sid is None:
            return
        try:
            self._core.finish_step(self._sid, outcome)
        except ChannelClosed:
            pass  # the runtime's closure, seen through rt.closed; the result stands

    def __repr__(self) -> str:
        state = f"cancelled ({self.cause})" if self._token.event.is_set() else "running"
        return f"<{type(self).__module__}.Step {self.run}/{self.name} drain={self.drain} {state}>"
