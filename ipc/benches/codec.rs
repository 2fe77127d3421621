//! Frame codec throughput: one iteration encodes a frame (header, seq, body)
//! and decodes it back with `decode_one`, as one message crossing the wire
//! costs on both ends together. Reported in frames per second.

use divan::counter::{BytesCount, ItemsCount};
use divan::{Bencher, black_box};
use serde::Serialize;
use serde::de::DeserializeOwned;
use wfhost_ipc::{
    Control, DEFAULT_MAX_FRAME_BYTES, DrainBehavior, Event, Frame, FrameDecoder, encode_frame,
};

fn main() {
    divan::main();
}

/// Encodes and decodes `body` once per iteration, reusing the output buffer
/// as `FrameWriter` does.
fn round_trip<B>(bencher: Bencher, body: B)
where
    B: Serialize + DeserializeOwned,
{
    let frame = Frame { seq: 1234, body };
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let mut buf = Vec::with_capacity(8 * 1024);
    encode_frame(&frame, DEFAULT_MAX_FRAME_BYTES, &mut buf).unwrap();
    let wire_bytes = buf.len();
    bencher
        .counter(ItemsCount::new(1usize))
        .counter(BytesCount::new(wire_bytes))
        .bench_local(|| {
            buf.clear();
            encode_frame(black_box(&frame), DEFAULT_MAX_FRAME_BYTES, &mut buf).unwrap();
            decoder.decode_one::<B>(black_box(&buf)).unwrap()
        });
}

#[divan::bench]
fn event_pong(bencher: Bencher) {
    round_trip(bencher, Event::Pong { nonce: 0x1234_5678 });
}

#[divan::bench]
fn event_step_started(bencher: Bencher) {
    round_trip(
        bencher,
        Event::StepStarted {
            run: "run-0192f5a8".into(),
            step: "charge-card".into(),
            drain: DrainBehavior::Cancel,
        },
    );
}

#[divan::bench]
fn control_mail_4k(bencher: Bencher) {
    let payload: Vec<u8> = (0..4096u32).map(|i| (i * 31) as u8).collect();
    round_trip(
        bencher,
        Control::Mail {
            id: 77,
            attempt: 1,
            payload,
        },
    );
}
