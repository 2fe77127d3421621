"""The signed cancels: the messages a child must verify before it acts on
them, a cancel of runs (``Cancel``) and, in protocol 3, a cancel of one mail
item (``CancelMail``). Their canonical signed layouts (``ipc/src/signed.rs``
and ``ipc/src/cancel.rs``) are written by hand, byte by byte: every string
and byte field is an 8-byte big-endian length then the bytes, an option is a
presence byte (0 or 1) then its value, a ``u64`` is 8 big-endian bytes, and
the whole begins with the domain (``wfhost/cancel/v1`` or
``wfhost/cancel-mail/v1``, itself length-prefixed), so a signature over any
other kind of record never passes as a cancel, nor a run cancel's as an
item's."""

from __future__ import annotations

from . import signing
from .errors import CancelRefused
from .record import Record

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Callable

DOMAIN = "wfhost/cancel/v1"
MAIL_DOMAIN = "wfhost/cancel-mail/v1"

# Wire discriminant order of CancelOrigin, and the names used in the journal
# and the signing bytes ("deadline" is protocol 3's, only in a CancelMail).
ORIGINS = ("supervisor-drain", "operator", "deadline")


class CancelRequested(Record):
    """A request to cancel one run (``run``) or every run (``run=None``) of
    one deployment."""

    __slots__ = ("origin", "deployment", "run", "reason", "at_ms")

    def __init__(
        self, origin: str, deployment: str, run: str | None, reason: str, at_ms: int
    ) -> None:
        self.origin = origin
        self.deployment = deployment
        self.run = run
        self.reason = reason
        self.at_ms = at_ms


class SignedCancel(Record):
    """A cancel request as it travels: with the signing key's id (first 8
    bytes of the SHA-256 of the public key) and a 64-byte ed25519 signature
    over :func:`signing_bytes` of the record."""

    __slots__ = ("record", "key_id", "signature")

    def __init__(self, record: CancelRequested, key_id: bytes, signature: bytes) -> None:
        self.record = record
        self.key_id = key_id
        self.signature = signature


class MailCancelRequested(Record):
    """Protocol 3: a request to cancel one mail item (``id``) of one
    deployment."""

    __slots__ = ("origin", "deployment", "id", "reason", "at_ms")

    def __init__(self, origin: str, deployment: str, id: int, reason: str, at_ms: int) -> None:
        self.origin = origin
        self.deployment = deployment
        self.id = id
        self.reason = reason
        self.at_ms = at_ms


class SignedMailCancel(Record):
    """A cancel of one mail item as it travels, signed like
    :class:`SignedCancel` over :func:`mail_signing_bytes` of the record."""

    __slots__ = ("record", "key_id", "signature")

    def __init__(self, record: MailCancelRequested, key_id: bytes, signature: bytes) -> None:
        self.record = record
        self.key_id = key_id
        self.signature = signature


def _field(out: bytearray, data: bytes) -> None:
    out += len(data).to_bytes(8, "big")
    out += data


def signing_bytes(record: CancelRequested) -> bytes:
    """The exact bytes a cancel's signature covers."""
    out = bytearray()
    _field(out, DOMAIN.encode())
    _field(out, record.origin.encode())
    _field(out, record.deployment.encode())
    if record.run is None:
        out.append(0)
    else:
        out.append(1)
        _field(out, record.run.encode())
    _field(out, record.reason.encode())
    out += record.at_ms.to_bytes(8, "big")
    return bytes(out)


def mail_signing_bytes(record: MailCancelRequested) -> bytes:
    """The exact bytes a cancel of one mail item's signature covers
    (docs/protocol.md §5.5)."""
    out = bytearray()
    _field(out, MAIL_DOMAIN.encode())
    _field(out, record.origin.encode())
    _field(out, record.deployment.encode())
    out += record.id.to_bytes(8, "big")
    _field(out, record.reason.encode())
    out += record.at_ms.to_bytes(8, "big")
    return bytes(out)


def _signed_bytes(cancel: SignedCancel | SignedMailCancel) -> bytes:
    if isinstance(cancel, SignedMailCancel):
        return mail_signing_bytes(cancel.record)
    return signing_bytes(cancel.record)


def verify(cancel: SignedCancel | SignedMailCancel, trusted: signing.TrustedKey) -> None:
    """Checks the key id and the signature, strictly (over the signing
    bytes of the cancel's kind); raises :class:`CancelRefused` saying why a
    cancel must not be obeyed."""
    if cancel.key_id != trusted.key_id:
        raise CancelRefused(
            "unknown_key",
            f"signed by unknown key {cancel.key_id.hex()} (trusted key is {trusted.key_id.hex()})",
        )
    if len(cancel.signature) != 64:
        raise CancelRefused(
            "malformed_signature",
            f"malformed signature ({len(cancel.signature)} bytes, expected 64)",
        )
    if not trusted.verify(cancel.signature, _signed_bytes(cancel)):
        raise CancelRefused("invalid_signature", "signature does not verify")


def verify_for(
    cancel: SignedCancel,
    trusted: signing.TrustedKey,
    deployment: str,
    knows_run: Callable[[str], bool],
) -> None:
    """:func:`verify`, then checks that the cancel is meant for this
    ``deployment`` and, when it names a run, that ``knows_run`` accepts it
    (the order ``ipc/src/cancel.rs`` checks in)."""
    verify(cancel, trusted)
    record = cancel.record
    if record.deployment != deployment:
        raise CancelRefused(
            "wrong_deployment",
            f"cancel is for deployment {record.deployment!r}, this is {deployment!r}",
        )
    if record.run is not None and not knows_run(record.run):
        raise CancelRefused(
            "unknown_run", f"cancel is for run {record.run!r}, which this child does not know"
        )


def verify_mail_for(
    cancel: SignedMailCancel,
    trusted: signing.TrustedKey,
    deployment: str,
    holds: Callable[[int], bool],
) -> None:
    """:func:`verify`, then checks that the cancel is meant for this
    ``deployment`` and names an item ``holds`` accepts (delivered, not yet
    done): the order of ``SignedMailCancel::verify_for`` in
    ``ipc/src/cancel.rs``, refusing an item not held as ``unknown_item``."""
    verify(cancel, trusted)
    record = cancel.record
    if record.deployment != deployment:
        raise CancelRefused(
            "wrong_deployment",
            f"cancel is for deployment {record.deployment!r}, this is {deployment!r}",
        )
    if not holds(record.id):
        raise CancelRefused(
            "unknown_item",
            f"cancel is for mail item {record.id}, which this child does not hold",
        )
