"""Every error the SDK raises, each naming the problem and the next step."""

from __future__ import annotations


class WfhostError(Exception):
    """Base of every error raised by the wfhost SDK."""


class ProtocolViolation(WfhostError):
    """The peer broke the wire contract (docs/protocol.md): the channel ends.

    ``kind`` is the class of the violation, as the golden vectors name it:
    ``empty``, ``too_large``, ``truncated``, ``undecodable``, ``seq_gap``,
    ``seq_repeat`` or ``unexpected``.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class ConnectError(WfhostError):
    """The child could not connect: a missing or unusable ``WFHOST_*``
    variable or control fd, or a failed handshake."""


class ChannelClosed(WfhostError):
    """The control channel is closed; nothing more reaches the supervisor."""


class NotReady(WfhostError):
    """Work was reported before ``rt.ready()``: the supervisor treats any
    event before ``Ready`` as a protocol violation, so it was not sent."""


class TooLarge(WfhostError):
    """An event would exceed the supervisor's ``max_frame_bytes``, which it
    treats as a violation; it was not sent."""


class Cancelled(WfhostError):
    """A step was cancelled: by a drain (cancel-behaviour steps), a verified
    signed cancel of its run, a lease expiry, ``Shutdown`` or the loss of the
    channel. ``cause`` names which, ``reason`` says it in words."""

    def __init__(self, cause: str, reason: str) -> None:
        super().__init__(reason)
        self.cause = cause
        self.reason = reason


class GivenBack(WfhostError):
    """The item was given back to the supervisor while its handler waited
    in ``mail.ask`` (protocol 3): a drain began, or the lease ran out, or
    the supervisor sent ``Shutdown``. The runtime sent ``GiveBack`` and
    forgot the item: let this pass. Whatever the handler then returns or
    raises is discarded, and nothing more is sent for the item; its next
    attempt (once the question is answered) runs the handler again from
    the start, and its ``ask`` of the same key returns the stored answer at
    once. ``id`` and ``key`` name the item and the question."""

    def __init__(self, id: int, key: str, message: str) -> None:
        super().__init__(message)
        self.id = id
        self.key = key


class Unsupported(WfhostError):
    """A call the protocol version spoken with this supervisor does not
    have (``mail.ask`` and ``mail.progress`` under protocol 2); nothing was
    sent."""


class CancelRefused(WfhostError):
    """A signed cancel that must not be obeyed. ``kind`` is one of
    ``unknown_key``, ``malformed_signature``, ``invalid_signature``,
    ``wrong_deployment``, ``unknown_run`` or, for a cancel of one mail
    item, ``unknown_item`` (the golden vectors' names)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class MailSettled(WfhostError):
    """A mail item was acknowledged or released twice."""


class ClientError(WfhostError):
    """A control-socket request failed. ``code`` is the exit code the
    ``wfhost`` CLI would use (1: the operation failed, 2: usage or a
    malformed request, 3: supervisor unreachable); the message is the
    supervisor's own when it answered.

    ``outcome_unknown`` is True when the request may or may not have taken
    effect: a ``send`` whose every try ended with its answer lost or with
    the supervisor answering that its outcome is unknown. ``key`` is then
    the idempotency key it was sent under: sending the same payload again
    with ``key=e.key`` enqueues it at most once."""

    def __init__(
        self,
        message: str,
        code: int,
        *,
        outcome_unknown: bool = False,
        key: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.outcome_unknown = outcome_unknown
        self.key = key


class Unreachable(ClientError):
    """The supervisor could not be reached, or the connection ended before
    its answer (code 3; ``answer_lost``: the request was written)."""

    def __init__(
        self,
        message: str,
        answer_lost: bool = False,
        *,
        outcome_unknown: bool = False,
        key: str | None = None,
    ) -> None:
        super().__init__(message, 3, outcome_unknown=outcome_unknown, key=key)
        self.answer_lost = answer_lost
