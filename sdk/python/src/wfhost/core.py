"""The protocol core under both surfaces (blocking and asyncio): the state
of one connected child and a background thread that owns the reading side
of fd 3, so a ``Ping`` is answered while the application's steps block or
compute (as long as the thread gets the GIL: see the README).

The reader thread handles everything the supervisor sends: ``Ping`` (a
``Pong`` at once), ``Drain`` (cancel-behaviour steps cancelled, wait steps
go on, no more mail taken, ``Drained`` once nothing is left to wait for),
signed ``Cancel`` (verified strictly, then the cascade over the run),
``Mail`` (each id handed out once; redeliveries of acknowledged mail
acknowledged again), ``Lease`` (its expiry acts as a drain), ``Shutdown``
and end of stream (the runtime closes; every step's token fires), and in
protocol 3 a signed ``CancelMail`` (verified strictly, answered with a
``MailCancelVerdict`` at once) and ``Answer`` (the waiting ``ask`` of that
item and key resolved, the answer remembered for the item: see
:mod:`wfhost.questions`).

An item's life in protocol 3: received (queued), taken (handed to the
application), started (``MailStarted``, as its handler is called: the
iterator starts an item as it hands it out, ``serve`` just before it calls
the handler), done (``MailDone`` with the handler's result). In protocol 2
nothing is sent until the ``MailAck``. An item whose handler waits in
``ask`` when a drain begins (or the lease runs out, or ``Shutdown``
comes) is given back instead (``GiveBack``): forgotten, nothing more is
sent for it, and it does not hold the drain.

One lock guards the ledgers and the order of outgoing events; writing
happens outside it. Every application call that reports something returns
once the event is written to the socket (or raises ``ChannelClosed``)."""

from __future__ import annotations

import contextvars
import functools
import os
import queue
import socket
import threading
import time
import weakref
from collections import deque

from . import cancel as cancel_mod
from . import messages as m
from . import token as t
from .channel import RECV_BYTES, Outbox
from .env import ChildEnv
from .errors import (
    CancelRefused,
    ChannelClosed,
    MailSettled,
    NotReady,
    ProtocolViolation,
    TooLarge,
)
from .frame import FrameBuffer, truncation
from .log import log
from .mail_ledger import DECLINED, DELIVER, DUPLICATE, REACK, MailLedger
from .outcome import CANCELLED, Failed, Outcome
from .questions import Asking, Questions
from .record import Record
from .signing import warm_up
from .token import CancelToken
from .work import Work

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Callable


class CloseReason(Record):
    """Why the runtime closed: ``kind`` is ``shutdown`` (the supervisor
    sent Shutdown), ``disconnected`` (it closed the channel) or ``failed``
    (the channel broke or the supervisor broke the protocol)."""

    __slots__ = ("kind", "message")

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        self.message = message

    @property
    def exit_code(self) -> int:
        """0 for a shutdown or a closed channel, 1 for a broken one."""
        return 1 if self.kind == "failed" else 0


class Delivery:
    """A mail item as the supervisor delivered it, and what the runtime
    knows of it while the child holds it: whether its handler started it
    (and declared it ``cancellable``), the token a verified cancel of the
    item fires, the runs its handler's steps belong to, the questions it
    asked (protocol 3), and whether it was given back."""

    __slots__ = (
        "id",
        "attempt",
        "payload",
        "started",
        "cancellable",
        "token",
        "runs",
        "questions",
        "given_back",
    )

    def __init__(self, id: int, attempt: int, payload: bytes) -> None:
        self.id = id
        self.attempt = attempt
        self.payload = payload
        self.started = False
        self.cancellable = True
        self.token = CancelToken()
        self.runs: set[str] = set()
        self.questions: Questions | None = None
        self.given_back = False

    def __repr__(self) -> str:
        return f"Delivery(id={self.id}, attempt={self.attempt}, started={self.started})"


# The mail item whose handler runs in this thread or task (set by the
# surfaces' serve): the steps started there belong to its runs, which a
# verified cancel of the item cancels.
CURRENT_ITEM: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "wfhost_current_item", default=None
)


# What next_mail returns once no more mail is handed out.
STOPPED = object()

# Tells the chores thread that the lease deadline moved.
LEASE = object()


class Core(Asking):
    """The state of one connected child; a person in the loop (``ask``,
    ``progress``, give-back) is :class:`wfhost.questions.Asking`."""

    def __init__(
        self,
        env: ChildEnv,
        sock: socket.socket,
        frames: FrameBuffer,
        welcome: m.Welcome,
        early: list,
    ) -> None:
        self.env = env
        self.sock = sock
        self.frames = frames
        self.welcome = welcome
        # The version both sides speak (the Hello's, which the Welcome
        # repeated): 3 adds MailStarted, MailDone, CancelMail and verdicts.
        self.protocol = welcome.protocol
        self.v3 = welcome.protocol >= 3
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.outbox = Outbox(sock, welcome.limits.max_frame_bytes, welcome.protocol)
        self.work = Work()
        self.ledger = MailLedger()
        self.queue: deque[Delivery] = deque()
        self.held: dict[int, Delivery] = {}
        self.ready_sent = False
        self.draining = threading.Event()
        self.closed = threading.Event()
        self.close_reason: CloseReason | None = None
        self.listeners: list[Callable[[], None]] = []
        self.lease_deadline: float | None = None
        self.lease_valid_ms = 0
        self.chores: queue.SimpleQueue[object] = queue.SimpleQueue()
        if env.supervisor_key.small_order:
            log(
                "WFHOST_SUPERVISOR_KEY is a key of small order: every signed cancel will be "
                "refused; check the supervisor's signing key"
            )
        os.register_at_fork(after_in_child=functools.partial(_forked, weakref.ref(self)))
        for message in early:
            self.on_control(message)
        self.reader = threading.Thread(target=self._read_loop, name="wfhost-reader", daemon=True)
        self.reader.start()
        threading.Thread(target=self._chores_loop, name="wfhost-chores", daemon=True).start()

    # --- writing ------------------------------------------------------------

    def flush(self) -> None:
        """Writes everything queued; raises ``ChannelClosed`` if the channel
        has failed (then or before)."""
        with self.outbox.write_lock:
            with self.lock:
                data = self.outbox.take()
                failure = self.outbox.failure
            if data and failure is None:
                try:
                    self.sock.sendall(data)
                except OSError as e:
                    failure = f"writing to the supervisor failed: {e.strerror or e}"
                    with self.lock:
                        self.outbox.failure = failure
        if failure is not None:
            self.close("failed", failure)
            self.outbox.check_open()

    def _notify(self) -> None:
        """Wakes blocking waiters and asyncio listeners (under the lock)."""
        self.changed.notify_all()
        for listener in self.listeners:
            listener()

    def _require_ready(self, what: str) -> None:
        if not self.ready_sent:
            raise NotReady(
                f"{what} before rt.ready(): the supervisor takes no event before Ready; "
                f"call rt.ready() first"
            )

    # --- application calls ---------------------------------------------------

    def ready(self) -> None:
        with self.lock:
            if self.ready_sent:
                return
            self.outbox.queue(m.Ready())
            self.ready_sent = True
        self.flush()
        warm_up(self.env.supervisor_key)

    def start_step(
        self, run: str, name: str, drain: str, on_fire: Callable[[str, str], None] | None = None
    ) -> tuple[int, CancelToken]:
        if drain not in ("cancel", "wait"):
            raise ValueError(f'unknown drain behaviour {drain!r}: use "cancel" or "wait"')
        if not isinstance(run, str) or not isinstance(name, str):
            raise TypeError("a step's run and name are str")
        item_id = CURRENT_ITEM.get()
        with self.lock:
            self._require_ready(f"step {name!r} of run {run!r} started")
            data = self.outbox.encode(m.StepStarted(run, name, drain))
            self.outbox.check_open()
            sid, token, _ = self.work.start(run, name, drain)
            self.outbox.append(data)
            item = self.held.get(item_id) if item_id is not None else None
            if item is not None:
                # A step of an item's handler: its run is the item's, and
                # a run begun after the item's cancel starts cancelled.
                item.runs.add(run)
                if item.token.event.is_set():
                    self._queue_quietly(self.work.cancel(run, item.token.reason or "cancelled"))
            if on_fire is not None:
                token.on_fire(on_fire)
        self.flush()
        return sid, token

    def finish_step(self, sid: int, outcome: Outcome, run_outcome: Outcome | None = None) -> None:
        with self.lock:
            events = self.work.finish(sid, outcome, run_outcome)
            self._queue_quietly(events)
        self.flush()

    def run_terminal(self, run: str, outcome: Outcome) -> None:
        with self.lock:
            self._require_ready(f"run {run!r} reported terminal")
            self.outbox.check_open()
            self._queue_quietly(self.work.run_terminal(run, outcome))
        self.flush()

    def ack(self, mail_id: int, outcome: Outcome, result: bytes = b"") -> str | None:
        """Ends a held item: ``MailDone`` with ``result`` in protocol 3,
        ``MailAck`` in protocol 2 (no result). Returns None, or why the
        item ended ``Failed`` instead: a result whose ``MailDone`` would not
        fit in a frame of ``max_frame_bytes``."""
        note = None
        with self.lock:
            if mail_id not in self.held:
                raise MailSettled(f"mail {mail_id} was already acknowledged or released")
            self.outbox.check_open()
            if self.v3:
                event = m.MailDone(mail_id, outcome, result)
                try:
                    data: bytes | None = self.outbox.encode(event)
                except TooLarge:
                    data = None
                    if result:
                        note = (
                            f"result of {len(result)} bytes does not fit in a frame of "
                            f"max_frame_bytes {self.outbox.max_frame_bytes}"
                        )
                        outcome = Failed(note)
                        event = m.MailDone(mail_id, outcome, b"")
                if data is None:
                    self.outbox.queue(event)  # a failure reason too long is cut to fit
                else:
                    self.outbox.append(data)
            else:
                self.outbox.queue(m.MailAck(mail_id, outcome))
            del self.held[mail_id]
            self.ledger.ack(mail_id, outcome)
            self._queue_quietly(self.work.settle_mail())
            self._notify()
        self.flush()
        return note

    def release(self, mail_id: int, quiet: bool = False) -> None:
        """Leaves a held item unacknowledged, for the supervisor to deliver
        again (to the next child, after a drain)."""
        with self.lock:
            if mail_id not in self.held:
                if quiet:
                    return
                raise MailSettled(f"mail {mail_id} was already acknowledged or released")
            del self.held[mail_id]
            self.ledger.abandon(mail_id)
            self._queue_quietly(self.work.settle_mail())
            self._notify()
        try:
            self.flush()
        except ChannelClosed:
            if not quiet:
                raise

    def send(self, event: object, what: str) -> None:
        """Sends an application event (RecycleRequest, Custom)."""
        with self.lock:
            self._require_ready(what)
            self.outbox.append(self.outbox.encode(event))
        self.flush()

    def close_channel(self) -> None:
        """Flushes, then closes the sending direction: the supervisor reads
        end of stream, as when this child exits."""
        self.flush()
        with self.outbox.write_lock:
            with self.lock:
                if self.outbox.closed or self.outbox.failure is not None:
                    return
                self.outbox.closed = True
            try:
                self.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass  # already gone: the supervisor sees the end either way

    def next_mail(
        self, timeout: float | None = None, start: bool = True, cancellable: bool = True
    ) -> object:
        """The next item (now held), ``STOPPED`` once no more mail is handed
        out, or None when ``timeout`` (0: do not wait) passes first. With
        ``start`` the item is started as it is handed out (``MailStarted``
        in protocol 3); without, the caller starts it with :meth:`start`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while True:
                if not self.work.takes_mail():
                    self._discard_queue()
                    return STOPPED
                if self.queue:
                    delivery = self.queue.popleft()
                    if self.work.take_mail():
                        self.held[delivery.id] = delivery
                        if start:
                            self._start(delivery, cancellable)
                        break
                    self.ledger.abandon(delivery.id)
                    continue
                if deadline is None:
                    self.changed.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self.changed.wait(left)
        if start and self.v3:
            self._flush_quietly()
        return delivery

    def start(self, delivery: Delivery, cancellable: bool) -> bool:
        """Starts an item taken with ``next_mail(start=False)`` as its
        handler is about to be called; False when it must not be: a
        verified cancel ended it meanwhile, or a drain, a lease expiry or
        the channel's end came (it is then released unacknowledged, never
        started, for the next child)."""
        with self.lock:
            if self.held.get(delivery.id) is not delivery:
                return False  # cancelled while taken: its MailDone is sent
            if not self.work.takes_mail():
                del self.held[delivery.id]
                self.ledger.abandon(delivery.id)
                self._queue_quietly(self.work.settle_mail())
                self._notify()
                started = False
                log(
                    f"not starting mail {delivery.id} (draining or closed); left for redelivery "
                    f"to the next child"
                )
            else:
                self._start(delivery, cancellable)
                started = True
        self._flush_quietly()
        return started

    def mail_dropped(self, mail_id: int) -> None:
        """Called from a Mail's finaliser (any thread, any moment; a
        SimpleQueue is safe there): the chores thread releases it."""
        self.chores.put(mail_id)

    def wait_closed(self, timeout: float | None = None) -> CloseReason | None:
        self.closed.wait(timeout)
        return self.close_reason

    # --- the reader thread ----------------------------------------------------

    def _read_loop(self) -> None:
        """Plain blocking reads: each wake-up costs one GIL acquisition, so
        under a busy application a Ping waits about one switch interval."""
        try:
            self._read_messages()
        except Exception as e:  # a bug of ours must close the runtime, not leave it deaf
            self._fail(f"internal error in the wfhost runtime: {e!r}; please report it")
        finally:
            self.chores.put(None)

    def _read_messages(self) -> None:
        while True:
            try:
                data = self.sock.recv(RECV_BYTES)
            except OSError as e:
                self._fail(f"control channel I/O: {e.strerror or e}")
                return
            if not data:
                pending = self.frames.pending()
                if pending:
                    self._fail(f"protocol violation: {truncation(pending)}")
                else:
                    self.close("disconnected", "the supervisor closed the control channel")
                return
            try:
                messages = self.frames.feed(data)
            except ProtocolViolation as e:
                self._fail(f"protocol violation: {e}")
                return
            for message in messages:
                if not self.on_control(message):
                    return

    def _chores_loop(self) -> None:
        """The second background thread."""
        try:
            self._chores()
        except Exception as e:  # a bug of ours must close the runtime, not hide
            self._fail(f"internal error in the wfhost runtime: {e!r}; please report it")

    def _chores(self) -> None:
        """The second background thread's work: releases mail dropped
        unsettled and acts on a lease that runs out. Woken through
        ``chores``: a mail id, ``LEASE`` when the deadline moved, None to
        stop."""
        while True:
            deadline = self.lease_deadline
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = self.chores.get(timeout=timeout)
            except queue.Empty:
                item = LEASE
            if item is None:
                return
            if item is not LEASE:
                log(f"mail {item} was dropped unacknowledged; left for redelivery")
                self.release(item, quiet=True)  # type: ignore[arg-type]
            deadline = self.lease_deadline
            if deadline is not None and time.monotonic() >= deadline:
                self._lease_expired()

    def _fail(self, reason: str) -> None:
        log(f"control channel failed: {reason}; closing")
        self.close("failed", reason)

    def on_control(self, message: object) -> bool:
        """Handles one message from the supervisor; False once reading must
        stop."""
        kind = type(message)
        if kind is m.Ping:
            with self.lock:
                self._queue_quietly([m.Pong(message.nonce)])  # type: ignore[attr-defined]
            self._flush_quietly()
        elif kind is m.Mail:
            self._deliver(message)  # type: ignore[arg-type]
        elif kind is m.Drain:
            self._drain(message.budget_ms)  # type: ignore[attr-defined]
        elif kind is m.Cancel:
            self._cancel(message.cancel)  # type: ignore[attr-defined]
        elif kind is m.Lease:
            valid_ms = message.valid_ms  # type: ignore[attr-defined]
            with self.lock:
                if not self.work.draining:
                    self.lease_valid_ms = valid_ms
                    self.lease_deadline = time.monotonic() + valid_ms / 1000
            self.chores.put(LEASE)
        elif kind is m.Shutdown:
            # Pings and cancels are still answered until the channel ends.
            self.close("shutdown", "the supervisor sent Shutdown")
            self._flush_quietly()  # the items given back
        elif kind in m.SINCE_3 and not self.v3:
            self._fail(
                f"protocol violation: {m.name(message)} is a protocol-3 message, and this child "
                f"speaks protocol {self.protocol}"
            )
            return False
        elif kind is m.CancelMail:
            self._cancel_mail(message.cancel)  # type: ignore[attr-defined]
        elif kind is m.Answer:
            self._answer(message)  # type: ignore[arg-type]
        else:
            self._fail(f"protocol violation: unexpected {m.name(message)} after the handshake")
            return False
        return True

    def _deliver(self, mail: m.Mail) -> None:
        with self.lock:
            decision, outcome = self.ledger.receive(mail.id, self.work.takes_mail())
            if decision == DELIVER:
                self.queue.append(Delivery(mail.id, mail.attempt, mail.payload))
                self._notify()
            elif decision == REACK:
                log(f"mail {mail.id} redelivered after its ack; acknowledging again")
                # The result is not kept: the supervisor kept the first one.
                again = (
                    m.MailDone(mail.id, outcome, b"") if self.v3 else m.MailAck(mail.id, outcome)
                )
                self._queue_quietly([again])
            elif decision == DUPLICATE:
                log(f"mail {mail.id} delivered again while still in progress; ignored")
            else:
                assert decision == DECLINED
                log(
                    f"mail {mail.id} arrived after Drain or Shutdown; not taken, left for "
                    f"redelivery to the next child"
                )
        if decision == REACK:
            self._flush_quietly()

    def _drain(self, budget_ms: int) -> None:
        with self.lock:
            if not self.work.draining:
                log(f"drain requested (budget {budget_ms} ms)")
            self._queue_quietly(self.work.drain(budget_ms))
            self._give_back_asking("a drain began")
            self.lease_deadline = None
            self._discard_queue()
            self.draining.set()
            self._notify()
        self._flush_quietly()

    def _lease_expired(self) -> None:
        with self.lock:
            if self.lease_deadline is None:
                return
            self.lease_deadline = None
            log(
                f"lease expired ({self.lease_valid_ms} ms without a renewal): draining on its own; "
                f"cancel-behaviour steps are cancelled and no more mail is taken"
            )
            self._queue_quietly(self.work.lease_expired(self.lease_valid_ms))
            self._give_back_asking("the lease ran out")
            self._discard_queue()
            self.draining.set()
            self._notify()
        self._flush_quietly()

    def _cancel(self, signed: cancel_mod.SignedCancel) -> None:
        record = signed.record
        run_name = record.run if record.run is not None else "<every run>"
        with self.lock:
            try:
                cancel_mod.verify_for(
                    signed, self.env.supervisor_key, self.env.deployment, self.work.knows_run
                )
            except CancelRefused as e:
                log(
                    f"refused cancel of run {run_name} for deployment {record.deployment!r} "
                    f"(origin {record.origin}): {e}"
                )
                return
            log(
                f"cancel of run {run_name} accepted (origin {record.origin}, reason "
                f"{record.reason!r})"
            )
            reason = f"cancelled by a verified {record.origin} cancel: {record.reason}"
            self._queue_quietly(self.work.cancel(record.run, reason))
        self._flush_quietly()

    def _cancel_mail(self, signed: cancel_mod.SignedMailCancel) -> None:
        """A cancel of one item: verified (§5.3, an item not held refused as
        ``unknown_item``), then answered with exactly one verdict, at once."""
        record = signed.record
        with self.lock:
            try:
                cancel_mod.verify_mail_for(
                    signed, self.env.supervisor_key, self.env.deployment, self._holds
                )
            except CancelRefused as e:
                log(
                    f"refused cancel of mail {record.id} for deployment {record.deployment!r} "
                    f"(origin {record.origin}): {e}"
                )
                self._queue_quietly([m.MailCancelVerdict(record.id, m.Refused(str(e)))])
            else:
                self._queue_quietly(self._cancel_item(record))
        self._flush_quietly()

    def _holds(self, mail_id: int) -> bool:
        """Whether the child holds the item: delivered and not yet done."""
        return mail_id in self.held or any(d.id == mail_id for d in self.queue)

    def _cancel_item(self, record: cancel_mod.MailCancelRequested) -> list:
        """The verdict on a verified cancel of a held item, and what it does."""
        mail_id = record.id
        said = f"origin {record.origin}, reason {record.reason!r}"
        reason = (
            f"cancelled by a verified {record.origin} cancel of mail {mail_id}: {record.reason}"
        )
        item = self.held.get(mail_id)
        if item is None or not item.started:
            # Received but never started: it never will be.
            events: list = [m.MailCancelVerdict(mail_id, m.ACKNOWLEDGED)]
            events.append(m.MailDone(mail_id, CANCELLED, b""))
            if item is None:
                self.queue = deque(d for d in self.queue if d.id != mail_id)
            else:
                del self.held[mail_id]
                item.token.fire(t.CANCEL, reason)
                events += self.work.settle_mail()
            self.ledger.ack(mail_id, CANCELLED)
            self._notify()
            log(f"cancel of mail {mail_id} accepted ({said}); not started, so it ends cancelled")
            return events
        if not item.cancellable:
            log(
                f"cancel of mail {mail_id} not supported ({said}): its handler declared it cannot "
                f"be cancelled, so it runs to its end"
            )
            return [m.MailCancelVerdict(mail_id, m.NOT_SUPPORTED)]
        log(f"cancel of mail {mail_id} accepted ({said})")
        events = [m.MailCancelVerdict(mail_id, m.ACKNOWLEDGED)]
        # The runs first, then the item's own token: an asyncio handler
        # whose step is being cancelled is not cancelled a second time.
        for run in sorted(item.runs):
            events += self.work.cancel(run, reason)
        item.token.fire(t.CANCEL, reason)
        self._cancel_questions(item, reason)  # after the token: see Asking
        return events

    # --- closing ------------------------------------------------------------

    def close(self, kind: str, message: str) -> None:
        """Marks the runtime closed (the first reason wins), fires every
        step's token and stops mail."""
        cause = t.SHUTDOWN if kind == "shutdown" else t.DISCONNECTED
        with self.lock:
            self.work.close(cause, message)
            self._discard_queue()
            if self.close_reason is None:
                self.close_reason = CloseReason(kind, message)
            self._close_questions(kind, message)
            self.closed.set()
            self._notify()

    # --- internals (callers hold the lock) ------------------------------------

    def _queue_quietly(self, events: list) -> None:
        """Queues runtime-made events; on a closed channel they are lost
        with it (the application learns of the closure from ``closed``)."""
        try:
            self.outbox.queue_all(events)
        except ChannelClosed:
            pass

    def _flush_quietly(self) -> None:
        try:
            self.flush()
        except ChannelClosed:
            pass

    def _start(self, delivery: Delivery, cancellable: bool) -> None:
        delivery.started = True
        delivery.cancellable = cancellable
        if self.v3:
            self._queue_quietly([m.MailStarted(delivery.id, cancellable)])

    def _discard_queue(self) -> None:
        """Drops mail queued but not handed out (left unacknowledged, so the
        supervisor delivers it to the next child)."""
        if not self.queue:
            return
        ids = [d.id for d in self.queue]
        for mail_id in ids:
            self.ledger.abandon(mail_id)
        self.queue.clear()
        log(
            f"not taking queued mail {ids} (draining or closed); left for redelivery to the next child"
        )


def _forked(ref: weakref.ref) -> None:
    """In a process forked from the child (``os.fork``, multiprocessing's
    fork start method): only the original process speaks to the supervisor.
    The fork closes its copy of fd 3, so it never holds the channel open
    after the child exits, and every call there raises ``ChannelClosed``.
    Only one thread survives a fork, so the locks, which another thread may
    have held, are made anew rather than taken."""
    core = ref()
    if core is None:
        return
    try:
        os.close(core.sock.detach())
    except OSError:
        pass
    core.lock = threading.Lock()
    core.changed = threading.Condition(core.lock)
    core.outbox.write_lock = threading.Lock()
    core.outbox.pending.clear()
    core.outbox.failure = (
        "this process is a fork of the workflow child; only the original process speaks to the "
        "supervisor"
    )
    core.listeners = []
