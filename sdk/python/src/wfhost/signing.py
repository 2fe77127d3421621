"""Strict ed25519 verification, as ``ed25519-dalek``'s ``verify_strict``
does it. OpenSSL (under ``cryptography``) checks ``S < L`` and compares the
recomputed R byte for byte, but it accepts a small-order R or public key,
with which a signature can verify under the plain (cofactorless) equation
without the signer's secret: those encodings are refused here first."""

from __future__ import annotations

import threading

TYPE_CHECKING = False  # typing is not imported at run time: it costs start-up
if TYPE_CHECKING:
    from typing import Any

# The order of the ed25519 base point: a canonical S is below it.
L = 2**252 + 27742317777372353535851937790883648493

# Every 32-byte encoding of a point of small order (the eight torsion
# points, with their non-canonical twins): as R or as the public key, each
# is refused (docs/protocol-vectors.json, signing.small_order_encodings).
SMALL_ORDER_ENCODINGS = frozenset(
    bytes.fromhex(h)
    for h in (
        "0000000000000000000000000000000000000000000000000000000000000000",
        "0000000000000000000000000000000000000000000000000000000000000080",
        "0100000000000000000000000000000000000000000000000000000000000000",
        "0100000000000000000000000000000000000000000000000000000000000080",
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc05",
        "26e8958fc2b227b045c3f489f2ef98f0d5dfac05d3c63339b13802886d53fc85",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac037a",
        "c7176a703d4dd84fba3c0b760d10670f2a2053fa2c39ccc64ec7fd7792ac03fa",
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "ecffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "edffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
        "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff7f",
        "eeffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff",
    )
)


_openssl: tuple[Any, Any] | None = None


def _ed25519() -> tuple[Any, Any]:
    """``cryptography``'s ed25519 key class and its InvalidSignature,
    imported on first use: the import is a good part of a child's start-up
    and nothing needs it before the first cancel (see :func:`warm_up`)."""
    global _openssl
    if _openssl is None:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

        _openssl = (Ed25519PublicKey, InvalidSignature)
    return _openssl


def warm_up(trusted: "TrustedKey") -> None:
    """Imports ``cryptography`` (and hashlib, for the key id) on a
    background thread (the runtime calls this once Ready is sent), so the
    first cancel does not wait for them. Not a daemon: an extension module
    still importing while the interpreter shuts down aborts the process, so
    an early exit waits for the import."""

    def load() -> None:
        _ed25519()
        trusted.key_id  # noqa: B018 (computed and kept)

    threading.Thread(target=load, name="wfhost-warm-up").start()


def key_id(public: bytes) -> bytes:
    """First 8 bytes of the SHA-256 of a public key: names the key in every
    signed record so keys can rotate."""
    import hashlib  # here: it loads OpenSSL, which no child needs before a cancel

    return hashlib.sha256(public).digest()[:8]


class TrustedKey:
    """The one public key whose signatures a child obeys."""

    __slots__ = ("public", "_key_id", "_key")

    def __init__(self, public: bytes) -> None:
        if len(public) != 32:
            raise ValueError(f"an ed25519 public key is 32 bytes, got {len(public)}")
        self.public = bytes(public)
        self._key_id: bytes | None = None
        self._key: Any = None

    @classmethod
    def from_hex(cls, text: str) -> "TrustedKey":
        try:
            raw = bytes.fromhex(text.strip())
        except ValueError as e:
            raise ValueError(f"not hex: {e}") from None
        return cls(raw)

    @property
    def key_id(self) -> bytes:
        """The key's id, computed on first use."""
        if self._key_id is None:
            self._key_id = key_id(self.public)
        return self._key_id

    @property
    def small_order(self) -> bool:
        """Whether the key itself is of small order (every signature is then
        refused)."""
        return self.public in SMALL_ORDER_ENCODINGS

    def verify(self, signature: bytes, message: bytes) -> bool:
        """Whether ``signature`` is a strictly valid signature of ``message``."""
        if len(signature) != 64:
            return False
        r, s = signature[:32], signature[32:]
        if int.from_bytes(s, "little") >= L:
            return False
        if r in SMALL_ORDER_ENCODINGS or self.public in SMALL_ORDER_ENCODINGS:
            return False
        public_key, invalid = _ed25519()
        if self._key is None:
            try:
                self._key = public_key.from_public_bytes(self.public)
            except ValueError:
                return False
        try:
            self._key.verify(signature, message)
        except invalid:
            return False
        return True
