"""What the blocking and the asyncio surface's mail items and steps share:
the item's fields and how it is settled, the step's token and how its end
is reported. Each surface adds its own ``ack``/``release`` and its own way
of entering and leaving a step."""

from __future__ import annotations

from .core import Core, Delivery
from .errors import Cancelled, ChannelClosed
from .outcome import CANCELLED, SUCCEEDED, Failed, Outcome, check
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
    dropped unsettled is released."""

    __slots__ = ("_core", "id", "attempt", "payload", "_settled", "__weakref__")

    def __init__(self, core: Core, delivery: Delivery) -> None:
        self._core = core
        self.id: int = delivery.id
        self.attempt: int = delivery.attempt
        self.payload: bytes = delivery.payload
        self._settled = False

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

    def _ack(self, outcome: Outcome) -> None:
        self._core.ack(self.id, check(outcome))
        self._settled = True

    def _release(self) -> None:
        self._settled = True
        self._core.release(self.id)

    def __del__(self) -> None:
        if not getattr(self, "_settled", True):
            self._core.mail_dropped(self.id)

    def __repr__(self) -> str:
        return f"<{type(self).__module__}.Mail id={self.id} attempt={self.attempt} {len(self.payload)} bytes>"


def outcome_of_exit(exc: BaseException | None, token: CancelToken) -> Outcome:
    """How a step whose body ended with ``exc`` is reported: cancelled when
    its token fired or it raised ``Cancelled`` (or an exit, e.g.
    KeyboardInterrupt), failed with ``str(exc)`` on another exception."""
    if token.event.is_set() or isinstance(exc, Cancelled):
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
