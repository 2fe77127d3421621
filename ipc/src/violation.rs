//! Everything a peer can get wrong on the wire, each named precisely so the
//! log line that ends a child's wiring says exactly what happened.

use thiserror::Error;

/// A protocol violation: the peer broke the contract and its wiring ends.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ProtocolViolation {
    /// A frame announced zero bytes of body.
    #[error("empty frame (length 0)")]
    EmptyFrame,
    /// A frame announced more bytes than the configured maximum.
    #[error("frame of {len} bytes exceeds max_frame_bytes {max}")]
    FrameTooLarge { len: u64, max: u32 },
    /// The body could not be decoded as a message of the expected direction.
    #[error("undecodable frame body: {0}")]
    Undecodable(String),
    /// The stream ended in the middle of a frame.
    #[error("stream ended inside a frame ({have} of {want} bytes)")]
    Truncated { have: usize, want: usize },
    /// A sequence number skipped ahead.
    #[error("sequence gap: expected {expected}, got {got}")]
    SeqGap { expected: u64, got: u64 },
    /// A sequence number repeated or went backwards.
    #[error("sequence repeat: expected {expected}, got {got}")]
    SeqRepeat { expected: u64, got: u64 },
    /// The Hello named another channel (a child of an earlier spawn, say).
    #[error("wrong channel id {got} (expected {expected})")]
    WrongChannel { expected: String, got: String },
    /// The Hello asked for a protocol version this side does not speak.
    #[error("the peer speaks protocol {got}, this side speaks {supported}")]
    UnsupportedProtocol { got: u32, supported: u32 },
    /// A message that is valid on the wire but not in the current state.
    #[error("unexpected {message} while {state}")]
    Unexpected { message: String, state: String },
}
