//! Allocation bounds: a frame may make the decoder allocate about as much as
//! the frame holds, never what the frame merely claims. A counting allocator
//! records the largest single allocation made on the test's own thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use wfhost_ipc::{Control, DEFAULT_MAX_FRAME_BYTES, Event, FrameDecoder, ProtocolViolation};

thread_local! {
    // const-initialised and without a destructor: safe to touch from
    // inside the allocator.
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

struct Recording;

impl Recording {
    fn note(size: usize) {
        let _ = LARGEST.try_with(|l| l.set(l.get().max(size)));
    }
}

// SAFETY: forwards every call to the system allocator; only records sizes.
unsafe impl GlobalAlloc for Recording {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        Self::note(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        Self::note(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        Self::note(new_size);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Recording = Recording;

/// The largest single allocation `f` makes on this thread.
fn largest_allocation<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.with(|l| l.set(0));
    let out = f();
    (out, LARGEST.with(Cell::get))
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_be_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

/// Anything the decoder needs for a frame of a few dozen bytes.
const SMALL: usize = 4096;

/// Found by the `frame_decoder` fuzz target: a Hello whose channel id claims
/// 60 MiB made bincode allocate the claimed 60 MiB before noticing the
/// bytes were missing.
#[test]
fn claimed_string_length_is_not_allocated() {
    // seq 1, Event::Hello (0), protocol 1, channel_id: u64 varint 60 MiB.
    let mut body = vec![1, 0, 1, 253];
    body.extend_from_slice(&(60u64 << 20).to_le_bytes());
    body.extend_from_slice(b"abc");
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let (result, largest) = largest_allocation(|| decoder.decode_one::<Event>(&frame(&body)));
    assert!(
        matches!(result, Err(ProtocolViolation::Undecodable(_))),
        "{result:?}"
    );
    assert!(
        largest < SMALL,
        "a {}-byte frame allocated {largest} bytes",
        body.len()
    );
}

/// A Mail whose payload claims a million bytes must not reserve them.
#[test]
fn claimed_payload_length_is_not_reserved() {
    // seq 1, Control::Mail (3), id 7, attempt 1, payload: u32 varint 1,000,000.
    let mut body = vec![1, 3, 7, 1, 252];
    body.extend_from_slice(&1_000_000u32.to_le_bytes());
    body.extend_from_slice(&[0xAB; 16]);
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let (result, largest) = largest_allocation(|| decoder.decode_one::<Control>(&frame(&body)));
    assert!(
        matches!(result, Err(ProtocolViolation::Undecodable(_))),
        "{result:?}"
    );
    assert!(
        largest < SMALL,
        "a {}-byte frame allocated {largest} bytes",
        body.len()
    );
}

/// Real payloads still decode whole, and cost about their own size.
#[test]
fn real_payload_costs_about_its_size() {
    use wfhost_ipc::{Frame, encode_frame};
    let frame = Frame {
        seq: 1,
        body: Control::Mail {
            id: 1,
            attempt: 1,
            payload: vec![0x11; 256 * 1024],
        },
    };
    let mut wire = Vec::new();
    encode_frame(&frame, DEFAULT_MAX_FRAME_BYTES, &mut wire).unwrap();
    let decoder = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES);
    let (result, largest) = largest_allocation(|| decoder.decode_one::<Control>(&wire));
    assert_eq!(result.unwrap(), frame);
    // The input copy plus a vector that grew by doubling.
    assert!(
        largest <= 2 * wire.len(),
        "allocated {largest} for {}",
        wire.len()
    );
}
