"""How a step, a run or a mail item ended: ``"succeeded"``, ``"cancelled"``
or ``Failed(reason)``, the three outcomes of the wire."""

from __future__ import annotations

from .record import Record

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up

SUCCEEDED = "succeeded"
CANCELLED = "cancelled"

# Failure reasons are cut here: the supervisor keeps 512 characters of them,
# and an unbounded reason could push an event past max_frame_bytes.
MAX_REASON_BYTES = 4096


class Failed(Record):
    """It failed, for the reason given."""

    __slots__ = ("reason",)

    def __init__(self, reason: str = "") -> None:
        self.reason = reason


if TYPE_CHECKING:
    from typing import Union

    Outcome = Union[str, Failed]
else:
    Outcome = object  # named in annotations only, which are strings at run time


def check(outcome: object) -> Outcome:
    """The outcome as the wire carries it, or a ``ValueError`` naming the
    three accepted forms."""
    if isinstance(outcome, Failed):
        if not isinstance(outcome.reason, str):
            raise ValueError(
                f"Failed(reason) needs a str reason, got {type(outcome.reason).__name__}"
            )
        return Failed(_cut(outcome.reason))
    if outcome == SUCCEEDED or outcome == CANCELLED:
        return outcome  # type: ignore[return-value]
    raise ValueError(
        f'unknown outcome {outcome!r}: use "succeeded", "cancelled" or wfhost.Failed(reason)'
    )


def _cut(reason: str) -> str:
    """The reason as clean UTF-8 (lone surrogates replaced), at most
    ``MAX_REASON_BYTES`` long, cut at a character boundary."""
    data = reason.encode("utf-8", "replace")
    return data[:MAX_REASON_BYTES].decode("utf-8", "ignore")
