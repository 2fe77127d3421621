"""The producer client: talks to a running supervisor over its control
socket (``docs/control.md``), as the ``wfhost`` CLI does. One connection
per request; every message is a ``u32`` big-endian length and that many
bytes of UTF-8 JSON; a ``send`` carries its payload raw after the JSON."""

from __future__ import annotations

import base64
import json
import math
import os
import secrets
import socket
import threading
import time
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

from .errors import ClientError, Unreachable

VERSION = 2
MAX_MESSAGE = 4 << 20
MAX_KEY_BYTES = 256
SOCKET_NAME = "wfhost.sock"
DEFAULT_STATE_DIR = "/var/lib/wfhost"

# A send whose answer was lost, or whose outcome the supervisor could not
# tell, is repeated this often, pausing 100 ms, then twice as long each
# time (as `wfhost send` does).
SEND_TRIES = 5
SEND_RETRY_PAUSE = 0.1

# How long one mail-result request of a call() without a timeout waits
# before it asks again (seconds).
CALL_POLL = 60.0

# An answer whose reply was lost is given again (the same value again is
# answered new: false, so it is stored once), this often, pausing as a
# send does. A follow whose connection broke before the item's end
# reconnects this often in a row, pausing 100 ms, then twice as long each
# time, before it raises.
ANSWER_TRIES = 5
FOLLOW_TRIES = 5
FOLLOW_RETRY_PAUSE = 0.1

# The events that end an item: a follow stream closes after one of them.
ENDS = ("mail_done", "mail_dead")

MAIL_STATES = ("inbox", "processing", "done")
MAIL_OUTCOMES = ("succeeded", "failed", "cancelled", "dead")


@dataclass(frozen=True, slots=True)
class Sent:
    """What ``Client.send`` answers: the mail item's ``id``, and ``new``:
    True when this call enqueued it, False when an earlier send with the
    same idempotency key had (nothing was enqueued)."""

    id: int
    new: bool


@dataclass(frozen=True, slots=True)
class MailResult:
    """Where a mail item is, and how it ended (``Client.mail_result``,
    ``Client.call``). ``ended``: whether it is done; ``state``: ``"inbox"``,
    ``"processing"`` or ``"done"``; once ended, ``outcome`` is
    ``"succeeded"``, ``"failed"``, ``"cancelled"`` or ``"dead"``, ``reason``
    says why when there is one, and ``result`` is what the child's handler
    returned (bytes; None when the supervisor kept none), ``result_bytes``
    its size. ``new`` is set by ``call``: whether that call enqueued the
    item (False: an earlier send with the same key had)."""

    id: int
    deployment: str
    ended: bool
    state: str
    outcome: str | None = None
    reason: str | None = None
    result: bytes | None = None
    result_bytes: int | None = None
    new: bool | None = None

    def json(self) -> Any:
        """The result parsed as JSON (``ValueError`` if there is none, or it
        is not JSON)."""
        if self.result is None:
            raise ValueError(f"mail {self.id} has no result ({self.state}, {self.outcome})")
        return json.loads(self.result)


def _mail_result(data: Any) -> MailResult:
    """The answer to ``mail-result``, checked field by field."""

    def bad(why: str) -> ClientError:
        return ClientError(f"the supervisor's answer to mail-result {why}: {data!r}", 1)

    if not isinstance(data, dict):
        raise bad("is not an object")
    mail_id, deployment, ended, state = (
        data.get("id"),
        data.get("deployment"),
        data.get("ended"),
        data.get("state"),
    )
    if not isinstance(mail_id, int) or isinstance(mail_id, bool):
        raise bad("has no mail id")
    if not isinstance(deployment, str) or not isinstance(ended, bool):
        raise bad("has no deployment and ended flag")
    if not isinstance(state, str):
        raise bad("has no state")
    outcome, reason = data.get("outcome"), data.get("reason")
    if outcome is not None and not isinstance(outcome, str):
        raise bad("has an outcome that is not a string")
    if ended and outcome is None:
        raise bad("says the item ended but not how")
    if reason is not None and not isinstance(reason, str):
        raise bad("has a reason that is not a string")
    encoded, size = data.get("result"), data.get("result_bytes")
    result = None
    if encoded is not None:
        if not isinstance(encoded, str):
            raise bad("has a result that is not base64 text")
        try:
            result = base64.b64decode(encoded, validate=True)
        except ValueError:
            raise bad("has a result that is not base64") from None
    if size is not None and (not isinstance(size, int) or isinstance(size, bool)):
        raise bad("has a result_bytes that is not a number")
    return MailResult(mail_id, deployment, ended, state, outcome, reason, result, size)


def socket_of_config(config: str | os.PathLike[str]) -> Path:
    """``state_dir/wfhost.sock`` from a supervisor config file: ``state_dir``
    of its ``[supervisor]`` table, relative to the file's directory."""
    path = Path(config)
    try:
        with path.open("rb") as f:
            table = tomllib.load(f)
    except OSError as e:
        raise ClientError(f"cannot read config {path}: {e.strerror or e}", 2) from None
    except tomllib.TOMLDecodeError as e:
        raise ClientError(
            f"config {path} is not valid TOML: {e}; check it with `wfhost check-config`", 2
        ) from None
    supervisor = table.get("supervisor", {})
    state_dir = (
        supervisor.get("state_dir", DEFAULT_STATE_DIR) if isinstance(supervisor, dict) else None
    )
    if not isinstance(state_dir, str):
        raise ClientError(f"config {path}: [supervisor] state_dir must be a string path", 2)
    return (path.resolve().parent / state_dir) / SOCKET_NAME


class _LostAnswer(Exception):
    """The request was written (or may have been) but no answer came;
    ``before_answer`` when the connection ended before any byte of one."""

    def __init__(self, message: str, before_answer: bool = False) -> None:
        super().__init__(message)
        self.before_answer = before_answer


class _NoAnswer(Exception):
    """A kept connection ended before any byte of the answer."""


class _OutcomeUnknown(ClientError):
    """The supervisor answered ``"outcome": "unknown"``: its store failed at
    or after the commit, so the request may or may not have taken effect."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message, code, outcome_unknown=True)


class Client:
    """A client of one supervisor, found by its config file or its socket::

        client = wfhost.Client(config="/etc/wfhost/wfhost.toml")
        mail_id = client.send("orders", b'{"order": 7}').id

    ``timeout`` bounds connecting and each answer of a non-streaming call,
    in seconds (None: wait as long as it takes; a recycle waits for the new
    child). Every failure raises ``wfhost.ClientError`` (``Unreachable``
    when the supervisor cannot be reached) with the supervisor's message
    and the CLI's exit code."""

    def __init__(
        self,
        config: str | os.PathLike[str] | None = None,
        socket: str | os.PathLike[str] | None = None,
        timeout: float | None = 120.0,
    ) -> None:
        if (config is None) == (socket is None):
            raise ClientError(
                "say which supervisor: Client(config=PATH) or Client(socket=PATH), one of them", 2
            )
        self.socket_path = Path(socket) if socket is not None else socket_of_config(config)  # type: ignore[arg-type]
        self.timeout = timeout
        # Connections kept open between requests (the supervisor serves
        # request after request on one), with when each went idle: a
        # producer pays the connect once, not per send.
        self._idle: list[tuple[socket.socket, float]] = []
        self._idle_lock = threading.Lock()

    def close(self) -> None:
        """Closes the connections kept open between requests (the next
        request opens a new one)."""
        with self._idle_lock:
            idle, self._idle = self._idle, []
        for sock, _ in idle:
            sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- requests ---------------------------------------------------------

    def send(self, deployment: str, payload: bytes | str, key: str | None = None) -> Sent:
        """Accepts mail for ``deployment``; returns ``Sent(id, new)`` once it
        is durable in the inbox. Always sends an idempotency key (``key``, or
        a random one), so a request whose answer was lost, or whose outcome
        the supervisor could not tell (``"outcome": "unknown"``), is repeated
        under the same key and enqueued at most once; with the same ``key`` a
        later send of the same payload returns the first item's id with
        ``new=False`` and enqueues nothing. When every try ends without a
        known outcome, the error has ``outcome_unknown`` set and ``key`` to
        send again with."""
        if isinstance(payload, str):
            payload = payload.encode()
        elif isinstance(payload, (bytearray, memoryview)):
            payload = bytes(payload)
        elif not isinstance(payload, bytes):
            raise TypeError(f"a payload is bytes or str, not {type(payload).__name__}")
        own_key = key is None
        if key is None:
            key = f"auto-{secrets.token_hex(16)}"
        elif not 1 <= len(key.encode()) <= MAX_KEY_BYTES:
            raise ClientError(
                f"idempotency key must be 1 to {MAX_KEY_BYTES} bytes, not {len(key.encode())}; nothing was sent",
                2,
            )
        request = {
            "cmd": "send",
            "deployment": deployment,
            "payload_bytes": len(payload),
            "key": key,
        }
        again = (
            f"the mail may or may not have been accepted, and sending it again with "
            f"key={key!r} enqueues it at most once"
        )
        pause = SEND_RETRY_PAUSE
        unknown = ""  # what the supervisor said when it last could not tell
        for tries in range(1, SEND_TRIES + 1):
            try:
                data = self._call(request, payload)
                break
            except _LostAnswer as e:
                if tries == SEND_TRIES:
                    raise Unreachable(
                        f"{e}; tried {tries} times under idempotency key {key!r}"
                        + (f" (an earlier try's outcome was unknown: {unknown})" if unknown else "")
                        + f": {again}",
                        answer_lost=True,
                        outcome_unknown=True,
                        key=key,
                    ) from None
            except _OutcomeUnknown as e:
                unknown = e.message
                if tries == SEND_TRIES:
                    raise ClientError(
                        f"the outcome of sending to {deployment!r} is unknown: the supervisor "
                        f"said: {e.message}; tried {tries} times under idempotency key {key!r}: "
                        f"{again}",
                        e.code,
                        outcome_unknown=True,
                        key=key,
                    ) from None
            time.sleep(pause)
            pause *= 2
        mail_id = data.get("id") if isinstance(data, dict) else None
        new = data.get("new") if isinstance(data, dict) else None
        if not isinstance(mail_id, int) or isinstance(mail_id, bool) or not isinstance(new, bool):
            raise ClientError(
                f"the supervisor's answer to send has no mail id and new flag: {data!r}", 1
            )
        if tries > 1 and own_key and not new:
            # Only this call knew its random key: the item an earlier try
            # enqueued (its answer lost or its outcome unknown) is this
            # call's mail.
            new = True
        return Sent(mail_id, new)

    def mail_result(self, id: int, wait: float | None = None) -> MailResult:
        """Where mail item ``id`` is and, once it is done, how it ended and
        its result. With ``wait`` (seconds), the supervisor answers as soon
        as the item ends, or after ``wait`` with ``ended=False`` (0 or None:
        at once)."""
        if isinstance(id, bool) or not isinstance(id, int) or id < 0:
            raise ClientError(f"a mail id is a whole number, not {id!r}", 2)
        request: dict = {"cmd": "mail-result", "id": id}
        read_timeout = self.timeout
        if wait is not None and wait > 0:
            wait_ms = math.ceil(wait * 1000)
            request["wait_ms"] = wait_ms
            if read_timeout is not None:
                read_timeout += wait_ms / 1000  # the supervisor holds the answer that long
        try:
            data = self._call(request, b"", read_timeout)
        except _LostAnswer as e:
            raise Unreachable(str(e), answer_lost=True) from None
        return _mail_result(data)

    def call(
        self,
        deployment: str,
        payload: bytes | str,
        key: str | None = None,
        timeout: float | None = None,
    ) -> MailResult:
        """Sends mail (as :meth:`send`, with its repeats under one
        idempotency key) and waits for the item to end: returns its
        :class:`MailResult` (``new`` as ``send`` said; ``outcome``,
        ``reason`` and ``result`` once ended). With ``timeout`` (seconds, from
        the call), an item not ended by then is returned with
        ``ended=False``: it is still in the inbox or being processed, and
        ``mail_result(r.id, wait=...)`` asks again. A failed, cancelled or
        dead item is returned, not raised: look at ``outcome``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        sent = self.send(deployment, payload, key)
        while True:
            left = CALL_POLL if deadline is None else max(0.0, deadline - time.monotonic())
            got = self.mail_result(sent.id, wait=left)
            if got.ended or (deadline is not None and time.monotonic() >= deadline):
                return _with_new(got, sent.new)

    def status(self) -> dict:
        """``{"deployments": [...]}``: every deployment's status, as
        ``wfhost status --json`` prints it."""
        return self._call_once({"cmd": "status"})

    def events(
        self,
        after: int = 0,
        follow: bool = False,
        mail: int | None = None,
        deployment: str | None = None,
    ) -> Iterator[dict]:
        """The durable event stream: every event with a sequence number
        above ``after``, oldest first (``{"seq", "at_ms", "deployment",
        "kind", "body"}``); with ``follow`` it goes on with each new event
        until the iterator is closed. ``mail``: only that item's events (a
        followed stream then ends after its end: see :meth:`follow`);
        ``deployment``: only that deployment's. Close it (or leave the
        ``for`` loop) to hang up."""
        request: dict = {"cmd": "events", "after": int(after), "follow": bool(follow)}
        if mail is not None:
            request["mail"] = _mail_id(mail)
        if deployment is not None:
            request["deployment"] = deployment
        sock = self._connect()
        try:
            self._write(sock, request, b"")
            self._answer(sock, read_timeout=self.timeout)
            sock.settimeout(None if follow else self.timeout)
            while True:
                try:
                    message = _read_message(sock, self.socket_path, eof_ok=True)
                except _LostAnswer as e:
                    raise Unreachable(str(e)) from None
                if message is None:
                    return
                yield message
        finally:
            sock.close()

    def follow(self, id: int, after: int = 0) -> Iterator[dict]:
        """Mail item ``id``'s events as they happen (``{"seq", "at_ms",
        "deployment", "kind", "body"}``: ``mail_accepted``, ``mail_started``,
        its steps, ``mail_progress``, ``question_asked``,
        ``question_answered``, ``mail_given_back``, …), from the first with
        a sequence number above ``after``; the iterator ends after the
        item's end, ``mail_done`` or ``mail_dead``, the last event it
        yields. A connection that breaks before that is made again from the
        last ``seq`` seen (nothing missed, nothing twice), up to 5 times in
        a row, pausing 100 ms and doubling; then ``Unreachable`` is raised.
        A refusal (an unknown item) raises ``ClientError`` at once."""
        if isinstance(after, bool) or not isinstance(after, int) or after < 0:
            raise ClientError(f"after is a sequence number, not {after!r}", 2)
        return self._follow(_mail_id(id), after)

    def _follow(self, id: int, last: int) -> Iterator[dict]:
        request = {"cmd": "events", "mail": id, "follow": True}
        tries = 0
        pause = FOLLOW_RETRY_PAUSE
        while True:
            sock = None
            try:
                sock = self._connect()
                self._write(sock, {**request, "after": last}, b"")
                self._answer(sock, read_timeout=self.timeout)
                sock.settimeout(None)
                while True:
                    event = _read_message(sock, self.socket_path, eof_ok=True)
                    if event is None:
                        raise _LostAnswer(
                            f"the supervisor at {self.socket_path} closed the stream of mail "
                            f"{id} before its end"
                        )
                    seq = event.get("seq") if isinstance(event, dict) else None
                    if not isinstance(seq, int) or isinstance(seq, bool):
                        raise ClientError(
                            f"the supervisor at {self.socket_path} sent an event without a seq: "
                            f"{event!r}",
                            1,
                        )
                    if seq <= last:
                        continue  # never twice
                    last = seq
                    tries = 0
                    yield event
                    if event.get("kind") in ENDS:
                        return
            except (_LostAnswer, Unreachable, OSError) as e:
                tries += 1
                if tries >= FOLLOW_TRIES:
                    raise Unreachable(
                        f"following mail {id} failed {tries} times in a row, the last after "
                        f"event {last}: {e}; follow({id}, after={last}) goes on from there"
                    ) from None
            finally:
                if sock is not None:
                    sock.close()
            time.sleep(pause)
            pause *= 2

    def questions(self, deployment: str | None = None) -> list[dict]:
        """Every open question (``mail.ask`` of a handler not answered yet),
        oldest first, of ``deployment`` or of all: ``{"deployment", "id",
        "key", "prompt", "attempt", "asked_at_ms", "age_ms"}``, ``prompt``
        the JSON value the handler asked with."""
        request: dict = {"cmd": "questions"}
        if deployment is not None:
            request["deployment"] = deployment
        data = self._call_once(request)
        questions = data.get("questions") if isinstance(data, dict) else None
        if not isinstance(questions, list) or not all(isinstance(x, dict) for x in questions):
            raise ClientError(
                f"the supervisor's answer to questions has no list of questions: {data!r}", 1
            )
        return questions

    def answer(self, id: int, key: str, value: Any, by: str | None = None) -> dict:
        """Answers question ``key`` of mail item ``id`` with ``value`` (any
        JSON value, at most 64 KiB encoded), labelled ``by`` (optional, at
        most 128 characters, journaled beside your user). Returns the
        supervisor's ``{"id", "deployment", "key", "new", "answered_at_ms",
        "by", "journal_seq"}`` once the answer is stored; the child holding
        the item (if one does) gets it at once. The same value again is
        answered ``new: false`` and changes nothing, so a reply that was
        lost is asked for again, up to 5 times. A different value than the
        first answer, an unknown item or key, an item that has ended: the
        supervisor's refusal, as ``ClientError`` with its text."""
        if not isinstance(key, str):
            raise ClientError(f"a question's key is a str, not {type(key).__name__}", 2)
        request: dict = {"cmd": "answer", "id": _mail_id(id), "key": key, "value": value}
        if by is not None:
            request["by"] = by
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise ClientError(
                f"the answer must be a JSON value, and json cannot encode this "
                f"{type(value).__name__} ({e}); nothing was sent",
                2,
            ) from None
        pause = SEND_RETRY_PAUSE
        for tries in range(1, ANSWER_TRIES + 1):
            try:
                data = self._call(request, b"")
                break
            except _LostAnswer as e:
                if tries == ANSWER_TRIES:
                    raise Unreachable(
                        f"{e}; tried {tries} times: the answer may or may not be stored, and "
                        f"giving the same value again is safe",
                        answer_lost=True,
                    ) from None
            time.sleep(pause)
            pause *= 2
        if not isinstance(data, dict) or not isinstance(data.get("new"), bool):
            raise ClientError(f"the supervisor's answer to answer has no new flag: {data!r}", 1)
        return data

    def drain(self, deployment: str) -> dict:
        """Drains ``deployment`` (it stays drained until resumed)."""
        return self._call_once({"cmd": "drain", "deployment": deployment})

    def resume(self, deployment: str) -> dict:
        """Starts a drained or failed deployment again."""
        return self._call_once({"cmd": "resume", "deployment": deployment})

    def recycle(self, deployment: str, reason: str | None = None) -> dict:
        """Replaces the deployment's child; answers once the new one is
        ready (``{"deployment", "old_pid", "pid"}``)."""
        return self._call_once({"cmd": "recycle", "deployment": deployment, "reason": reason})

    def cancel(self, deployment: str, run: str | None = None) -> dict:
        """A signed operator cancel of ``run`` (every run when None),
        answered once it is journaled and sent."""
        return self._call_once({"cmd": "cancel", "deployment": deployment, "run": run})

    # --- the wire ----------------------------------------------------------

    def _call_once(self, request: dict) -> Any:
        try:
            return self._call(request, b"")
        except _LostAnswer as e:
            raise Unreachable(str(e), answer_lost=True) from None

    def _call(self, request: dict, body: bytes, read_timeout: Any = ...) -> Any:
        if read_timeout is ...:
            read_timeout = self.timeout
        # Only requests safe to repeat go on a kept connection: one the
        # supervisor closed just before the request arrived (it closes
        # kept connections between requests only) is tried once more on a
        # new one.
        repeatable = request.get("cmd") in _REPEATABLE
        kept_sock = self._kept() if repeatable else None
        if kept_sock is not None:
            try:
                return self._call_on(kept_sock, request, body, read_timeout, repeatable)
            except _NoAnswer:
                pass
        try:
            return self._call_on(self._connect(), request, body, read_timeout, repeatable)
        except _NoAnswer as e:
            raise _LostAnswer(str(e)) from None

    def _call_on(
        self, sock: socket.socket, request: dict, body: bytes, read_timeout: Any, keep: bool
    ) -> Any:
        kept = False
        try:
            wrote: OSError | None = None
            try:
                self._write(sock, request, body)
            except OSError as e:
                # The supervisor may have answered anyway (a refusal is
                # written without reading the whole request).
                wrote = e
            try:
                answer = self._answer(sock, read_timeout=read_timeout)
            except _LostAnswer as e:
                if wrote is not None:
                    raise _LostAnswer(
                        f"the supervisor at {self.socket_path} did not answer: {wrote.strerror or wrote}"
                    ) from None
                raise _NoAnswer(str(e)) if e.before_answer else e
            # Answered in full: the connection serves the next request.
            kept = keep
            return answer
        finally:
            if kept:
                self._keep(sock)
            else:
                sock.close()

    def _kept(self) -> socket.socket | None:
        """A connection kept from an earlier request that is still open, if
        any; one idle too long (the supervisor closes them after 30 s) or
        closed by the supervisor is dropped."""
        now = time.monotonic()
        while True:
            with self._idle_lock:
                if not self._idle:
                    return None
                sock, since = self._idle.pop()
            if now - since < _KEEP_IDLE_S and _still_open(sock, self.timeout):
                return sock
            sock.close()

    def _keep(self, sock: socket.socket) -> None:
        with self._idle_lock:
            if len(self._idle) < _KEEP_MAX:
                self._idle.append((sock, time.monotonic()))
                return
        sock.close()

    def _connect(self) -> socket.socket:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.socket_path))
        except PermissionError as e:
            sock.close()
            raise ClientError(
                f"permission denied: cannot connect to {self.socket_path}: {e.strerror}; run as root, "
                f"the supervisor's user, or a member of its admin_group",
                1,
            ) from None
        except OSError as e:
            sock.close()
            raise Unreachable(
                f"cannot reach the supervisor at {self.socket_path}: {e.strerror or e}; is "
                f"`wfhost supervise` running with this config?"
            ) from None
        return sock

    def _write(self, sock: socket.socket, request: dict, body: bytes) -> None:
        data = json.dumps({"v": VERSION, **request}, separators=(",", ":")).encode()
        sock.sendall(len(data).to_bytes(4, "big") + data)
        if body:
            sock.sendall(body)

    def _answer(self, sock: socket.socket, read_timeout: float | None) -> Any:
        sock.settimeout(read_timeout)
        response = _read_message(sock, self.socket_path, eof_ok=False)
        if not isinstance(response, dict):
            raise ClientError(
                f"the supervisor at {self.socket_path} answered {response!r}, not an object", 1
            )
        if not response.get("ok"):
            code = response.get("code")
            error = ClientError if response.get("outcome") != "unknown" else _OutcomeUnknown
            raise error(
                str(response.get("error") or "the supervisor reported a failure"),
                code if isinstance(code, int) else 1,
            )
        return response.get("data")


# Connections kept between requests: at most this many, each at most
# this long idle (the supervisor closes a connection idle for 30 s).
_KEEP_MAX = 8
_KEEP_IDLE_S = 20.0

# The requests that may go on a kept connection: each is safe to repeat.
_REPEATABLE = frozenset({"send", "mail-result", "status", "questions", "answer"})


def _still_open(sock: socket.socket, timeout: float | None) -> bool:
    """Whether a kept connection is still open: nothing is owed on it, so
    anything to read (the end, mostly) means it is no longer usable."""
    try:
        sock.setblocking(False)
        try:
            sock.recv(1, socket.MSG_PEEK)
            return False
        finally:
            sock.settimeout(timeout)
    except BlockingIOError:
        return True
    except OSError:
        return False


def _mail_id(id: object) -> int:
    if isinstance(id, bool) or not isinstance(id, int) or id < 0:
        raise ClientError(f"a mail id is a whole number, not {id!r}", 2)
    return id


def _with_new(got: MailResult, new: bool) -> MailResult:
    return replace(got, new=new)


def _read_exact(
    sock: socket.socket, n: int, path: Path, eof_ok: bool, first: bool = False
) -> bytes | None:
    chunks = []
    left = n
    while left:
        try:
            chunk = sock.recv(min(left, 1 << 16))
        except TimeoutError:
            raise _LostAnswer(f"the supervisor at {path} did not answer in time") from None
        except OSError as e:
            raise _LostAnswer(
                f"the supervisor at {path} did not answer: {e.strerror or e}",
                before_answer=first and left == n,
            ) from None
        if not chunk:
            if eof_ok and left == n:
                return None
            raise _LostAnswer(
                f"the supervisor at {path} closed the connection before its answer",
                before_answer=first and left == n,
            )
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_message(sock: socket.socket, path: Path, eof_ok: bool) -> Any:
    header = _read_exact(sock, 4, path, eof_ok, first=True)
    if header is None:
        return None
    n = int.from_bytes(header, "big")
    if not 1 <= n <= MAX_MESSAGE:
        raise ClientError(
            f"the supervisor at {path} sent a message of {n} bytes (limit {MAX_MESSAGE})", 1
        )
    data = _read_exact(sock, n, path, eof_ok=False)
    try:
        return json.loads(data)  # type: ignore[arg-type]
    except ValueError as e:
        raise ClientError(
            f"the supervisor at {path} sent a message that is not JSON: {e}", 1
        ) from None
