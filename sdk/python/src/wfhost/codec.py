"""The body encoding: bincode 2's standard configuration as ``ipc/src/codec.rs``
uses it. Integers wider than a byte, lengths and enum discriminants are
varints (below 251: one byte; 251, 252, 253: then 2, 4, 8 little-endian
bytes); ``u8`` and fixed arrays are raw bytes; strings and byte vectors are a
length then the bytes; options a 0/1 tag. The reader checks every claimed
length against the bytes actually present before it slices anything, and
refuses everything the Rust decoder refuses (a bool other than 0/1, an option
tag other than 0/1, an unknown discriminant, a ``u32`` in an 8-byte varint,
invalid UTF-8, trailing bytes)."""

from __future__ import annotations

from .errors import ProtocolViolation

U32_MAX = 0xFFFF_FFFF
U64_MAX = 0xFFFF_FFFF_FFFF_FFFF

_U16 = 251
_U32 = 252
_U64 = 253


def undecodable(message: str) -> ProtocolViolation:
    """The violation for a body that does not decode."""
    return ProtocolViolation("undecodable", f"undecodable frame body: {message}")


class Writer:
    """Appends encoded values to a ``bytearray``."""

    __slots__ = ("buf",)

    def __init__(self, buf: bytearray | None = None) -> None:
        self.buf = bytearray() if buf is None else buf

    def varint(self, value: int) -> None:
        buf = self.buf
        if value < 251:
            if value < 0:
                raise ValueError(f"{value} is negative: only unsigned integers go on the wire")
            buf.append(value)
        elif value <= 0xFFFF:
            buf.append(_U16)
            buf += value.to_bytes(2, "little")
        elif value <= U32_MAX:
            buf.append(_U32)
            buf += value.to_bytes(4, "little")
        elif value <= U64_MAX:
            buf.append(_U64)
            buf += value.to_bytes(8, "little")
        else:
            raise ValueError(f"{value} does not fit in 64 bits")

    def u32(self, value: int) -> None:
        if not 0 <= value <= U32_MAX:
            raise ValueError(f"{value} does not fit in a u32")
        self.varint(value)

    def u64(self, value: int) -> None:
        self.varint(value)

    def bool(self, value: bool) -> None:
        self.buf.append(1 if value else 0)

    def bytes(self, value: bytes | bytearray | memoryview) -> None:
        self.varint(len(value))
        self.buf += value

    def str(self, value: str) -> None:
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"text {value[:40]!r}… is not valid UTF-8 ({e.reason}); remove lone surrogates"
            ) from e
        self.varint(len(data))
        self.buf += data

    def fixed(self, value: bytes, size: int) -> None:
        if len(value) != size:
            raise ValueError(f"expected exactly {size} bytes, got {len(value)}")
        self.buf += value

    def opt_str(self, value: str | None) -> None:
        if value is None:
            self.buf.append(0)
        else:
            self.buf.append(1)
            self.str(value)


class Reader:
    """Reads values from ``data[pos:end]``; every read is bounds-checked."""

    __slots__ = ("data", "pos", "end")

    def __init__(self, data: bytes, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end

    def _need(self, n: int, what: str) -> int:
        pos = self.pos
        if self.end - pos < n:
            raise undecodable(
                f"the body ends inside {what} (needs {n} bytes at offset {pos}, {self.end - pos} left)"
            )
        self.pos = pos + n
        return pos

    def u8(self) -> int:
        pos = self.pos
        if pos >= self.end:
            raise undecodable(f"the body ends inside a field (offset {pos})")
        self.pos = pos + 1
        return self.data[pos]

    def _varint(self, widest: int, what: str) -> int:
        b = self.u8()
        if b < 251:
            return b
        if b == _U16:
            p = self._need(2, what)
            return int.from_bytes(self.data[p : p + 2], "little")
        if b == _U32:
            p = self._need(4, what)
            return int.from_bytes(self.data[p : p + 4], "little")
        if b == _U64 and widest >= 8:
            p = self._need(8, what)
            return int.from_bytes(self.data[p : p + 8], "little")
        raise undecodable(f"{what}: varint marker {b} names an integer wider than the field")

    # u32, u64 and variant read the one-byte form inline: it is nearly every
    # integer on the wire, and a method call per byte halves decode speed.

    def u32(self, what: str = "a u32") -> int:
        pos = self.pos
        if pos < self.end:
            b = self.data[pos]
            if b < 251:
                self.pos = pos + 1
                return b
        return self._varint(4, what)

    def u64(self, what: str = "a u64") -> int:
        pos = self.pos
        if pos < self.end:
            b = self.data[pos]
            if b < 251:
                self.pos = pos + 1
                return b
        return self._varint(8, what)

    def length(self, what: str) -> int:
        n = self._varint(8, what)
        left = self.end - self.pos
        if n > left:
            raise undecodable(f"{what} claims {n} bytes but only {left} remain in the body")
        return n

    def bool(self, what: str = "a bool") -> bool:
        b = self.u8()
        if b > 1:
            raise undecodable(f"{what}: bool byte {b} is neither 0 nor 1")
        return b == 1

    def bytes(self, what: str = "a byte vector") -> bytes:
        n = self.length(what)
        p = self.pos
        self.pos = p + n
        return bytes(self.data[p : p + n])

    def str(self, what: str = "a string") -> str:
        n = self.length(what)
        p = self.pos
        self.pos = p + n
        try:
            return str(self.data[p : p + n], "utf-8")
        except UnicodeDecodeError as e:
            raise undecodable(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None

    def fixed(self, size: int, what: str) -> bytes:
        p = self._need(size, what)
        return bytes(self.data[p : p + size])

    def option(self, what: str) -> bool:
        b = self.u8()
        if b > 1:
            raise undecodable(f"{what}: option tag {b} is neither 0 nor 1")
        return b == 1

    def variant(self, count: int, what: str) -> int:
        index = self.u32(what)
        if index >= count:
            raise undecodable(f"unknown {what} discriminant {index} (there are {count})")
        return index

    def finish(self) -> None:
        left = self.end - self.pos
        if left:
            raise undecodable(f"{left} trailing bytes after the message")
