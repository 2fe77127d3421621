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
and end of stream (the runtime closes; every step's token fires).

One lock guards the ledgers and the order of outgoing events; writing
happens outside it. Every application call that reports something returns
once the event is written to the socket (or raises ``ChannelClosed``)."""

from __future__ import annotations

import functools
import os
import queue
import socket
import sys
import threading
import time
import weakref
from collections import deque

from . import cancel as cancel_mod
from . import messages as m
from . import token as t
from .channel import RECV_BYTES, Outbox
from .env import ChildEnv
from .errors import CancelRefused, ChannelClosed, MailSettled, NotReady, ProtocolViolation
from .frame import FrameBuffer, truncation
from .mail_ledger import DECLINED, DELIVER, DUPLICATE, REACK, MailLedger
from .outcome import Outcome
from .record import Record
from .signing import warm_up
from .token import CancelToken
from .work import Work

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Callable


def log(line: str) -> None:
    """One line on stderr, which the supervisor logs with the deployment."""
    try:
        sys.stderr.write(f"wfhost: {line}\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass  # stderr closed: nothing to tell


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


class Delivery(Record):
    """A mail item as the supervisor delivered it."""

    __slots__ = ("id", "attempt", "payload")

    def __init__(self, id: int, attempt: int, payload: bytes) -> None:
        self.id = id
        self.attempt = attempt
        self.payload = payload


# What next_mail returns once no more mail is handed out.
STOPPED = object()

# Tells the chores thread that the lease deadline moved.
LEASE = object()


class Core:
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
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.outbox = Outbox(sock, welcome.limits.max_frame_bytes)
        self.work = Work()
        self.ledger = MailLedger()
        self.queue: deque[Delivery] = deque()
        self.held: set[int] = set()
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
        with self.lock:
            self._require_ready(f"step {name!r} of run {run!r} started")
            data = self.outbox.encode(m.StepStarted(run, name, drain))
            self.outbox.check_open()
            sid, token, _ = self.work.start(run, name, drain)
            self.outbox.append(data)
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

    def ack(self, mail_id: int, outcome: Outcome) -> None:
        with self.lock:
            if mail_id not in self.held:
                raise MailSettled(f"mail {mail_id} was already acknowledged or released")
            self.outbox.check_open()
            self.held.discard(mail_id)
            self.ledger.ack(mail_id, outcome)
            self.outbox.queue(m.MailAck(mail_id, outcome))
            self._queue_quietly(self.work.settle_mail())
            self._notify()
        self.flush()

    def release(self, mail_id: int, quiet: bool = False) -> None:
        """Leaves a held item unacknowledged, for the supervisor to deliver
        again (to the next child, after a drain)."""
        with self.lock:
            if mail_id not in self.held:
                if quiet:
                    return
                raise MailSettled(f"mail {mail_id} was already acknowledged or released")
            self.held.discard(mail_id)
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

    def next_mail(self, timeout: float | None = None) -> object:
        """The next item (now held), ``STOPPED`` once no more mail is handed
        out, or None when ``timeout`` (0: do not wait) passes first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            while True:
                if not self.work.takes_mail():
                    self._discard_queue()
                    return STOPPED
                if self.queue:
                    delivery = self.queue.popleft()
                    if self.work.take_mail():
                        self.held.add(delivery.id)
                        return delivery
                    self.ledger.abandon(delivery.id)
                    continue
                if deadline is None:
                    self.changed.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None
                    self.changed.wait(left)

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
                self._queue_quietly([m.MailAck(mail.id, outcome)])  # type: ignore[arg-type]
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
