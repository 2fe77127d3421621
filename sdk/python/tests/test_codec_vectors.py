"""The codec against every frame and every invalid frame of
docs/protocol-vectors.json: byte-exact encoding, decoding back to the same
message, and refusal with the class the Rust decoder gives."""

from __future__ import annotations

import pytest

from vectors import message
from wfhost import frame, messages
from wfhost.errors import ProtocolViolation

from conftest import VECTORS
import json

with VECTORS.open() as _f:
    _V = json.load(_f)


def test_vectors_speak_protocols_2_to_3(vectors):
    assert (vectors["oldest_protocol"], vectors["protocol"]) == (2, 3)
    assert vectors["max_frame_bytes"] == frame.DEFAULT_MAX_FRAME_BYTES
    assert len(vectors["frames"]) == 91 and len(vectors["invalid_frames"]) >= 15


def test_every_message_of_protocol_3_has_a_vector(vectors):
    """Each Control and Event variant, the three verdicts, the three origins
    and a Hello of each version appear among the frames."""
    got = {f["message"]["type"] for f in vectors["frames"]}
    assert got == {t.__name__ for t in messages.CONTROL + messages.EVENT}
    verdicts = {
        f["message"]["verdict"]["kind"]
        for f in vectors["frames"]
        if f["message"]["type"] == "MailCancelVerdict"
    }
    assert verdicts == {"Acknowledged", "NotSupported", "Refused"}
    hellos = {
        f["message"]["protocol"] for f in vectors["frames"] if f["message"]["type"] == "Hello"
    }
    assert {2, 3} <= hellos
    origins = {
        f["message"]["cancel"]["origin"]
        for f in vectors["frames"]
        if f["message"]["type"] in ("Cancel", "CancelMail")
    } | {c["cancel"]["origin"] for c in vectors["signing"]["cancels"]}
    assert origins == {"SupervisorDrain", "Operator", "Deadline"}
    assert messages.SINCE_3 == {
        messages.CancelMail,
        messages.Answer,
        messages.MailStarted,
        messages.MailDone,
        messages.MailCancelVerdict,
        messages.Ask,
        messages.Progress,
        messages.GiveBack,
    }


def test_the_first_discriminant_after_giveback_names_no_event(vectors):
    v = next(f for f in vectors["invalid_frames"] if f["name"] == "unknown Event variant")
    assert v["hex"] == "000000020110"
    with pytest.raises(ProtocolViolation) as e:
        frame.decode_one(bytes.fromhex(v["hex"]), "up")
    assert e.value.kind == "undecodable" and "discriminant 16 (there are 16)" in str(e.value)
    # Control 9 (one past Answer) is refused the same way.
    with pytest.raises(ProtocolViolation) as e:
        frame.decode_one(bytes.fromhex("000000020109"), "down")
    assert "discriminant 9 (there are 9)" in str(e.value)


@pytest.mark.parametrize("v", _V["frames"], ids=[f["name"] for f in _V["frames"]])
def test_frame_encodes_byte_exactly_and_decodes_back(v):
    expected = message(v["message"])
    seq = int(v["seq"])
    assert frame.encode_frame(seq, expected).hex() == v["hex"]
    got_seq, got = frame.decode_one(bytes.fromhex(v["hex"]), v["direction"])
    assert (got_seq, got) == (seq, expected)


@pytest.mark.parametrize("v", _V["frames"], ids=[f["name"] for f in _V["frames"]])
def test_frame_split_across_reads_decodes_the_same(v):
    data = bytes.fromhex(v["hex"])
    buf = frame.FrameBuffer(v["direction"], frame.MAX_FRAME_LIMIT)
    buf.next_seq = int(v["seq"])
    got = []
    for i in range(len(data)):
        got += buf.feed(data[i : i + 1])
    assert got == [message(v["message"])]
    assert buf.pending() == b""


@pytest.mark.parametrize("v", _V["invalid_frames"], ids=[f["name"] for f in _V["invalid_frames"]])
def test_invalid_frame_is_refused_with_its_class(v):
    data = bytes.fromhex(v["hex"])
    with pytest.raises(ProtocolViolation) as e:
        frame.decode_one(data, v["direction"], _V["max_frame_bytes"])
    assert e.value.kind == v["error"], str(e.value)
    # The streaming decoder refuses it too (or, for a truncation, holds
    # the partial frame for the end-of-stream check).
    buf = frame.FrameBuffer(v["direction"], _V["max_frame_bytes"])
    if v["error"] == "truncated":
        assert buf.feed(data) == []
        assert frame.truncation(buf.pending()).kind == "truncated"
    else:
        with pytest.raises(ProtocolViolation) as e:
            buf.feed(data)
        assert e.value.kind == v["error"], str(e.value)


def test_an_oversized_header_is_refused_before_any_body_arrives():
    buf = frame.FrameBuffer("down", 1024)
    with pytest.raises(ProtocolViolation) as e:
        buf.feed((1025).to_bytes(4, "big"))
    assert e.value.kind == "too_large"
    assert "1025" in str(e.value) and "1024" in str(e.value)


def test_a_claimed_length_beyond_the_body_is_refused_without_allocating():
    # A Mail claiming a payload of 2^40 bytes in a 14-byte body.
    body = bytes([1, 3, 1, 1, 253]) + (1 << 40).to_bytes(8, "little")
    data = len(body).to_bytes(4, "big") + body
    with pytest.raises(ProtocolViolation) as e:
        frame.decode_one(data, "down")
    assert e.value.kind == "undecodable" and "remain" in str(e.value)


def test_sequence_gaps_and_repeats_are_violations():
    ping = lambda seq: frame.encode_frame(seq, messages.Ping(seq))  # noqa: E731
    buf = frame.FrameBuffer("down", 1 << 20)
    assert buf.feed(ping(1) + ping(2)) == [messages.Ping(1), messages.Ping(2)]
    with pytest.raises(ProtocolViolation) as e:
        buf.feed(ping(4))
    assert e.value.kind == "seq_gap" and "expected 3, got 4" in str(e.value)
    buf = frame.FrameBuffer("down", 1 << 20)
    buf.feed(ping(1))
    with pytest.raises(ProtocolViolation) as e:
        buf.feed(ping(1))
    assert e.value.kind == "seq_repeat"


def test_a_frame_above_the_limit_is_not_encoded():
    with pytest.raises(ProtocolViolation) as e:
        frame.encode_frame(1, messages.Custom("k", bytes(2000)), 1000)
    assert e.value.kind == "too_large"


def test_non_minimal_varints_decode_as_bincode_does():
    # bincode accepts a value in a wider varint than needed (251, then 5).
    body = bytes([1, 4, 251, 5, 0])
    data = len(body).to_bytes(4, "big") + body
    assert frame.decode_one(data, "down") == (1, messages.Ping(5))


def test_a_verdict_or_bool_of_another_value_is_refused():
    # MailCancelVerdict with verdict 3; MailStarted with cancellable 2.
    with pytest.raises(ProtocolViolation) as e:
        frame.decode_one(bytes.fromhex("000000040c0c1103"), "up")
    assert "cancel verdict discriminant 3" in str(e.value)
    with pytest.raises(ProtocolViolation) as e:
        frame.decode_one(bytes.fromhex("000000040a0a1102"), "up")
    assert "bool byte 2" in str(e.value)
    with pytest.raises(ValueError):
        frame.encode_frame(1, messages.MailCancelVerdict(1, "maybe"))


def test_values_outside_their_width_are_refused_when_encoding():
    with pytest.raises(ValueError):
        frame.encode_frame(1, messages.Mail(1, 1 << 32, b""))
    with pytest.raises(ValueError):
        frame.encode_frame(1, messages.Pong(1 << 64))
    with pytest.raises(ValueError):
        frame.encode_frame(1, messages.Pong(-1))
