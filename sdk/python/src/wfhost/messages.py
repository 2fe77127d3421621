"""The messages of the control protocol (``ipc/src/message.rs``), with their
body encoding: ``Control`` flows down from the supervisor to a child,
``Event`` flows up. Variants are listed in wire (discriminant) order, and
every struct's fields in wire order. Protocol 3 adds ``CancelMail`` and
``Answer`` down, ``MailStarted`` to ``GiveBack`` up; the codec always knows
them, and the runtime sends them only to a supervisor that speaks 3."""

from __future__ import annotations

from .cancel import (
    ORIGINS,
    CancelRequested,
    MailCancelRequested,
    SignedCancel,
    SignedMailCancel,
)
from .codec import Reader, Writer
from .outcome import CANCELLED, SUCCEEDED, Failed, Outcome
from .record import Record

DRAIN_BEHAVIOURS = ("cancel", "wait")


# --- shared types ---------------------------------------------------------


class Grants(Record):
    """The grants the supervisor read for this child: when (Unix ms), the
    SHA-256 of the body, and the body (the grants file's bytes, JSON)."""

    __slots__ = ("read_at_ms", "digest", "body")

    def __init__(self, read_at_ms: int, digest: bytes, body: bytes) -> None:
        self.read_at_ms = read_at_ms
        self.digest = digest
        self.body = body

    def json(self) -> object:
        """The body parsed as JSON; None when the deployment has no grants."""
        import json  # here: few children read their grants as JSON

        return json.loads(self.body) if self.body else None


class Limits(Record):
    """The bounds in force for this child."""

    __slots__ = ("max_frame_bytes", "max_mail_bytes", "drain_timeout_ms", "liveness_timeout_ms")

    def __init__(
        self,
        max_frame_bytes: int,
        max_mail_bytes: int,
        drain_timeout_ms: int,
        liveness_timeout_ms: int,
    ) -> None:
        self.max_frame_bytes = max_frame_bytes
        self.max_mail_bytes = max_mail_bytes
        self.drain_timeout_ms = drain_timeout_ms
        self.liveness_timeout_ms = liveness_timeout_ms


# A child's answer to a CancelMail (protocol 3): "acknowledged" (the item's
# handler was told to stop), "not_supported" (it declared it cannot be
# cancelled) or Refused(reason).
ACKNOWLEDGED = "acknowledged"
NOT_SUPPORTED = "not_supported"


class Refused(Record):
    """The verdict on a cancel of one item the child refused, in its words."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


# --- down: supervisor to child --------------------------------------------


class Welcome(Record):
    __slots__ = ("protocol", "deployment", "grants_snapshot", "limits")

    def __init__(
        self, protocol: int, deployment: str, grants_snapshot: Grants, limits: Limits
    ) -> None:
        self.protocol = protocol
        self.deployment = deployment
        self.grants_snapshot = grants_snapshot
        self.limits = limits


class Drain(Record):
    __slots__ = ("budget_ms",)

    def __init__(self, budget_ms: int) -> None:
        self.budget_ms = budget_ms


class Cancel(Record):
    __slots__ = ("cancel",)

    def __init__(self, cancel: SignedCancel) -> None:
        self.cancel = cancel


class Mail(Record):
    __slots__ = ("id", "attempt", "payload")

    def __init__(self, id: int, attempt: int, payload: bytes) -> None:
        self.id = id
        self.attempt = attempt
        self.payload = payload


class Ping(Record):
    __slots__ = ("nonce",)

    def __init__(self, nonce: int) -> None:
        self.nonce = nonce


class Shutdown(Record):
    __slots__ = ()


class Lease(Record):
    __slots__ = ("valid_ms",)

    def __init__(self, valid_ms: int) -> None:
        self.valid_ms = valid_ms


class CancelMail(Record):
    """Protocol 3: a signed cancel of one mail item."""

    __slots__ = ("cancel",)

    def __init__(self, cancel: SignedMailCancel) -> None:
        self.cancel = cancel


class Answer(Record):
    """Protocol 3: the answer (JSON bytes) to an item's question ``key``."""

    __slots__ = ("id", "key", "value")

    def __init__(self, id: int, key: str, value: bytes) -> None:
        self.id = id
        self.key = key
        self.value = value


CONTROL = (Welcome, Drain, Cancel, Mail, Ping, Shutdown, Lease, CancelMail, Answer)


# --- up: child to supervisor ----------------------------------------------


class Hello(Record):
    __slots__ = ("protocol", "channel_id", "pid", "takes_mail", "implementation")

    def __init__(
        self, protocol: int, channel_id: str, pid: int, takes_mail: bool, implementation: str
    ) -> None:
        self.protocol = protocol
        self.channel_id = channel_id
        self.pid = pid
        self.takes_mail = takes_mail
        self.implementation = implementation


class Ready(Record):
    __slots__ = ()


class StepStarted(Record):
    __slots__ = ("run", "step", "drain")

    def __init__(self, run: str, step: str, drain: str) -> None:
        self.run = run
        self.step = step
        self.drain = drain


class StepFinished(Record):
    __slots__ = ("run", "step", "outcome")

    def __init__(self, run: str, step: str, outcome: Outcome) -> None:
        self.run = run
        self.step = step
        self.outcome = outcome


class MailAck(Record):
    __slots__ = ("id", "outcome")

    def __init__(self, id: int, outcome: Outcome) -> None:
        self.id = id
        self.outcome = outcome


class Pong(Record):
    __slots__ = ("nonce",)

    def __init__(self, nonce: int) -> None:
        self.nonce = nonce


class RunTerminal(Record):
    __slots__ = ("run", "outcome")

    def __init__(self, run: str, outcome: Outcome) -> None:
        self.run = run
        self.outcome = outcome


class Drained(Record):
    __slots__ = ()


class RecycleRequest(Record):
    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class Custom(Record):
    """Application-defined event; ``data`` is the wire's ``bytes`` field."""

    __slots__ = ("kind", "data")

    def __init__(self, kind: str, data: bytes) -> None:
        self.kind = kind
        self.data = data


class MailStarted(Record):
    """Protocol 3: an item's handler took it (``cancellable``: whether a
    cancel of the item can stop it)."""

    __slots__ = ("id", "cancellable")

    def __init__(self, id: int, cancellable: bool) -> None:
        self.id = id
        self.cancellable = cancellable


class MailDone(Record):
    """Protocol 3: an item is finished with, with what its handler returned."""

    __slots__ = ("id", "outcome", "result")

    def __init__(self, id: int, outcome: Outcome, result: bytes) -> None:
        self.id = id
        self.outcome = outcome
        self.result = result


class MailCancelVerdict(Record):
    """Protocol 3: the answer to a ``CancelMail``: ``ACKNOWLEDGED``,
    ``NOT_SUPPORTED`` or ``Refused(reason)``."""

    __slots__ = ("id", "verdict")

    def __init__(self, id: int, verdict: object) -> None:
        self.id = id
        self.verdict = verdict


class Ask(Record):
    """Protocol 3: an item's handler asks a question (``prompt``: JSON)."""

    __slots__ = ("id", "key", "prompt")

    def __init__(self, id: int, key: str, prompt: bytes) -> None:
        self.id = id
        self.key = key
        self.prompt = prompt


class Progress(Record):
    """Protocol 3: an item's progress (``data``: JSON)."""

    __slots__ = ("id", "data")

    def __init__(self, id: int, data: bytes) -> None:
        self.id = id
        self.data = data


class GiveBack(Record):
    """Protocol 3: the child gives an item back unfinished."""

    __slots__ = ("id", "awaiting_answer")

    def __init__(self, id: int, awaiting_answer: bool) -> None:
        self.id = id
        self.awaiting_answer = awaiting_answer


EVENT = (
    Hello,
    Ready,
    StepStarted,
    StepFinished,
    MailAck,
    Pong,
    RunTerminal,
    Drained,
    RecycleRequest,
    Custom,
    MailStarted,
    MailDone,
    MailCancelVerdict,
    Ask,
    Progress,
    GiveBack,
)

# Messages of protocol 3: never sent to or by a peer that speaks 2.
SINCE_3 = frozenset(CONTROL[7:] + EVENT[10:])


# --- encoding ---------------------------------------------------------------


def _outcome(w: Writer, outcome: Outcome) -> None:
    if outcome == SUCCEEDED:
        w.buf.append(0)
    elif isinstance(outcome, Failed):
        w.buf.append(1)
        w.str(outcome.reason)
    elif outcome == CANCELLED:
        w.buf.append(2)
    else:
        raise ValueError(f"unknown outcome {outcome!r}")


def _drain(w: Writer, drain: str) -> None:
    if drain == "cancel":
        w.buf.append(0)
    elif drain == "wait":
        w.buf.append(1)
    else:
        raise ValueError(f'unknown drain behaviour {drain!r}: use "cancel" or "wait"')


def _signed_cancel(w: Writer, c: SignedCancel) -> None:
    r = c.record
    w.varint(ORIGINS.index(r.origin))
    w.str(r.deployment)
    w.opt_str(r.run)
    w.str(r.reason)
    w.u64(r.at_ms)
    w.fixed(c.key_id, 8)
    w.bytes(c.signature)


def _signed_mail_cancel(w: Writer, c: SignedMailCancel) -> None:
    r = c.record
    w.varint(ORIGINS.index(r.origin))
    w.str(r.deployment)
    w.u64(r.id)
    w.str(r.reason)
    w.u64(r.at_ms)
    w.fixed(c.key_id, 8)
    w.bytes(c.signature)


def _verdict(w: Writer, verdict: object) -> None:
    if verdict == ACKNOWLEDGED:
        w.buf.append(0)
    elif verdict == NOT_SUPPORTED:
        w.buf.append(1)
    elif isinstance(verdict, Refused):
        w.buf.append(2)
        w.str(verdict.reason)
    else:
        raise ValueError(f"unknown cancel verdict {verdict!r}")


def _enc_welcome(w: Writer, m: Welcome) -> None:
    w.u32(m.protocol)
    w.str(m.deployment)
    g = m.grants_snapshot
    w.u64(g.read_at_ms)
    w.fixed(g.digest, 32)
    w.bytes(g.body)
    lim = m.limits
    w.u32(lim.max_frame_bytes)
    w.u32(lim.max_mail_bytes)
    w.u64(lim.drain_timeout_ms)
    w.u64(lim.liveness_timeout_ms)


def _enc_mail(w: Writer, m: Mail) -> None:
    w.u64(m.id)
    w.u32(m.attempt)
    w.bytes(m.payload)


def _enc_hello(w: Writer, m: Hello) -> None:
    w.u32(m.protocol)
    w.str(m.channel_id)
    w.u32(m.pid)
    w.bool(m.takes_mail)
    w.str(m.implementation)


def _enc_step_started(w: Writer, m: StepStarted) -> None:
    w.str(m.run)
    w.str(m.step)
    _drain(w, m.drain)


def _enc_step_finished(w: Writer, m: StepFinished) -> None:
    w.str(m.run)
    w.str(m.step)
    _outcome(w, m.outcome)


def _enc_mail_ack(w: Writer, m: MailAck) -> None:
    w.u64(m.id)
    _outcome(w, m.outcome)


def _enc_run_terminal(w: Writer, m: RunTerminal) -> None:
    w.str(m.run)
    _outcome(w, m.outcome)


def _enc_custom(w: Writer, m: Custom) -> None:
    w.str(m.kind)
    w.bytes(m.data)


def _enc_answer(w: Writer, m: Answer) -> None:
    w.u64(m.id)
    w.str(m.key)
    w.bytes(m.value)


def _enc_mail_started(w: Writer, m: MailStarted) -> None:
    w.u64(m.id)
    w.bool(m.cancellable)


def _enc_mail_done(w: Writer, m: MailDone) -> None:
    w.u64(m.id)
    _outcome(w, m.outcome)
    w.bytes(m.result)


def _enc_verdict(w: Writer, m: MailCancelVerdict) -> None:
    w.u64(m.id)
    _verdict(w, m.verdict)


def _enc_ask(w: Writer, m: Ask) -> None:
    w.u64(m.id)
    w.str(m.key)
    w.bytes(m.prompt)


def _enc_progress(w: Writer, m: Progress) -> None:
    w.u64(m.id)
    w.bytes(m.data)


def _enc_give_back(w: Writer, m: GiveBack) -> None:
    w.u64(m.id)
    w.bool(m.awaiting_answer)


def _nothing(w: Writer, m: object) -> None:
    pass


# type -> (discriminant, body writer)
_ENCODERS = {
    Welcome: (0, _enc_welcome),
    Drain: (1, lambda w, m: w.u64(m.budget_ms)),
    Cancel: (2, lambda w, m: _signed_cancel(w, m.cancel)),
    Mail: (3, _enc_mail),
    Ping: (4, lambda w, m: w.u64(m.nonce)),
    Shutdown: (5, _nothing),
    Lease: (6, lambda w, m: w.u64(m.valid_ms)),
    CancelMail: (7, lambda w, m: _signed_mail_cancel(w, m.cancel)),
    Answer: (8, _enc_answer),
    Hello: (0, _enc_hello),
    Ready: (1, _nothing),
    StepStarted: (2, _enc_step_started),
    StepFinished: (3, _enc_step_finished),
    MailAck: (4, _enc_mail_ack),
    Pong: (5, lambda w, m: w.u64(m.nonce)),
    RunTerminal: (6, _enc_run_terminal),
    Drained: (7, _nothing),
    RecycleRequest: (8, lambda w, m: w.str(m.reason)),
    Custom: (9, _enc_custom),
    MailStarted: (10, _enc_mail_started),
    MailDone: (11, _enc_mail_done),
    MailCancelVerdict: (12, _enc_verdict),
    Ask: (13, _enc_ask),
    Progress: (14, _enc_progress),
    GiveBack: (15, _enc_give_back),
}


def encode_body(message: object, w: Writer) -> None:
    """Appends the encoding of one message (its discriminant, then its
    fields) to ``w``."""
    try:
        index, write = _ENCODERS[type(message)]
    except KeyError:
        raise TypeError(f"{type(message).__name__} is not a protocol message") from None
    w.buf.append(index)
    write(w, message)


# --- decoding ---------------------------------------------------------------


def _dec_outcome(r: Reader) -> Outcome:
    i = r.variant(3, "outcome")
    if i == 0:
        return SUCCEEDED
    if i == 1:
        return Failed(r.str("a failure reason"))
    return CANCELLED


def _dec_signed_cancel(r: Reader) -> SignedCancel:
    origin = ORIGINS[r.variant(len(ORIGINS), "cancel origin")]
    deployment = r.str("the cancel's deployment")
    run = r.str("the cancel's run") if r.option("the cancel's run") else None
    reason = r.str("the cancel's reason")
    at_ms = r.u64("the cancel's at_ms")
    key_id = r.fixed(8, "the cancel's key id")
    signature = r.bytes("the cancel's signature")
    return SignedCancel(CancelRequested(origin, deployment, run, reason, at_ms), key_id, signature)


def _dec_signed_mail_cancel(r: Reader) -> SignedMailCancel:
    origin = ORIGINS[r.variant(len(ORIGINS), "cancel origin")]
    deployment = r.str("the cancel's deployment")
    mail_id = r.u64("the cancel's mail id")
    reason = r.str("the cancel's reason")
    at_ms = r.u64("the cancel's at_ms")
    key_id = r.fixed(8, "the cancel's key id")
    signature = r.bytes("the cancel's signature")
    record = MailCancelRequested(origin, deployment, mail_id, reason, at_ms)
    return SignedMailCancel(record, key_id, signature)


def _dec_verdict(r: Reader) -> object:
    i = r.variant(3, "cancel verdict")
    if i == 0:
        return ACKNOWLEDGED
    if i == 1:
        return NOT_SUPPORTED
    return Refused(r.str("a refusal reason"))


def _dec_welcome(r: Reader) -> Welcome:
    protocol = r.u32("Welcome.protocol")
    deployment = r.str("Welcome.deployment")
    grants = Grants(
        r.u64("Grants.read_at_ms"), r.fixed(32, "Grants.digest"), r.bytes("Grants.body")
    )
    limits = Limits(
        r.u32("Limits.max_frame_bytes"),
        r.u32("Limits.max_mail_bytes"),
        r.u64("Limits.drain_timeout_ms"),
        r.u64("Limits.liveness_timeout_ms"),
    )
    return Welcome(protocol, deployment, grants, limits)


_SHUTDOWN = Shutdown()
_READY = Ready()
_DRAINED = Drained()


def decode_control(r: Reader) -> object:
    """One ``Control`` message (supervisor to child)."""
    i = r.variant(len(CONTROL), "Control variant")
    if i == 4:
        return Ping(r.u64("Ping.nonce"))
    if i == 3:
        return Mail(r.u64("Mail.id"), r.u32("Mail.attempt"), r.bytes("Mail.payload"))
    if i == 0:
        return _dec_welcome(r)
    if i == 1:
        return Drain(r.u64("Drain.budget_ms"))
    if i == 2:
        return Cancel(_dec_signed_cancel(r))
    if i == 5:
        return _SHUTDOWN
    if i == 6:
        return Lease(r.u64("Lease.valid_ms"))
    if i == 7:
        return CancelMail(_dec_signed_mail_cancel(r))
    return Answer(r.u64("Answer.id"), r.str("Answer.key"), r.bytes("Answer.value"))


def decode_event(r: Reader) -> object:
    """One ``Event`` message (child to supervisor)."""
    i = r.variant(len(EVENT), "Event variant")
    if i == 5:
        return Pong(r.u64("Pong.nonce"))
    if i == 0:
        return Hello(
            r.u32("Hello.protocol"),
            r.str("Hello.channel_id"),
            r.u32("Hello.pid"),
            r.bool("Hello.takes_mail"),
            r.str("Hello.implementation"),
        )
    if i == 1:
        return _READY
    if i == 2:
        run, step = r.str("StepStarted.run"), r.str("StepStarted.step")
        return StepStarted(run, step, DRAIN_BEHAVIOURS[r.variant(2, "drain behaviour")])
    if i == 3:
        run, step = r.str("StepFinished.run"), r.str("StepFinished.step")
        return StepFinished(run, step, _dec_outcome(r))
    if i == 4:
        return MailAck(r.u64("MailAck.id"), _dec_outcome(r))
    if i == 6:
        return RunTerminal(r.str("RunTerminal.run"), _dec_outcome(r))
    if i == 7:
        return _DRAINED
    if i == 8:
        return RecycleRequest(r.str("RecycleRequest.reason"))
    if i == 9:
        return Custom(r.str("Custom.kind"), r.bytes("Custom.bytes"))
    if i == 10:
        return MailStarted(r.u64("MailStarted.id"), r.bool("MailStarted.cancellable"))
    if i == 11:
        return MailDone(r.u64("MailDone.id"), _dec_outcome(r), r.bytes("MailDone.result"))
    if i == 12:
        return MailCancelVerdict(r.u64("MailCancelVerdict.id"), _dec_verdict(r))
    if i == 13:
        return Ask(r.u64("Ask.id"), r.str("Ask.key"), r.bytes("Ask.prompt"))
    if i == 14:
        return Progress(r.u64("Progress.id"), r.bytes("Progress.data"))
    return GiveBack(r.u64("GiveBack.id"), r.bool("GiveBack.awaiting_answer"))


def name(message: object) -> str:
    """The variant's name, for logs and violation messages."""
    return type(message).__name__
