"""The conformance child's mail payload (``docs/conformance.md``): what
each item asks the child to do. Shared by the blocking and the asyncio
conformance children. A handler's work, in order: ``conformance.took``,
``custom``, ``progress`` and ``progress_bytes``, ``steps``, ``ask``, then
its end."""

from __future__ import annotations

import json

from .record import Record


class BadPayload(ValueError):
    """The payload is not the JSON the conformance kit sends."""


class PlannedStep(Record):
    __slots__ = ("name", "drain", "ms", "ignore_cancel")

    def __init__(self, name: str, drain: str, ms: int, ignore_cancel: bool) -> None:
        self.name = name
        self.drain = drain
        self.ms = ms
        self.ignore_cancel = ignore_cancel


class PlannedAsk(Record):
    __slots__ = ("key", "prompt")

    def __init__(self, key: str, prompt: object) -> None:
        self.key = key
        self.prompt = prompt


class Plan(Record):
    """What one item asks for; ``result`` is what its handler returns (None:
    nothing, or the last answer when it asks), ``cancellable`` what the
    handler declares; ``progress`` the values it reports before its steps,
    then ``progress_bytes`` (a JSON string of exactly that many bytes);
    ``asks`` the questions it asks after them."""

    __slots__ = (
        "run",
        "steps",
        "fail",
        "recycle",
        "custom",
        "result",
        "cancellable",
        "progress",
        "progress_bytes",
        "asks",
    )

    def __init__(
        self,
        run: str | None,
        steps: list[PlannedStep],
        fail: str | None,
        recycle: str | None,
        custom: tuple[str, bytes] | None,
        result: bytes | None = None,
        cancellable: bool = True,
        progress: list | None = None,
        progress_bytes: int | None = None,
        asks: list[PlannedAsk] | None = None,
    ) -> None:
        self.run = run
        self.steps = steps
        self.fail = fail
        self.recycle = recycle
        self.custom = custom
        self.result = result
        self.cancellable = cancellable
        self.progress = progress or []
        self.progress_bytes = progress_bytes
        self.asks = asks or []

    def progress_string(self) -> str | None:
        """The JSON string ``progress_bytes`` asks for: ``"ppp…"``, whose
        encoding is exactly that many bytes."""
        if self.progress_bytes is None:
            return None
        return "p" * (self.progress_bytes - 2)


def _text(obj: dict, key: str, where: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise BadPayload(f"{where}{key} must be a string")
    return value


def parse(payload: bytes) -> Plan:
    """The plan of one item, or ``BadPayload`` saying what is wrong."""
    try:
        doc = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadPayload(f"not UTF-8 JSON ({e})") from None
    if not isinstance(doc, dict):
        raise BadPayload("the payload must be a JSON object")
    steps = []
    raw_steps = doc.get("steps", [])
    if not isinstance(raw_steps, list):
        raise BadPayload("steps must be a list")
    for i, s in enumerate(raw_steps):
        where = f"steps[{i}]."
        if not isinstance(s, dict):
            raise BadPayload(f"steps[{i}] must be an object")
        name = _text(s, "name", where)
        if name is None:
            raise BadPayload(f"{where}name is missing")
        drain = s.get("drain", "cancel")
        if drain not in ("cancel", "wait"):
            raise BadPayload(f'{where}drain must be "cancel" or "wait"')
        ms = s.get("ms", 0)
        if not isinstance(ms, int) or isinstance(ms, bool) or ms < 0:
            raise BadPayload(f"{where}ms must be a whole number of milliseconds")
        ignore = s.get("ignore_cancel", False)
        if not isinstance(ignore, bool):
            raise BadPayload(f"{where}ignore_cancel must be true or false")
        steps.append(PlannedStep(name, drain, ms, ignore))
    custom = doc.get("custom")
    pair = None
    if custom is not None:
        if not isinstance(custom, dict):
            raise BadPayload("custom must be an object")
        kind = _text(custom, "kind", "custom.") or ""
        try:
            data = bytes.fromhex(_text(custom, "hex", "custom.") or "")
        except ValueError:
            raise BadPayload("custom.hex is not hex") from None
        pair = (kind, data)
    result = None
    result_hex = _text(doc, "result_hex", "")
    size = doc.get("result_size")
    if result_hex is not None:  # the first wins when both are given
        try:
            result = bytes.fromhex(result_hex)
        except ValueError:
            raise BadPayload("result_hex is not hex") from None
    elif size is not None:
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise BadPayload("result_size must be a whole number of bytes")
        result = b"r" * size
    cancellable = doc.get("cancellable", True)
    if not isinstance(cancellable, bool):
        raise BadPayload("cancellable must be true or false")
    progress = doc.get("progress", [])
    if not isinstance(progress, list):
        raise BadPayload("progress must be a list of JSON values")
    progress_bytes = doc.get("progress_bytes")
    if progress_bytes is not None and (
        not isinstance(progress_bytes, int)
        or isinstance(progress_bytes, bool)
        or progress_bytes < 2
    ):
        raise BadPayload("progress_bytes must be a whole number of bytes, at least 2")
    raw_asks = doc.get("ask", [])
    if isinstance(raw_asks, dict):
        raw_asks = [raw_asks]
    if not isinstance(raw_asks, list):
        raise BadPayload("ask must be an object or a list of objects")
    asks = []
    for i, a in enumerate(raw_asks):
        if not isinstance(a, dict):
            raise BadPayload(f"ask[{i}] must be an object")
        key = _text(a, "key", f"ask[{i}].")
        if key is None:
            raise BadPayload(f"ask[{i}].key is missing")
        asks.append(PlannedAsk(key, a.get("prompt")))
    return Plan(
        run=_text(doc, "run", ""),
        steps=steps,
        fail=_text(doc, "fail", ""),
        recycle=_text(doc, "recycle", ""),
        custom=pair,
        result=result,
        cancellable=cancellable,
        progress=progress,
        progress_bytes=progress_bytes,
        asks=asks,
    )


def cancellable(payload: bytes) -> bool:
    """What the item's handler declares: False only when the payload says
    ``"cancellable": false`` (a bad payload's handler is cancellable)."""
    try:
        return parse(payload).cancellable
    except BadPayload:
        return True


def compact(value: object) -> bytes:
    """An answer as the item's result: compact JSON, non-ASCII as UTF-8 (as
    ``serde_json::to_vec`` and ``JSON.stringify`` write it)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def took(mail_id: int, attempt: int) -> bytes:
    """The bytes of the ``conformance.took`` event."""
    return json.dumps({"id": str(mail_id), "attempt": attempt}, separators=(",", ":")).encode()
