"""The control channel: taking the inherited fd, the handshake (``Hello``
up, ``Welcome`` down), and the outbox through which every event leaves."""

from __future__ import annotations

import os
import socket
import stat
import threading

from . import frame
from . import messages as m
from .env import ChildEnv
from .errors import ChannelClosed, ConnectError, ProtocolViolation, TooLarge
from .outcome import Failed

# Longest implementation name a Hello may carry (ipc/src/handshake.rs).
MAX_IMPLEMENTATION_BYTES = 128

# How much one recv may take: bounded, so a claimed length never sizes a
# read; the header is checked as soon as it is in.
RECV_BYTES = 64 * 1024

_taken = threading.Lock()
_taken_flag = False


def already_taken() -> bool:
    """Whether this process has connected before (there is one channel)."""
    return _taken_flag


def take_control_fd(fd: int) -> socket.socket:
    """Takes the inherited control fd (once per process): checks it is an
    open socket and marks it close-on-exec, so programs the workflow starts
    never inherit the channel."""
    global _taken_flag
    try:
        mode = os.fstat(fd).st_mode
    except OSError as e:
        raise ConnectError(
            f"control fd {fd} (WFHOST_CONTROL_FD) is unusable: {e.strerror}; this process "
            f"must be started by `wfhost supervise`"
        ) from None
    if not stat.S_ISSOCK(mode):
        raise ConnectError(
            f"control fd {fd} (WFHOST_CONTROL_FD) is not a socket; this process must be "
            f"started by `wfhost supervise`"
        )
    with _taken:
        if _taken_flag:
            raise ConnectError(
                "the control channel was already taken by an earlier connect() in this process"
            )
        _taken_flag = True
    os.set_inheritable(fd, False)
    sock = socket.socket(fileno=fd)
    sock.setblocking(True)
    return sock


def handshake(
    sock: socket.socket, env: ChildEnv, takes_mail: bool, implementation: str
) -> tuple[m.Welcome, frame.FrameBuffer, list]:
    """Sends Hello (in the protocol version ``env`` negotiated) and waits for
    a Welcome of that version. Returns the Welcome, the frame
    buffer (now limited to the Welcome's ``max_frame_bytes``) and any
    messages that arrived right behind the Welcome."""
    if len(implementation.encode()) > MAX_IMPLEMENTATION_BYTES:
        raise ConnectError(
            f"implementation name {implementation[:40]!r}… is longer than "
            f"{MAX_IMPLEMENTATION_BYTES} bytes; the supervisor refuses it"
        )
    hello = m.Hello(env.protocol, env.channel_id, os.getpid(), takes_mail, implementation)
    try:
        sock.sendall(frame.encode_frame(1, hello))
    except OSError as e:
        raise ConnectError(
            f"handshake with the supervisor failed: cannot send Hello: {e}"
        ) from None
    buf = frame.FrameBuffer("down", frame.MAX_FRAME_LIMIT)
    got: list = []
    while not got:
        try:
            data = sock.recv(RECV_BYTES)
        except OSError as e:
            raise ConnectError(f"handshake with the supervisor failed: {e}") from None
        if not data:
            raise ConnectError(
                "handshake with the supervisor failed: the supervisor closed the channel "
                "instead of answering Hello (wrong channel id or protocol?)"
            )
        try:
            got = buf.feed(data)
        except ProtocolViolation as e:
            raise ConnectError(
                f"handshake with the supervisor failed: protocol violation: {e}"
            ) from None
    welcome, rest = got[0], got[1:]
    if not isinstance(welcome, m.Welcome):
        raise ConnectError(
            f"handshake with the supervisor failed: expected Welcome, got {m.name(welcome)}"
        )
    if welcome.protocol != env.protocol:
        raise ConnectError(
            f"handshake with the supervisor failed: Welcome speaks protocol {welcome.protocol} "
            f"but this child's Hello said {env.protocol}; use a wfhost SDK matching the supervisor"
        )
    if welcome.deployment != env.deployment:
        raise ConnectError(
            f"handshake with the supervisor failed: Welcome is for deployment "
            f"{welcome.deployment!r} but WFHOST_DEPLOYMENT is {env.deployment!r}"
        )
    buf.max_frame_bytes = min(max(welcome.limits.max_frame_bytes, 1), frame.MAX_FRAME_LIMIT)
    return welcome, buf, rest


class Outbox:
    """Frames waiting to be written, in the order they were queued.

    ``queue`` is called under the runtime's lock, which fixes the order of
    events (and their sequence numbers) to the ledger's order; ``take``
    too. Writing happens outside that lock, under ``write_lock``, by
    whichever thread flushes first: it writes everything queued so far."""

    def __init__(self, sock: socket.socket, max_frame_bytes: int, protocol: int = 2) -> None:
        self.sock = sock
        self.max_frame_bytes = max_frame_bytes
        self.protocol = protocol
        self.next_seq = 2  # Hello was 1
        self.pending = bytearray()
        self.write_lock = threading.Lock()
        self.failure: str | None = None
        self.closed = False

    def check_open(self) -> None:
        if self.failure is not None:
            raise ChannelClosed(
                f"control channel is closed ({self.failure}); the supervisor is gone or asked "
                f"this child to stop"
            )
        if self.closed:
            raise ChannelClosed("control channel is closed: this child closed it (rt.close())")

    def encode(self, event: object) -> bytes:
        """The frame of ``event`` with the next sequence number, not yet
        queued; raises ``TooLarge`` for an event the supervisor would refuse.
        A protocol-3 event on a channel of protocol 2 is a bug of the
        runtime's (the supervisor would kill the child for it): refused."""
        if self.protocol < 3 and type(event) in m.SINCE_3:
            raise AssertionError(
                f"{m.name(event)} is a protocol-3 message, and this channel speaks protocol "
                f"{self.protocol}; please report this bug of the wfhost runtime"
            )
        try:
            return frame.encode_frame(self.next_seq, event, self.max_frame_bytes)
        except ProtocolViolation as e:
            raise TooLarge(
                f"{m.name(event)} event not sent: {e}; send less data per event"
            ) from None

    def append(self, data: bytes) -> None:
        """Queues a frame made by :meth:`encode` (its sequence number is now
        taken)."""
        self.check_open()
        self.pending += data
        self.next_seq += 1

    def queue(self, event: object) -> None:
        """Queues an event the runtime made; a failure reason too long for
        the frame limit is cut to fit rather than lose the event."""
        try:
            data = self.encode(event)
        except TooLarge:
            data = self.encode(_shrunk(event, self.max_frame_bytes))
        self.append(data)

    def queue_all(self, events: list) -> None:
        for event in events:
            self.queue(event)

    def take(self) -> bytes:
        data = bytes(self.pending)
        self.pending.clear()
        return data


def _shrunk(event: object, max_frame_bytes: int) -> object:
    outcome = getattr(event, "outcome", None)
    if not isinstance(outcome, Failed):
        return event
    room = max(
        0,
        max_frame_bytes
        - 64
        - len(getattr(event, "run", "").encode())
        - len(getattr(event, "step", "").encode()),
    )
    reason = outcome.reason.encode()[:room].decode("utf-8", "ignore")
    fields = {f: getattr(event, f) for f in event.__slots__}  # type: ignore[attr-defined]
    fields["outcome"] = Failed(reason)
    return type(event)(**fields)
