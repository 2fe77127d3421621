"""The conformance child's mail payload (``docs/conformance.md``): what
each item asks the child to do. Shared by the blocking and the asyncio
conformance children."""

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


class Plan(Record):
    """What one item asks for; ``result`` is what its handler returns (None:
    nothing), ``cancellable`` what the handler declares."""

    __slots__ = ("run", "steps", "fail", "recycle", "custom", "result", "cancellable")

    def __init__(
        self,
        run: str | None,
        steps: list[PlannedStep],
        fail: str | None,
        recycle: str | None,
        custom: tuple[str, bytes] | None,
        result: bytes | None = None,
        cancellable: bool = True,
    ) -> None:
        self.run = run
        self.steps = steps
        self.fail = fail
        self.recycle = recycle
        self.custom = custom
        self.result = result
        self.cancellable = cancellable


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
    return Plan(
        run=_text(doc, "run", ""),
        steps=steps,
        fail=_text(doc, "fail", ""),
        recycle=_text(doc, "recycle", ""),
        custom=pair,
        result=result,
        cancellable=cancellable,
    )


def cancellable(payload: bytes) -> bool:
    """What the item's handler declares: False only when the payload says
    ``"cancellable": false`` (a bad payload's handler is cancellable)."""
    try:
        return parse(payload).cancellable
    except BadPayload:
        return True


def took(mail_id: int, attempt: int) -> bytes:
    """The bytes of the ``conformance.took`` event."""
    return json.dumps({"id": str(mail_id), "attempt": attempt}, separators=(",", ":")).encode()
