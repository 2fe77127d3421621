"""The cancel signature rules against every signed cancel of
docs/protocol-vectors.json and every small-order encoding: the canonical
signed bytes byte for byte, the verdict, and the reason for each refusal."""

from __future__ import annotations

import json

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from conftest import VECTORS
from vectors import signed_cancel, signed_mail_cancel
from wfhost import cancel, frame, messages, signing
from wfhost.errors import CancelRefused

with VECTORS.open() as _f:
    _S = json.load(_f)["signing"]


@pytest.mark.parametrize("v", _S["cancels"], ids=[c["name"] for c in _S["cancels"]])
def test_cancel_vector(v):
    signed = signed_cancel(v["cancel"])
    assert cancel.signing_bytes(signed.record).hex() == v["signing_bytes"]
    # The frame carries exactly this cancel.
    assert frame.decode_one(bytes.fromhex(v["frame"]), "down") == (1, messages.Cancel(signed))
    trusted = signing.TrustedKey.from_hex(v["trusted_key"])
    known = set(_S["known_runs"])
    if v["verdict"] == "accept":
        cancel.verify_for(signed, trusted, _S["deployment"], known.__contains__)
    else:
        with pytest.raises(CancelRefused) as e:
            cancel.verify_for(signed, trusted, _S["deployment"], known.__contains__)
        assert e.value.kind == v["refusal"], str(e.value)


@pytest.mark.parametrize("v", _S["mail_cancels"], ids=[c["name"] for c in _S["mail_cancels"]])
def test_mail_cancel_vector(v):
    """Each cancel of one item against a child of deployment billing that
    holds item 17, with the exact refusal class."""
    signed = signed_mail_cancel(v["cancel"])
    assert cancel.mail_signing_bytes(signed.record).hex() == v["signing_bytes"]
    assert frame.decode_one(bytes.fromhex(v["frame"]), "down") == (1, messages.CancelMail(signed))
    assert frame.encode_frame(1, messages.CancelMail(signed)).hex() == v["frame"]
    assert "trusted_key" not in v, "mail cancels are always checked with public_key"
    trusted = signing.TrustedKey.from_hex(_S["public_key"])
    held = {int(i) for i in _S["held_items"]}
    if v["verdict"] == "accept":
        assert v["refusal"] is None
        cancel.verify_mail_for(signed, trusted, _S["deployment"], held.__contains__)
    else:
        with pytest.raises(CancelRefused) as e:
            cancel.verify_mail_for(signed, trusted, _S["deployment"], held.__contains__)
        assert e.value.kind == v["refusal"], str(e.value)


def test_the_mail_cancel_vectors_cover_every_refusal_a_mail_cancel_can_meet():
    assert _S["mail_domain"] == cancel.MAIL_DOMAIN and _S["held_items"] == ["17"]
    kinds = {c["refusal"] for c in _S["mail_cancels"]}
    assert kinds == {
        None,
        "unknown_key",
        "invalid_signature",
        "wrong_deployment",
        "unknown_item",
    }
    refused = next(c for c in _S["mail_cancels"] if c["refusal"] == "unknown_item")
    with pytest.raises(CancelRefused) as e:
        cancel.verify_mail_for(
            signed_mail_cancel(refused["cancel"]),
            signing.TrustedKey.from_hex(_S["public_key"]),
            "billing",
            lambda item: item == 17,
        )
    # The text the child sends as its Refused verdict (vector "MailCancelVerdict, refused").
    assert str(e.value) == "cancel is for mail item 9, which this child does not hold"


def test_a_run_cancel_and_an_item_cancel_never_pass_as_each_other():
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(_S["seed"]))
    trusted = signing.TrustedKey.from_hex(_S["public_key"])
    item = cancel.MailCancelRequested("operator", "billing", 17, "r", 5)
    signed = cancel.SignedMailCancel(
        item, trusted.key_id, private.sign(cancel.mail_signing_bytes(item))
    )
    cancel.verify_mail_for(signed, trusted, "billing", lambda i: True)
    run = cancel.CancelRequested("operator", "billing", None, "r", 5)
    forged = cancel.SignedMailCancel(item, trusted.key_id, private.sign(cancel.signing_bytes(run)))
    with pytest.raises(CancelRefused) as e:
        cancel.verify_mail_for(forged, trusted, "billing", lambda i: True)
    assert e.value.kind == "invalid_signature"


def test_the_fixed_test_key_is_the_one_the_vectors_name():
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(_S["seed"]))
    from cryptography.hazmat.primitives import serialization

    public = private.public_key().public_bytes(
        serialization.Encoding.Raw, serialization.PublicFormat.Raw
    )
    assert public.hex() == _S["public_key"]
    assert signing.key_id(public).hex() == _S["key_id"]
    assert signing.key_id(bytes.fromhex(_S["other_public_key"])).hex() == _S["other_key_id"]
    assert cancel.DOMAIN == _S["domain"]


def test_the_sdk_list_of_small_order_encodings_is_the_vectors_list():
    assert signing.SMALL_ORDER_ENCODINGS == {bytes.fromhex(h) for h in _S["small_order_encodings"]}


@pytest.mark.parametrize("enc", _S["small_order_encodings"])
def test_a_small_order_r_is_refused_even_when_openssl_would_accept(enc):
    # R = a small-order point, S = 0: for R = identity and key = identity the
    # plain equation holds for any message; the SDK refuses all of them.
    sig = bytes.fromhex(enc) + bytes(32)
    trusted = signing.TrustedKey(bytes.fromhex(_S["public_key"]))
    assert not trusted.verify(sig, b"anything")
    small_key = signing.TrustedKey(bytes.fromhex(enc))
    assert small_key.small_order
    assert not small_key.verify(sig, b"anything")


def test_openssl_alone_accepts_the_small_order_forgery_the_sdk_refuses():
    """Shows why the extra rule exists: the 'R of small order' vector
    verifies under cryptography (OpenSSL) and is refused by the SDK."""
    v = next(c for c in _S["cancels"] if c["name"] == "R of small order")
    signed = signed_cancel(v["cancel"])
    message = cancel.signing_bytes(signed.record)
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    Ed25519PublicKey.from_public_bytes(bytes.fromhex(v["trusted_key"])).verify(
        signed.signature, message
    )  # OpenSSL: no exception
    assert not signing.TrustedKey.from_hex(v["trusted_key"]).verify(signed.signature, message)


def test_s_at_or_above_l_is_refused_and_below_verifies():
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(_S["seed"]))
    trusted = signing.TrustedKey.from_hex(_S["public_key"])
    sig = private.sign(b"m")
    assert trusted.verify(sig, b"m")
    s = int.from_bytes(sig[32:], "little")
    malleated = sig[:32] + (s + signing.L).to_bytes(32, "little")
    assert not trusted.verify(malleated, b"m")
    assert not trusted.verify(sig[:32] + signing.L.to_bytes(32, "little"), b"m")


def test_a_fresh_signature_round_trips_through_the_sdk():
    private = Ed25519PrivateKey.from_private_bytes(bytes.fromhex(_S["seed"]))
    trusted = signing.TrustedKey.from_hex(_S["public_key"])
    record = cancel.CancelRequested("operator", "billing", None, "ünïcødé ✓", 1)
    signed = cancel.SignedCancel(record, trusted.key_id, private.sign(cancel.signing_bytes(record)))
    cancel.verify_for(signed, trusted, "billing", lambda run: False)
    with pytest.raises(CancelRefused) as e:
        cancel.verify_for(signed, trusted, "payroll", lambda run: True)
    assert e.value.kind == "wrong_deployment" and "payroll" in str(e.value)
