"""Framing (``ipc/src/frame.rs``): a ``u32`` big-endian length, then that
many bytes of body encoding one ``Frame { seq: u64, body }``. A length of 0
or above ``max_frame_bytes`` is refused from the header alone, before any
byte of the body is read or room made for it; sequence numbers start at 1
and grow by one per direction."""

from __future__ import annotations

import struct

from .codec import Reader, Writer
from .errors import ProtocolViolation
from .messages import decode_control, decode_event, encode_body, name

DEFAULT_MAX_FRAME_BYTES = 1 << 20
MAX_FRAME_LIMIT = 64 << 20
HEADER_BYTES = 4
_LEN = struct.Struct(">I")


def encode_frame(seq: int, message: object, max_frame_bytes: int = MAX_FRAME_LIMIT) -> bytes:
    """One whole frame (header and body). Refuses a body above
    ``max_frame_bytes`` with a ``ProtocolViolation`` of kind ``too_large``,
    so a sender never emits what its peer must refuse."""
    buf = bytearray(b"\0\0\0\0")
    w = Writer(buf)
    w.u64(seq)
    encode_body(message, w)
    n = len(buf) - HEADER_BYTES
    if n > max_frame_bytes:
        raise ProtocolViolation(
            "too_large",
            f"{name(message)} frame of {n} bytes exceeds max_frame_bytes {max_frame_bytes}",
        )
    buf[0:4] = n.to_bytes(4, "big")
    return bytes(buf)


def check_len(header: bytes | bytearray, max_frame_bytes: int) -> int:
    """The body length a header announces, or the violation it is."""
    n = int.from_bytes(header[:4], "big")
    if n == 0:
        raise ProtocolViolation("empty", "empty frame (length 0)")
    if n > max_frame_bytes:
        raise ProtocolViolation(
            "too_large", f"frame of {n} bytes exceeds max_frame_bytes {max_frame_bytes}"
        )
    return n


def decode_body(body: bytes, direction: str) -> tuple[int, object]:
    """``(seq, message)`` from a frame body that must hold exactly one frame;
    ``direction`` is ``"down"`` (a Control) or ``"up"`` (an Event)."""
    r = Reader(body)
    seq = r.u64("the frame's seq")
    message = decode_control(r) if direction == "down" else decode_event(r)
    r.finish()
    return seq, message


def truncation(buffered: bytes | bytearray) -> ProtocolViolation:
    """The violation for a stream that ended inside a frame."""
    if len(buffered) >= HEADER_BYTES:
        want = HEADER_BYTES + int.from_bytes(buffered[:4], "big")
    else:
        want = HEADER_BYTES
    return ProtocolViolation(
        "truncated", f"stream ended inside a frame ({len(buffered)} of {want} bytes)"
    )


def decode_one(
    data: bytes, direction: str, max_frame_bytes: int = MAX_FRAME_LIMIT
) -> tuple[int, object]:
    """Decodes a buffer that must hold exactly one whole frame."""
    if len(data) < HEADER_BYTES:
        raise truncation(data)
    n = check_len(data, max_frame_bytes)
    if len(data) < HEADER_BYTES + n:
        raise truncation(data)
    if len(data) > HEADER_BYTES + n:
        raise ProtocolViolation(
            "undecodable",
            f"undecodable frame body: {len(data) - HEADER_BYTES - n} bytes after the frame",
        )
    return decode_body(data[HEADER_BYTES:], direction)


class FrameBuffer:
    """Splits frames off a byte stream as it arrives, checking each length
    as soon as its header is in and each sequence number in order."""

    __slots__ = ("direction", "max_frame_bytes", "buf", "next_seq")

    def __init__(self, direction: str, max_frame_bytes: int) -> None:
        self.direction = direction
        self.max_frame_bytes = min(max_frame_bytes, MAX_FRAME_LIMIT)
        self.buf = bytearray()
        self.next_seq = 1

    def feed(self, data: bytes) -> list[object]:
        """Adds received bytes; returns the whole messages now complete, in
        order. Raises ``ProtocolViolation`` on the first bad frame."""
        if self.buf:
            self.buf += data
            src: bytes | bytearray = self.buf
        else:
            src = data  # nothing pending: parse the read in place
        decode = decode_control if self.direction == "down" else decode_event
        limit = self.max_frame_bytes
        out = []
        pos = 0
        end = len(src)
        while end - pos >= HEADER_BYTES:
            n = _LEN.unpack_from(src, pos)[0]
            if n == 0 or n > limit:
                check_len(src[pos : pos + HEADER_BYTES], limit)
            if end - pos - HEADER_BYTES < n:
                break
            start = pos + HEADER_BYTES
            r = Reader(src, start, start + n)
            seq = r.u64("the frame's seq")
            message = decode(r)
            r.finish()
            if seq != self.next_seq:
                kind = "seq_gap" if seq > self.next_seq else "seq_repeat"
                word = "gap" if seq > self.next_seq else "repeat"
                raise ProtocolViolation(
                    kind, f"sequence {word}: expected {self.next_seq}, got {seq}"
                )
            self.next_seq += 1
            out.append(message)
            pos = start + n
        if src is self.buf:
            if pos:
                del self.buf[:pos]
        elif pos < end:
            self.buf = bytearray(src[pos:])
        return out

    def pending(self) -> bytes:
        """Bytes of an unfinished frame (for the end-of-stream check)."""
        return bytes(self.buf)
