#![no_main]
//! Feeds arbitrary bytes to the frame decoder as a stream, in chunks, for both
//! directions, and as one whole frame. It must never panic, and never allocate
//! more than the frame limit allows: a counting allocator aborts (libFuzzer
//! records that as a crash) when one allocation, or the bytes live at once,
//! pass a cap derived from the limit and the input size. A 10-byte frame that
//! makes a peer allocate megabytes is a denial of service even if it is later
//! refused.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use serde::Serialize;
use serde::de::DeserializeOwned;
use wfhost_ipc::frame::HEADER_BYTES;
use wfhost_ipc::{Control, Event, Frame, FrameDecoder, encode_frame};

/// Small on purpose, so that any allocation sized by a claimed length rather
/// than by bytes actually present stands out.
const MAX_FRAME: u32 = 4096;

/// Live bytes allowed above the level at the start of one input.
static CAP: AtomicUsize = AtomicUsize::new(usize::MAX);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static BASE: AtomicUsize = AtomicUsize::new(0);

struct Capped;

impl Capped {
    fn check(size: usize) {
        let cap = CAP.load(Ordering::Relaxed);
        let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        let over = live.saturating_sub(BASE.load(Ordering::Relaxed));
        if size > cap || over > cap.saturating_mul(2) {
            // No formatting here: it would allocate inside the allocator.
            let msg = b"frame_decoder: allocation beyond the cap\n";
            // SAFETY: writing a static buffer to stderr.
            unsafe { libc_write(2, msg.as_ptr(), msg.len()) };
            std::process::abort();
        }
    }
}

unsafe extern "C" {
    #[link_name = "write"]
    fn libc_write(fd: i32, buf: *const u8, count: usize) -> isize;
}

// SAFETY: forwards to the system allocator and only counts.
unsafe impl GlobalAlloc for Capped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::check(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        Self::check(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Capped = Capped;

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    // Room for one whole frame being buffered (with `BytesMut` doubling) or
    // for copies of the input; nothing else may be large.
    let cap = 2 * (HEADER_BYTES + MAX_FRAME as usize).max(stream.len()) + 1024;
    BASE.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    CAP.store(cap, Ordering::Relaxed);

    let decoder = FrameDecoder::new(MAX_FRAME);
    stream_decode::<Control>(&decoder, stream, seed);
    stream_decode::<Event>(&decoder, stream, seed);
    whole::<Control>(&decoder, stream);
    whole::<Event>(&decoder, stream);

    CAP.store(usize::MAX, Ordering::Relaxed);
});

/// Feeds `stream` in chunks whose sizes come from `seed`, decoding after each
/// chunk as a reader would, until the stream ends or a violation stops it.
fn stream_decode<B>(decoder: &FrameDecoder, stream: &[u8], seed: u8)
where
    B: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let mut buf = BytesMut::new();
    let mut rest = stream;
    let mut state = u32::from(seed) | 1;
    while !rest.is_empty() {
        // xorshift: cheap, deterministic chunk sizes from 1 to 64 bytes.
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let n = (state as usize % 64 + 1).min(rest.len());
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        loop {
            match decoder.decode::<B>(&mut buf) {
                Ok(Some(frame)) => round_trip(decoder, &frame),
                Ok(None) => break,
                Err(_) => return,
            }
        }
        assert!(
            buf.capacity() <= 2 * (HEADER_BYTES + MAX_FRAME as usize).max(stream.len()) + 64,
            "buffer grew to {} bytes",
            buf.capacity()
        );
    }
}

/// `decode_one` on the whole input; whatever it accepts must round-trip.
fn whole<B>(decoder: &FrameDecoder, bytes: &[u8])
where
    B: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    if let Ok(frame) = decoder.decode_one::<B>(bytes) {
        round_trip(decoder, &frame);
    }
}

/// A frame the decoder accepted re-encodes within the limit and decodes to
/// the same value.
fn round_trip<B>(decoder: &FrameDecoder, frame: &Frame<B>)
where
    B: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let mut out = Vec::new();
    encode_frame(frame, decoder.max_frame_bytes(), &mut out).expect("accepted frame re-encodes");
    let again = decoder
        .decode_one::<B>(&out)
        .expect("re-encoded frame decodes");
    assert_eq!(&again, frame);
}
