"""The questions and answers of a mail item (protocol 3, docs/protocol.md
§4.12, "A person in the loop"): what ``mail.ask`` and ``mail.progress``
check before anything is sent; what one held item asked in this attempt
and was answered (:class:`Questions`, pure bookkeeping); the waiters of an
``ask`` (a blocked thread, or an asyncio future); and the core's side of it
all (:class:`Asking`, a part of :class:`wfhost.core.Core`): sending ``Ask``
and ``Progress``, resolving waiters on ``Answer``, giving back the items
whose handlers wait when a drain begins.

An item's answers are remembered while the child holds it, for this
attempt only: the supervisor keeps them across attempts, and answers a
new attempt's ``Ask`` of an answered key at once."""

from __future__ import annotations

import threading

from . import messages as m
from . import token as t
from .errors import Cancelled, ChannelClosed, GivenBack, MailSettled, TooLarge, Unsupported
from .log import log

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Callable

# docs/protocol.md §4.12: a key is 1 to 256 bytes of UTF-8; a prompt, a
# progress report and an answer are JSON of at most 64 KiB; an item asks
# at most 64 distinct questions (the supervisor stops a child that asks
# more, so the library refuses the 65th of an attempt itself).
MAX_KEY_BYTES = 256
MAX_JSON_BYTES = 64 << 10
MAX_QUESTIONS = 64


def check_key(key: object) -> str:
    """``key`` if it may name a question: a str of 1 to 256 bytes of UTF-8;
    else ``TypeError`` or ``ValueError`` saying so (nothing is sent)."""
    if not isinstance(key, str):
        raise TypeError(
            f"the key of a question is a str, not {type(key).__name__}; nothing was sent"
        )
    try:
        size = len(key.encode())
    except UnicodeEncodeError as e:
        raise ValueError(
            f"the key of a question must be UTF-8, and {key!r} cannot be encoded ({e.reason}); "
            f"nothing was sent"
        ) from None
    if not 1 <= size <= MAX_KEY_BYTES:
        raise ValueError(
            f"the key of a question is 1 to {MAX_KEY_BYTES} bytes of UTF-8, not {size}; "
            f"nothing was sent"
        )
    return key


def json_bytes(what: str, value: object) -> bytes:
    """``value`` as compact JSON (non-ASCII kept as UTF-8), at most 64 KiB;
    ``TypeError`` for a value json cannot encode (a set, a NaN, an object),
    ``wfhost.TooLarge`` for a larger encoding. ``what`` names it in the
    message (``"the prompt of question 'approve'"``)."""
    import json  # here: only children that ask or report progress need it

    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise TypeError(
            f"{what} must be a JSON value (dict, list, str, int, float, bool or None), and json "
            f"cannot encode this {type(value).__name__} ({e}); nothing was sent"
        ) from None
    try:
        data = text.encode()
    except UnicodeEncodeError:  # a lone surrogate in a string: escape it
        data = json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
    if len(data) > MAX_JSON_BYTES:
        raise TooLarge(
            f"{what} is {len(data)} bytes of JSON, over the limit of {MAX_JSON_BYTES}; "
            f"nothing was sent"
        )
    return data


class Waiter:
    """One ``ask`` waiting for its answer. The runtime settles it once:
    with the answer's bytes, or with the error the ``ask`` raises (given
    back, cancelled, the runtime closed). ``event`` is set then, and
    ``notify`` (if any) is called, under the core's lock: it must not block
    or call back into the runtime (the asyncio surface schedules its future
    from it)."""

    __slots__ = ("event", "value", "error", "notify")

    def __init__(self, notify: Callable[[], None] | None = None) -> None:
        self.event = threading.Event()
        self.value: bytes | None = None
        self.error: BaseException | None = None
        self.notify = notify

    @property
    def done(self) -> bool:
        return self.event.is_set()

    def resolve(self, value: bytes) -> None:
        if not self.done:
            self.value = value
            self._settled()

    def fail(self, error: BaseException) -> None:
        if not self.done:
            self.error = error
            self._settled()

    def _settled(self) -> None:
        self.event.set()
        if self.notify is not None:
            self.notify()

    def result(self) -> object:
        """The answer, parsed (a new object for each waiter), or raises the
        error the waiter was failed with."""
        if self.error is not None:
            raise self.error
        assert self.value is not None, "result() of a waiter not settled"
        return parse_answer(self.value)


def parse_answer(value: bytes) -> object:
    """An answer's JSON as a Python value."""
    import json  # here: only children that ask need it

    return json.loads(value)


class Questions:
    """What one held item asked in this attempt: the answers by key, the
    keys whose ``Ask`` was sent and not answered yet, and the waiters of
    each key (several ``ask`` of one key share the one ``Ask`` and its one
    ``Answer``)."""

    __slots__ = ("answers", "open", "waiting")

    def __init__(self) -> None:
        self.answers: dict[str, bytes] = {}
        self.open: set[str] = set()
        self.waiting: dict[str, list[Waiter]] = {}

    def check_room(self, key: str, mail_id: int) -> None:
        """Raises ``ValueError`` when ``key`` would be this attempt's 65th
        distinct question (the supervisor stops a child that asks more)."""
        if key not in self.open and key not in self.answers:
            if len(self.open) + len(self.answers) >= MAX_QUESTIONS:
                raise ValueError(
                    f"mail {mail_id} already asked {MAX_QUESTIONS} distinct questions, the most "
                    f"an item may ask; {key!r} was not sent"
                )

    def wait(self, key: str, waiter: Waiter) -> bool:
        """Registers ``waiter`` for ``key``; True when the ``Ask`` must be
        sent (the key was not asked yet in this attempt)."""
        self.waiting.setdefault(key, []).append(waiter)
        if key in self.open:
            return False
        self.open.add(key)
        return True

    def forget(self, key: str, waiter: Waiter) -> None:
        """An ``ask`` that stopped waiting on its own (its task was
        cancelled, the thread interrupted). The question stays open with
        the supervisor: an ``Answer`` to it is still remembered."""
        waiters = self.waiting.get(key)
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
            if not waiters:
                del self.waiting[key]

    def answer(self, key: str, value: bytes) -> bool:
        """The supervisor's ``Answer``: remembered, and every waiter of the
        key resolved. False (ignored) for a key not asked in this attempt."""
        if key not in self.open and key not in self.answers:
            return False
        self.open.discard(key)
        self.answers.setdefault(key, value)
        for waiter in self.waiting.pop(key, []):
            waiter.resolve(self.answers[key])
        return True

    def asking(self) -> bool:
        """Whether a handler waits in ``ask`` (the item is given back on a
        drain)."""
        return bool(self.waiting)

    def fail_all(self, error: Callable[[str], BaseException]) -> None:
        """Fails every waiter, each with ``error(key)`` of its own."""
        waiting, self.waiting = self.waiting, {}
        for key, waiters in waiting.items():
            for waiter in waiters:
                waiter.fail(error(key))


class Asking:
    """The core's side of a person in the loop, a part of
    :class:`wfhost.core.Core` kept here: ``ask`` and ``progress`` of a held
    item, the ``Answer`` that resolves its waiters, the give-back of the
    items whose handlers wait when a drain begins (or the lease runs out,
    or ``Shutdown`` comes), and what a cancel or the runtime's closure does
    to a waiting ``ask``. Every method but the first three is called under
    the core's lock."""

    if TYPE_CHECKING:
        from .channel import Outbox
        from .core import CloseReason, Delivery
        from .mail_ledger import MailLedger
        from .work import Work

        lock: threading.Lock
        held: dict[int, Delivery]
        v3: bool
        protocol: int
        outbox: Outbox
        work: Work
        ledger: MailLedger
        close_reason: CloseReason | None

        def flush(self) -> None: ...
        def _flush_quietly(self) -> None: ...
        def _queue_quietly(self, events: list) -> None: ...
        def _notify(self) -> None: ...

    # --- application calls (the lock not held) --------------------------------

    def ask(self, item: Delivery, key: str, prompt: bytes, waiter: Waiter) -> bytes | None:
        """Asks question ``key`` (checked) of a held, started item: returns
        the answer remembered for the item at once (no frame), or None once
        ``waiter`` waits for it (the ``Ask`` sent unless this attempt asked
        the key already). During a drain (or after ``Shutdown``) the item is
        given back at once instead, and ``GivenBack`` raised."""
        given_back = None
        with self.lock:
            questions = self._asking(item, "ask")
            answer = questions.answers.get(key)
            if answer is not None:
                return answer
            if item.token.event.is_set():  # its cancel was acknowledged
                raise Cancelled(t.CANCEL, item.token.reason or "cancelled")
            questions.check_room(key, item.id)
            if self._gives_back():
                why = f"it asked {key!r} after the drain began"
                self._give_back(item, why)
                given_back = given_back_error(item.id, key, why)
            else:
                data = None
                if key not in questions.open:
                    data = self.outbox.encode(m.Ask(item.id, key, prompt))
                    self.outbox.check_open()
                questions.wait(key, waiter)
                if data is not None:
                    self.outbox.append(data)
        if given_back is not None:
            self._flush_quietly()
            raise given_back
        try:
            self.flush()
        except ChannelClosed:
            self.forget_waiter(item, key, waiter)
            raise
        return None

    def forget_waiter(self, item: Delivery, key: str, waiter: Waiter) -> None:
        """An ``ask`` that stopped waiting before its answer (its task was
        cancelled, its thread interrupted): no longer counted as asking."""
        with self.lock:
            if item.questions is not None:
                item.questions.forget(key, waiter)

    def progress(self, item: Delivery, data: bytes) -> None:
        """Sends ``Progress`` for a held, started item (``data`` checked)."""
        with self.lock:
            self._asking(item, "progress")
            self.outbox.append(self.outbox.encode(m.Progress(item.id, data)))
        self.flush()

    # --- internals (the lock held) ----------------------------------------------

    def _asking(self, item: Delivery, what: str) -> Questions:
        """The questions of ``item``, which may ask or report progress; else
        raises why not (nothing is sent)."""
        if not self.v3:
            raise Unsupported(
                f"mail.{what}() needs protocol 3, and this child speaks protocol {self.protocol} "
                f"with its supervisor (a supervisor of version 2); nothing was sent"
            )
        if item.given_back:
            raise GivenBack(
                item.id,
                None,
                f"mail {item.id} was given back to the supervisor; its handler's {what}() is "
                f"discarded (its next attempt runs the handler again)",
            )
        if self.held.get(item.id) is not item or not item.started:
            raise MailSettled(
                f"mail {item.id} is no longer held (it ended, or was released); its {what}() "
                f"was not sent"
            )
        reason = self.close_reason
        if reason is not None and reason.kind != "shutdown":
            raise ChannelClosed(
                f"the runtime closed ({reason.message}); mail {item.id}'s {what}() was not sent"
            )
        if item.questions is None:
            item.questions = Questions()
        return item.questions

    def _gives_back(self) -> bool:
        """Whether an item whose handler asks is given back: a drain began
        (or the lease ran out), or the supervisor sent ``Shutdown``."""
        return self.work.draining or self.close_reason is not None

    def _give_back_asking(self, why: str) -> None:
        """Gives back every held item whose handler waits in ``ask``."""
        for item in list(self.held.values()):
            if item.started and item.questions is not None and item.questions.asking():
                self._give_back(item, why)

    def _give_back(self, item: Delivery, why: str) -> None:
        """``GiveBack { awaiting_answer: true }``; the item forgotten (no
        ``MailDone`` is ever sent for it, and it no longer holds a drain:
        ``Drained`` follows if it was the last); every ``ask`` of it failed
        with ``GivenBack``."""
        del self.held[item.id]
        item.given_back = True
        self.ledger.abandon(item.id)
        self._queue_quietly([m.GiveBack(item.id, True)])
        self._queue_quietly(self.work.settle_mail())
        log(
            f"mail {item.id} given back to the supervisor ({why}): its handler waits for an "
            f"answer; its next attempt, once the question is answered, runs it again"
        )
        if item.questions is not None:
            item.questions.fail_all(lambda key: given_back_error(item.id, key, why))
        self._notify()

    def _answer(self, answer: m.Answer) -> None:
        """The supervisor's ``Answer`` (the lock not held): every waiting
        ``ask`` of the item and key resolved, the answer remembered; one for
        an item or key nobody here asked about is ignored."""
        with self.lock:
            item = self.held.get(answer.id)
            questions = item.questions if item is not None else None
            taken = questions is not None and questions.answer(answer.key, answer.value)
        if not taken:
            log(
                f"ignored an Answer for mail {answer.id}, key {answer.key!r}: no handler of this "
                f"child asked it"
            )

    def _cancel_questions(self, item: Delivery, reason: str) -> None:
        """An acknowledged cancel of the item: a waiting ``ask`` raises
        ``Cancelled``. Called after the item's token fired, so on the
        asyncio surface the handler's task is cancelled first (its ``ask``
        raises ``CancelledError``, the surface's own cancellation)."""
        if item.questions is not None:
            item.questions.fail_all(lambda key: Cancelled(t.CANCEL, reason))

    def _close_questions(self, kind: str, message: str) -> None:
        """The runtime closed: on ``Shutdown`` the items that ask are given
        back (the channel still carries it); otherwise each waiting ``ask``
        raises ``ChannelClosed``."""
        if kind == "shutdown":
            self._give_back_asking("the supervisor sent Shutdown")
            return
        for item in self.held.values():
            if item.questions is not None:
                item.questions.fail_all(
                    lambda key, id=item.id: ChannelClosed(
                        f"the runtime closed ({message}) while mail {id} waited for an answer "
                        f"to {key!r}"
                    )
                )


def given_back_error(mail_id: int, key: str, why: str) -> GivenBack:
    return GivenBack(
        mail_id,
        key,
        f"mail {mail_id} was given back to the supervisor while its handler waited for an answer "
        f"to {key!r} ({why}); let this pass: what the handler returns now is discarded, and the "
        f"item's next attempt runs it again from the start",
    )
