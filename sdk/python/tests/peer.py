"""A scripted supervisor side for tests and measurements: starts a real
child process with a real socketpair at fd 3 and the ``WFHOST_*``
environment (as ``wfhost supervise`` does), and plays messages at it with
the SDK's own codec. The conformance kit is the reference for everything it
covers; this covers what the kit cannot script (a fleet Lease) and the
ping latency figures."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from wfhost import cancel, frame
from wfhost import messages as m
from wfhost.signing import key_id

PYTHON = sys.executable
SRC = Path(__file__).resolve().parents[1] / "src"


class Peer:
    """One child and the supervisor's end of its channel."""

    def __init__(
        self, argv: list[str], deployment: str = "billing", env: dict | None = None
    ) -> None:
        self.deployment = deployment
        self.key = Ed25519PrivateKey.generate()
        public = self.key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        self.key_id = key_id(public)
        self.channel_id = secrets.token_hex(16)
        ours, theirs = socket.socketpair()
        child_fd = theirs.fileno()
        environ = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "WFHOST_CONTROL_FD": "3",
            "WFHOST_CHANNEL_ID": self.channel_id,
            "WFHOST_PROTOCOL": "2",
            "WFHOST_DEPLOYMENT": deployment,
            "WFHOST_SUPERVISOR_KEY": public.hex(),
            **(env or {}),
        }
        self.proc = subprocess.Popen(
            argv,
            env=environ,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            # dup2 leaves fd 3 inheritable; every other fd of ours is
            # close-on-exec, so nothing else reaches the child.
            close_fds=False,
            preexec_fn=lambda: os.dup2(child_fd, 3),
        )
        theirs.close()
        self.sock = ours
        self.frames = frame.FrameBuffer("up", frame.MAX_FRAME_LIMIT)
        self.inbox: list = []
        self.seq = 0
        self.hello: m.Hello | None = None
        self.skipped: list = []  # events that came while waiting for a Pong

    # --- the wire ---------------------------------------------------------

    def send(self, message: object) -> None:
        self.seq += 1
        self.sock.sendall(frame.encode_frame(self.seq, message))

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv(self, timeout: float = 10.0) -> object | None:
        """The next event, or None at end of stream; fails after
        ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while not self.inbox:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no event from the child within {timeout} s")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not data:
                return None
            self.inbox += self.frames.feed(data)
        return self.inbox.pop(0)

    def expect(self, kind: type, timeout: float = 10.0, skip: tuple = (m.Custom,)) -> object:
        """The next event of type ``kind``, skipping those in ``skip``;
        anything else first fails."""
        while True:
            event = self.recv(timeout)
            if isinstance(event, kind):
                return event
            if event is not None and isinstance(event, skip):
                continue
            raise AssertionError(f"expected {kind.__name__}, got {event!r}")

    def quiet(self, seconds: float) -> list:
        """Every event that comes within ``seconds``."""
        got = []
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.recv(left)
            except TimeoutError:
                break
            if event is None:
                break
            got.append(event)
        return got

    # --- scenarios ---------------------------------------------------------

    def handshake(self, limits: m.Limits | None = None, protocol: int = 2) -> m.Hello:
        hello = self.recv()
        assert isinstance(hello, m.Hello), hello
        assert hello.channel_id == self.channel_id
        self.hello = hello
        self.send(
            m.Welcome(
                protocol,
                self.deployment,
                m.Grants(0, bytes(32), b""),
                limits or m.Limits(1 << 20, 256 << 10, 60_000, 30_000),
            )
        )
        return hello

    def ready(self, **kw) -> m.Hello:
        hello = self.handshake(**kw)
        self.expect(m.Ready)
        return hello

    def ping(self, nonce: int, timeout: float = 10.0) -> float:
        """One Ping; the seconds until its Pong (other events skipped)."""
        start = time.perf_counter()
        self.send(m.Ping(nonce))
        while True:
            event = self.recv(timeout)
            if isinstance(event, m.Pong) and event.nonce == nonce:
                return time.perf_counter() - start
            if event is None:
                raise AssertionError("the child closed the channel instead of answering Ping")
            self.skipped.append(event)

    def signed_cancel(
        self, run: str | None, reason: str = "test", origin: str = "operator"
    ) -> m.Cancel:
        record = cancel.CancelRequested(
            origin, self.deployment, run, reason, int(time.time() * 1000)
        )
        signature = self.key.sign(cancel.signing_bytes(record))
        return m.Cancel(cancel.SignedCancel(record, self.key_id, signature))

    def mail_cancel(
        self, mail_id: int, reason: str = "test", origin: str = "operator"
    ) -> m.CancelMail:
        """A cancel of one mail item (protocol 3), signed with this peer's key."""
        record = cancel.MailCancelRequested(
            origin, self.deployment, mail_id, reason, int(time.time() * 1000)
        )
        signature = self.key.sign(cancel.mail_signing_bytes(record))
        return m.CancelMail(cancel.SignedMailCancel(record, self.key_id, signature))

    def finish(self, timeout: float = 10.0) -> tuple[int, str, str]:
        """Closes the channel and waits for the child: (code, stdout, stderr)."""
        try:
            self.sock.close()
        finally:
            try:
                out, err = self.proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                out, err = self.proc.communicate()
        return self.proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
        self.sock.close()


def child(module: str, *args: str) -> list[str]:
    """argv of ``python -m module args…`` with the SDK importable."""
    return [PYTHON, "-m", module, *args]


def script(code: str) -> list[str]:
    """argv of ``python -c code``."""
    return [PYTHON, "-c", code]
