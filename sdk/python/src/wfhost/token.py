"""The cancellation signal of one step: it fires when the step must stop,
and says why, so a step can wind down gently on a drain and at once on a
signed cancel."""

from __future__ import annotations

import threading

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Callable

# Causes, least severe first: a token only ever moves to a more severe
# cause, so a drain can later escalate to a verified cancel.
DRAIN = "drain"
LEASE = "lease"
SHUTDOWN = "shutdown"
DISCONNECTED = "disconnected"
CANCEL = "cancel"
SEVERITY = {DRAIN: 1, LEASE: 2, SHUTDOWN: 3, DISCONNECTED: 4, CANCEL: 5}


class CancelToken:
    """Fired at most once (``event``), escalated to more severe causes
    later; ``cause`` and ``reason`` always hold the most severe so far.

    Fired only by the runtime, under its lock; ``on_fire`` callbacks run
    there too and must not block or call back into the runtime."""

    __slots__ = ("event", "cause", "reason", "_callbacks")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.cause: str | None = None
        self.reason: str | None = None
        self._callbacks: list[Callable[[str, str], None]] = []

    def fire(self, cause: str, reason: str) -> None:
        """Fires or escalates; a milder cause than the current one changes
        nothing."""
        if self.cause is not None and SEVERITY[cause] <= SEVERITY[self.cause]:
            return
        self.cause = cause
        self.reason = reason
        self.event.set()
        for callback in self._callbacks:
            callback(cause, reason)

    def on_fire(self, callback: Callable[[str, str], None]) -> None:
        """Calls ``callback(cause, reason)`` on every fire or escalation
        from now on (at once if already fired)."""
        self._callbacks.append(callback)
        if self.cause is not None and self.reason is not None:
            callback(self.cause, self.reason)
