//! How large a frame's body may be. Both the framing (which refuses a length
//! from the header alone) and the body codec (which caps a decode at the
//! largest frame) need these bounds, so they sit below both.

/// The default `max_frame_bytes` (1 MiB).
pub const DEFAULT_MAX_FRAME_BYTES: u32 = 1 << 20;

/// The largest `max_frame_bytes` any configuration may set (64 MiB).
pub const MAX_FRAME_LIMIT: usize = 64 << 20;
