"""What ``rt.custom(kind, data)`` sends, for both surfaces: ``data`` is
turned into the event's bytes at the call site, before anything is queued,
so a value that cannot be sent raises there and nothing reaches the
supervisor."""

from __future__ import annotations

ACCEPTED = (
    "bytes, bytearray or memoryview (sent as they are), str (sent as UTF-8), "
    "or a dict, list, int, float, bool or None that json can encode (sent JSON-encoded)"
)


def custom_bytes(kind: str, data: object) -> bytes:
    """The bytes of a ``Custom`` event carrying ``data``: bytes-like as is,
    ``str`` as UTF-8, a JSON value (dict, list, int, float, bool, None)
    JSON-encoded (compact, non-ASCII kept as UTF-8). Anything else, and a
    value json cannot encode (a set inside a dict, a NaN, a cycle), raises
    ``TypeError`` naming the accepted types."""
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        try:
            return data.encode()
        except UnicodeEncodeError as e:
            raise ValueError(
                f"custom event {kind!r}: data is a str that UTF-8 cannot encode "
                f"({e.reason} at index {e.start}); nothing was sent"
            ) from None
    if data is None or isinstance(data, (dict, list, int, float)):  # bool is an int
        import json  # here: few children send JSON events, and not at start-up

        try:
            text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError, RecursionError) as e:
            raise TypeError(
                f"custom event {kind!r}: data is a {type(data).__name__} that json cannot encode "
                f"({e}); data must be {ACCEPTED}; nothing was sent"
            ) from None
        try:
            return text.encode()
        except UnicodeEncodeError:  # a lone surrogate in a string: escape it
            return json.dumps(data, separators=(",", ":"), allow_nan=False).encode()
    raise TypeError(
        f"custom event {kind!r}: data must be {ACCEPTED}, not {type(data).__name__}; "
        f"nothing was sent"
    )


def result_bytes(value: object) -> bytes:
    """The bytes of a mail item's result (``MailDone.result``) from what its
    handler returned: bytes-like as is, ``str`` as UTF-8, None as nothing,
    anything else as its compact JSON (non-ASCII kept as UTF-8). A value
    json cannot encode raises ``TypeError`` saying so."""
    if value is None:
        return b""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return value.encode()
        except UnicodeEncodeError as e:
            raise TypeError(
                f"the result is a str that UTF-8 cannot encode ({e.reason} at index {e.start})"
            ) from None
    import json  # here: only results that are objects need it

    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise TypeError(
            f"the result is a {type(value).__name__} that json cannot encode ({e}); return "
            f"bytes, str, None or a value json can encode"
        ) from None
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate in a string: escape it
        return json.dumps(value, separators=(",", ":"), allow_nan=False).encode()
