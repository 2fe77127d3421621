//! The frame codec: every message round-trips, streams split anywhere decode
//! to the same frames, and every malformed input is refused with the right
//! violation before anything large is allocated.

mod common;

use std::collections::BTreeSet;

use bytes::BytesMut;
use common::{CONTROL_VARIANTS, EVENT_VARIANTS, control, control_variant, event, event_variant};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde::Serialize;
use serde::de::DeserializeOwned;
use wfhost_ipc::frame::HEADER_BYTES;
use wfhost_ipc::{
    Control, DEFAULT_MAX_FRAME_BYTES, Event, Frame, FrameDecoder, MAX_FRAME_LIMIT,
    ProtocolViolation, encode_frame,
};

fn encode<B: Serialize>(seq: u64, body: B) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&Frame { seq, body }, DEFAULT_MAX_FRAME_BYTES, &mut out).expect("encodes");
    out
}

/// Encodes `frame`, checks the header, and decodes it back.
fn round_trip<B>(frame: &Frame<B>) -> Result<(), TestCaseError>
where
    B: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let mut out = vec![0xAA]; // encode_frame appends: earlier bytes stay put
    encode_frame(frame, DEFAULT_MAX_FRAME_BYTES, &mut out).expect("encodes");
    prop_assert_eq!(out[0], 0xAA);
    let wire = &out[1..];
    let len = u32::from_be_bytes(wire[..HEADER_BYTES].try_into().unwrap()) as usize;
    prop_assert_eq!(len, wire.len() - HEADER_BYTES);
    prop_assert!(len > 0);
    let decoded = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES).decode_one::<B>(wire);
    prop_assert_eq!(decoded.as_ref(), Ok(frame));
    Ok(())
}

/// Feeds `wire` to `decode` in chunks of the given sizes (cycled), draining
/// every whole frame after each chunk as a reader does.
fn decode_chunked<B: DeserializeOwned>(wire: &[u8], chunks: &[usize]) -> Vec<Frame<B>> {
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let mut buf = BytesMut::new();
    let mut got = Vec::new();
    let mut rest = wire;
    for &n in chunks.iter().cycle() {
        if rest.is_empty() {
            break;
        }
        let n = n.min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        while let Some(frame) = decoder.decode::<B>(&mut buf).expect("valid stream") {
            got.push(frame);
        }
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    got
}

proptest! {
    #[test]
    fn every_control_round_trips(seq in any::<u64>(), body in control()) {
        round_trip(&Frame { seq, body })?;
    }

    #[test]
    fn every_event_round_trips(seq in any::<u64>(), body in event()) {
        round_trip(&Frame { seq, body })?;
    }

    #[test]
    fn control_stream_splits_anywhere(
        bodies in prop::collection::vec(control(), 1..8),
        chunks in prop::collection::vec(1usize..80, 1..16),
    ) {
        let frames: Vec<_> = bodies
            .into_iter()
            .zip(1..)
            .map(|(body, seq)| Frame { seq, body })
            .collect();
        let wire: Vec<u8> = frames.iter().flat_map(|f| encode(f.seq, &f.body)).collect();
        prop_assert_eq!(decode_chunked::<Control>(&wire, &chunks), frames);
    }

    #[test]
    fn event_stream_splits_anywhere(
        bodies in prop::collection::vec(event(), 1..8),
        chunks in prop::collection::vec(1usize..80, 1..16),
    ) {
        let frames: Vec<_> = bodies
            .into_iter()
            .zip(1..)
            .map(|(body, seq)| Frame { seq, body })
            .collect();
        let wire: Vec<u8> = frames.iter().flat_map(|f| encode(f.seq, &f.body)).collect();
        prop_assert_eq!(decode_chunked::<Event>(&wire, &chunks), frames);
    }

    /// Cutting a valid frame short anywhere is never mistaken for a frame.
    #[test]
    fn any_prefix_is_truncated(body in event(), cut in any::<prop::sample::Index>()) {
        let wire = encode(1, body);
        let cut = cut.index(wire.len()); // 0..len: always short
        let err = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES)
            .decode_one::<Event>(&wire[..cut])
            .unwrap_err();
        let want = if cut < HEADER_BYTES { HEADER_BYTES } else { wire.len() };
        prop_assert_eq!(err, ProtocolViolation::Truncated { have: cut, want });
    }
}

/// The strategies reach every variant: a strategy that silently stopped
/// producing one would leave it untested.
#[test]
fn strategies_cover_every_variant() {
    let mut runner = TestRunner::deterministic();
    let (mut controls, mut events) = (BTreeSet::new(), BTreeSet::new());
    for _ in 0..2000 {
        controls.insert(control_variant(
            &control().new_tree(&mut runner).unwrap().current(),
        ));
        events.insert(event_variant(
            &event().new_tree(&mut runner).unwrap().current(),
        ));
    }
    assert_eq!(controls, BTreeSet::from(CONTROL_VARIANTS));
    assert_eq!(events, BTreeSet::from(EVENT_VARIANTS));
}

#[test]
fn zero_length_is_refused() {
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let mut buf = BytesMut::from(&[0u8, 0, 0, 0, 1, 5][..]);
    assert_eq!(
        decoder.decode::<Event>(&mut buf),
        Err(ProtocolViolation::EmptyFrame)
    );
    assert_eq!(
        decoder.decode_one::<Control>(&[0, 0, 0, 0]),
        Err(ProtocolViolation::EmptyFrame)
    );
}

/// A 4 GiB announcement is refused from its 4-byte header alone, and the
/// buffer is not grown for it.
#[test]
fn four_gib_header_is_refused_without_allocating() {
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let mut buf = BytesMut::with_capacity(HEADER_BYTES);
    buf.extend_from_slice(&u32::MAX.to_be_bytes());
    assert_eq!(
        decoder.decode::<Control>(&mut buf),
        Err(ProtocolViolation::FrameTooLarge {
            len: u64::from(u32::MAX),
            max: DEFAULT_MAX_FRAME_BYTES,
        })
    );
    assert!(
        buf.capacity() < 1024,
        "buffer grew to {} bytes for a refused frame",
        buf.capacity()
    );
}

#[test]
fn one_byte_over_the_limit_is_refused() {
    let decoder = FrameDecoder::new(100);
    let mut buf = BytesMut::from(&101u32.to_be_bytes()[..]);
    assert_eq!(
        decoder.decode::<Event>(&mut buf),
        Err(ProtocolViolation::FrameTooLarge { len: 101, max: 100 })
    );
    assert!(buf.capacity() < 101);

    // Exactly the limit passes the check: room is reserved, more is awaited.
    let mut buf = BytesMut::from(&100u32.to_be_bytes()[..]);
    assert_eq!(decoder.decode::<Event>(&mut buf), Ok(None));
    assert!(buf.capacity() >= HEADER_BYTES + 100);
}

#[test]
fn configured_limit_is_capped() {
    assert_eq!(
        FrameDecoder::new(u32::MAX).max_frame_bytes() as usize,
        MAX_FRAME_LIMIT
    );
    assert_eq!(FrameDecoder::new(512).max_frame_bytes(), 512);
}

/// Wraps a hand-made body in a header.
fn raw_frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

#[test]
fn undecodable_bodies_are_refused() {
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let cases: &[(&str, &[u8])] = &[
        // seq 1, then variant 99: no such message.
        ("unknown variant", &[1, 99]),
        // seq 1, Event::RecycleRequest (8), a 2-byte reason that is not UTF-8.
        ("bad utf-8", &[1, 8, 2, 0xC3, 0x28]),
        // seq 1, Event::StepStarted (2), run "a", step "b", DrainBehavior 7.
        ("unknown drain", &[1, 2, 1, b'a', 1, b'b', 7]),
        // seq only: the body is missing.
        ("no body", &[1]),
        // A string claiming more bytes than the frame holds.
        ("short string", &[1, 8, 200, b'x']),
    ];
    for (what, body) in cases {
        let err = decoder.decode_one::<Event>(&raw_frame(body)).unwrap_err();
        assert!(
            matches!(err, ProtocolViolation::Undecodable(_)),
            "{what}: {err:?}"
        );
    }
}

/// A body with bytes left after the message is refused even though a
/// message decodes from its start: the frame says how long the message is.
#[test]
fn trailing_bytes_inside_a_frame_are_refused() {
    let wire = encode(1, Event::Ready);
    let mut body = wire[HEADER_BYTES..].to_vec();
    body.push(0);
    let err = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES)
        .decode_one::<Event>(&raw_frame(&body))
        .unwrap_err();
    assert_eq!(
        err,
        ProtocolViolation::Undecodable("1 trailing bytes after the message".into())
    );

    // Through the streaming decoder the frame is consumed whole, so the
    // next frame does not start inside the bad one.
    let mut buf = BytesMut::from(&raw_frame(&body)[..]);
    buf.extend_from_slice(&encode(2, Event::Drained));
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    assert!(matches!(
        decoder.decode::<Event>(&mut buf),
        Err(ProtocolViolation::Undecodable(_))
    ));
    assert_eq!(buf.len(), encode(2, Event::Drained).len());
}

#[test]
fn decode_one_refuses_bytes_after_the_frame() {
    let mut wire = encode(1, Event::Ready);
    wire.extend_from_slice(&encode(2, Event::Drained));
    let err = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES)
        .decode_one::<Event>(&wire)
        .unwrap_err();
    assert!(matches!(err, ProtocolViolation::Undecodable(_)), "{err:?}");
}

/// A frame decoded in the wrong direction is refused, not misread.
#[test]
fn control_body_is_not_an_event() {
    let wire = encode(1, Control::Shutdown); // variant 5
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    // Event variant 5 is Pong { nonce }, whose nonce is missing.
    assert!(matches!(
        decoder.decode_one::<Event>(&wire),
        Err(ProtocolViolation::Undecodable(_))
    ));
}

/// The sender refuses a body above its limit, at exactly one byte over, and
/// leaves what was already in the output untouched.
#[test]
fn sender_refuses_a_body_above_the_limit() {
    let frame = Frame {
        seq: 1,
        body: Control::Mail {
            id: 7,
            attempt: 1,
            payload: vec![0x5A; 4096],
        },
    };
    let mut out = Vec::new();
    encode_frame(&frame, u32::MAX, &mut out).unwrap();
    let len = (out.len() - HEADER_BYTES) as u32;

    let mut out = b"kept".to_vec();
    assert_eq!(
        encode_frame(&frame, len - 1, &mut out),
        Err(ProtocolViolation::FrameTooLarge {
            len: u64::from(len),
            max: len - 1,
        })
    );
    assert_eq!(out, b"kept");

    encode_frame(&frame, len, &mut out).unwrap();
    assert_eq!(out.len(), 4 + HEADER_BYTES + len as usize);
    assert_eq!(
        FrameDecoder::new(len).decode_one::<Control>(&out[4..]),
        Ok(frame)
    );
}

#[test]
fn truncation_reports_what_was_missing() {
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    assert_eq!(
        decoder.truncation(&[0, 0]),
        ProtocolViolation::Truncated { have: 2, want: 4 }
    );
    assert_eq!(
        decoder.truncation(&[0, 0, 0, 10, 1, 2]),
        ProtocolViolation::Truncated { have: 6, want: 14 }
    );
    assert_eq!(
        decoder.decode_one::<Event>(&[]),
        Err(ProtocolViolation::Truncated { have: 0, want: 4 })
    );
}

/// The wire layout DESIGN.md promises: big-endian length, then bincode
/// standard (varint) `seq`, variant index and fields.
#[test]
fn wire_layout_is_pinned() {
    assert_eq!(encode(1, Event::Ready), [0, 0, 0, 2, 1, 1]);
    assert_eq!(
        encode(300, Event::Pong { nonce: 5 }),
        // seq 300 takes the u16 varint form (251, then little-endian).
        [0, 0, 0, 5, 251, 0x2C, 0x01, 5, 5]
    );
    assert_eq!(
        encode(
            2,
            Control::Mail {
                id: 9,
                attempt: 1,
                payload: vec![0xAB, 0xCD]
            }
        ),
        // id 9, attempt 1, then the payload's length and bytes.
        [0, 0, 0, 7, 2, 3, 9, 1, 2, 0xAB, 0xCD]
    );
}
