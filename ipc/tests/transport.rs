//! The async transport over a real socketpair: messages arrive in order,
//! and a peer that truncates, skips or repeats frames is named precisely.

mod common;

use proptest::prelude::*;
use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use wfhost_ipc::{
    Control, DEFAULT_MAX_FRAME_BYTES, Event, Frame, FrameReader, FrameWriter, Outcome,
    ProtocolViolation, TransportError, encode_frame, split,
};

fn encode<B: Serialize>(seq: u64, body: B) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&Frame { seq, body }, DEFAULT_MAX_FRAME_BYTES, &mut out).expect("encodes");
    out
}

/// A supervisor-side reader of events, fed by whatever raw bytes the test
/// writes to the other end.
fn raw_peer() -> (FrameReader<Event>, UnixStream) {
    let (ours, theirs) = UnixStream::pair().expect("socketpair");
    let (reader, _writer) = split::<Event, Control>(ours, DEFAULT_MAX_FRAME_BYTES);
    (reader, theirs)
}

fn violation(result: Result<Option<Event>, TransportError>) -> ProtocolViolation {
    match result {
        Err(TransportError::Violation(v)) => v,
        other => panic!("expected a violation, got {other:?}"),
    }
}

#[tokio::test]
async fn both_directions_carry_messages_in_order() {
    let (sup, child) = UnixStream::pair().unwrap();
    let (mut sup_rx, mut sup_tx) = split::<Event, Control>(sup, DEFAULT_MAX_FRAME_BYTES);
    let (mut child_rx, mut child_tx) = split::<Control, Event>(child, DEFAULT_MAX_FRAME_BYTES);

    let down = vec![
        Control::Ping { nonce: 1 },
        Control::Mail {
            id: 2,
            attempt: 1,
            payload: vec![7; 64 * 1024], // larger than one socket read
        },
        Control::Shutdown,
    ];
    let up = vec![
        Event::Ready,
        Event::MailAck {
            id: 2,
            outcome: Outcome::Failed("nope".into()),
        },
        Event::Drained,
    ];
    // Written concurrently: the 64 KiB mail would fill the socket buffer.
    let send_down = async {
        for m in down.clone() {
            sup_tx.send(m).await.unwrap();
        }
        sup_tx.close().await.unwrap();
    };
    let recv_down = async {
        let mut got = Vec::new();
        while let Some(m) = child_rx.next().await.unwrap() {
            got.push(m);
        }
        got
    };
    let ((), got_down) = tokio::join!(send_down, recv_down);
    assert_eq!(got_down, down);

    for m in up.clone() {
        child_tx.send(m).await.unwrap();
    }
    child_tx.close().await.unwrap();
    let mut got_up = Vec::new();
    while let Some(m) = sup_rx.next().await.unwrap() {
        got_up.push(m);
    }
    assert_eq!(got_up, up);
    // End of stream stays end of stream.
    assert_eq!(sup_rx.next().await.unwrap(), None);
}

/// Frames written one byte at a time still arrive whole.
#[tokio::test]
async fn frames_dribbled_byte_by_byte_arrive_whole() {
    let (mut reader, mut raw) = raw_peer();
    let mut wire = encode(1, Event::Pong { nonce: 42 });
    wire.extend(encode(2, Event::Drained));
    let writer = async move {
        for b in wire {
            raw.write_all(&[b]).await.unwrap();
            tokio::task::yield_now().await;
        }
        raw.shutdown().await.unwrap();
    };
    let reading = async {
        let mut got = Vec::new();
        while let Some(m) = reader.next().await.unwrap() {
            got.push(m);
        }
        got
    };
    let ((), got) = tokio::join!(writer, reading);
    assert_eq!(got, [Event::Pong { nonce: 42 }, Event::Drained]);
}

#[tokio::test]
async fn half_a_frame_then_close_is_truncated() {
    let (mut reader, mut raw) = raw_peer();
    let wire = encode(
        1,
        Event::RecycleRequest {
            reason: "rss over the limit".into(),
        },
    );
    let half = wire.len() / 2;
    raw.write_all(&wire[..half]).await.unwrap();
    raw.shutdown().await.unwrap();
    assert_eq!(
        violation(reader.next().await),
        ProtocolViolation::Truncated {
            have: half,
            want: wire.len()
        }
    );
}

#[tokio::test]
async fn half_a_header_then_close_is_truncated() {
    let (mut reader, mut raw) = raw_peer();
    raw.write_all(&[0, 0]).await.unwrap();
    raw.shutdown().await.unwrap();
    assert_eq!(
        violation(reader.next().await),
        ProtocolViolation::Truncated { have: 2, want: 4 }
    );
}

#[tokio::test]
async fn sequence_gap_is_refused() {
    let (mut reader, mut raw) = raw_peer();
    raw.write_all(&encode(1, Event::Ready)).await.unwrap();
    raw.write_all(&encode(3, Event::Drained)).await.unwrap();
    assert_eq!(reader.next().await.unwrap(), Some(Event::Ready));
    assert_eq!(
        violation(reader.next().await),
        ProtocolViolation::SeqGap {
            expected: 2,
            got: 3
        }
    );
}

#[tokio::test]
async fn sequence_repeat_is_refused() {
    let (mut reader, mut raw) = raw_peer();
    raw.write_all(&encode(1, Event::Ready)).await.unwrap();
    raw.write_all(&encode(1, Event::Ready)).await.unwrap();
    assert_eq!(reader.next().await.unwrap(), Some(Event::Ready));
    assert_eq!(
        violation(reader.next().await),
        ProtocolViolation::SeqRepeat {
            expected: 2,
            got: 1
        }
    );
}

/// The first frame must be 1: neither 0 nor a later number.
#[tokio::test]
async fn sequence_starts_at_one() {
    let (mut reader, mut raw) = raw_peer();
    raw.write_all(&encode(0, Event::Ready)).await.unwrap();
    assert_eq!(
        violation(reader.next().await),
        ProtocolViolation::SeqRepeat {
            expected: 1,
            got: 0
        }
    );

    let (mut reader, mut raw) = raw_peer();
    raw.write_all(&encode(2, Event::Ready)).await.unwrap();
    assert_eq!(
        violation(reader.next().await),
        ProtocolViolation::SeqGap {
            expected: 1,
            got: 2
        }
    );
}

#[tokio::test]
async fn oversized_announcement_is_refused_by_the_reader() {
    let (mut reader, mut raw) = raw_peer();
    raw.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
    assert_eq!(
        violation(reader.next().await),
        ProtocolViolation::FrameTooLarge {
            len: u64::from(u32::MAX),
            max: DEFAULT_MAX_FRAME_BYTES
        }
    );
}

#[tokio::test]
async fn undecodable_frame_is_refused_by_the_reader() {
    let (mut reader, mut raw) = raw_peer();
    raw.write_all(&[0, 0, 0, 2, 1, 99]).await.unwrap();
    assert!(matches!(
        violation(reader.next().await),
        ProtocolViolation::Undecodable(_)
    ));
}

/// A refused send puts nothing on the wire and does not use up a sequence
/// number, so the channel stays usable.
#[tokio::test]
async fn refused_send_leaves_the_channel_intact() {
    let (a, b) = UnixStream::pair().unwrap();
    let (_a_rx, mut a_tx) = split::<Event, Control>(a, 256);
    let (mut b_rx, _b_tx) = split::<Control, Event>(b, 256);

    let err = a_tx
        .send(Control::Mail {
            id: 1,
            attempt: 1,
            payload: vec![0; 300],
        })
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Violation(ProtocolViolation::FrameTooLarge { max: 256, .. })
        ),
        "{err:?}"
    );
    a_tx.send(Control::Ping { nonce: 9 }).await.unwrap();
    a_tx.close().await.unwrap();
    assert_eq!(b_rx.next().await.unwrap(), Some(Control::Ping { nonce: 9 }));
    assert_eq!(b_rx.next().await.unwrap(), None);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any sequence of events a child sends arrives unchanged and in order.
    #[test]
    fn any_event_sequence_arrives_intact(events in prop::collection::vec(common::event(), 0..12)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let got = rt.block_on(async {
            let (sup, child) = UnixStream::pair().unwrap();
            let (mut rx, _tx): (FrameReader<Event>, FrameWriter<Control>) =
                split(sup, DEFAULT_MAX_FRAME_BYTES);
            let (_crx, mut ctx): (FrameReader<Control>, FrameWriter<Event>) =
                split(child, DEFAULT_MAX_FRAME_BYTES);
            let sending = async {
                for e in events.clone() {
                    ctx.send(e).await.unwrap();
                }
                ctx.close().await.unwrap();
            };
            let receiving = async {
                let mut got = Vec::new();
                while let Some(e) = rx.next().await.unwrap() {
                    got.push(e);
                }
                got
            };
            tokio::join!(sending, receiving).1
        });
        prop_assert_eq!(got, events);
    }
}

/// A burst far larger than the socket buffer, sent while the peer is not
/// yet reading: the writer waits for room (it is registered for readability
/// only, so this is its one path to writability) and every frame arrives,
/// in order.
#[tokio::test]
async fn a_burst_larger_than_the_socket_buffer_waits_for_room_and_arrives_whole() {
    let (sup, child) = UnixStream::pair().unwrap();
    let (_sup_rx, mut sup_tx) = split::<Event, Control>(sup, DEFAULT_MAX_FRAME_BYTES);
    let (mut child_rx, _child_tx) = split::<Control, Event>(child, DEFAULT_MAX_FRAME_BYTES);
    const FRAMES: u64 = 64;
    let sender = tokio::spawn(async move {
        for id in 0..FRAMES {
            let payload = vec![id as u8; 64 * 1024];
            sup_tx
                .send(Control::Mail {
                    id,
                    attempt: 1,
                    payload,
                })
                .await
                .unwrap();
        }
        sup_tx.close().await.unwrap();
    });
    // 4 MiB cannot fit in the socket: the sender is stuck until we read.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(!sender.is_finished(), "the sender waits for room");
    let mut ids = Vec::new();
    while let Some(message) = child_rx.next().await.unwrap() {
        let Control::Mail { id, payload, .. } = message else {
            panic!("expected mail, got {message:?}");
        };
        assert!(payload.len() == 64 * 1024 && payload.iter().all(|&b| b == id as u8));
        ids.push(id);
    }
    sender.await.unwrap();
    assert_eq!(ids, (0..FRAMES).collect::<Vec<_>>());
}

/// `next` may be dropped at any await (a `select!` losing to a timer): no
/// byte read so far is lost, so the frames still arrive whole and in order.
#[tokio::test]
async fn reading_survives_being_cancelled_midway() {
    let (mut reader, mut theirs) = raw_peer();
    let mut bytes = Vec::new();
    for nonce in 1..=20u64 {
        bytes.extend(encode(nonce, Event::Pong { nonce }));
    }
    let writer = tokio::spawn(async move {
        for chunk in bytes.chunks(3) {
            theirs.write_all(chunk).await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        theirs
    });
    let mut got = Vec::new();
    let mut cancelled = 0;
    while got.len() < 20 {
        match tokio::time::timeout(std::time::Duration::from_micros(300), reader.next()).await {
            Ok(message) => got.push(message.unwrap().expect("an event")),
            Err(_) => cancelled += 1,
        }
    }
    let _theirs = writer.await.unwrap();
    assert!(cancelled > 0, "some reads were cancelled midway");
    let want: Vec<Event> = (1..=20).map(|nonce| Event::Pong { nonce }).collect();
    assert_eq!(got, want);
}
