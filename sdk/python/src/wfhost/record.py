"""A light base for the SDK's value types: slotted, compared and printed by
their fields. ``dataclasses`` would do, but importing it (with ``inspect``
and ``ast``) and building the classes was a fifth of a child's start-up,
and its ``__init__`` a third of the cost of decoding a small frame; each
subclass writes its ``__init__`` by hand instead."""

from __future__ import annotations


class Record:
    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self.__slots__)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__name__}({fields})"
