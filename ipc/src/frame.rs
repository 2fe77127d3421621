//! Framing: a `u32` big-endian length, then that many bytes of body encoding
//! one `Frame { seq, body }`. Lengths are checked before anything is
//! allocated, and sequence numbers are checked per direction.

use bytes::{Buf, BytesMut};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::codec;
pub use crate::frame_size::{DEFAULT_MAX_FRAME_BYTES, MAX_FRAME_LIMIT};
use crate::violation::ProtocolViolation;

/// Bytes in the length prefix.
pub const HEADER_BYTES: usize = 4;

/// One message on the wire with its per-direction sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Frame<B> {
    /// Starts at 1 and grows by one per frame in each direction.
    pub seq: u64,
    /// The message.
    pub body: B,
}

/// Encodes one frame (header and body) onto the end of `out`, refusing a
/// body larger than `max_frame_bytes` so a sender never emits what its peer
/// must refuse.
pub fn encode_frame<B: Serialize>(
    frame: &Frame<B>,
    max_frame_bytes: u32,
    out: &mut Vec<u8>,
) -> Result<(), ProtocolViolation> {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER_BYTES]);
    if let Err(e) = codec::encode_into(frame, out) {
        out.truncate(start);
        return Err(ProtocolViolation::Undecodable(e));
    }
    let len = out.len() - start - HEADER_BYTES;
    if len > max_frame_bytes as usize {
        out.truncate(start);
        return Err(ProtocolViolation::FrameTooLarge {
            len: len as u64,
            max: max_frame_bytes,
        });
    }
    // len <= max_frame_bytes, a u32, so the cast is lossless.
    out[start..start + HEADER_BYTES].copy_from_slice(&(len as u32).to_be_bytes());
    Ok(())
}

/// Splits frames off a byte buffer. Holds only the limit, so one decoder can
/// serve any buffer.
#[derive(Debug, Clone, Copy)]
pub struct FrameDecoder {
    max_frame_bytes: u32,
}

impl FrameDecoder {
    /// A decoder refusing bodies above `max_frame_bytes` (capped at
    /// [`MAX_FRAME_LIMIT`]).
    pub fn new(max_frame_bytes: u32) -> Self {
        let cap = MAX_FRAME_LIMIT as u32;
        Self {
            max_frame_bytes: max_frame_bytes.min(cap),
        }
    }

    /// The limit in force.
    pub fn max_frame_bytes(&self) -> u32 {
        self.max_frame_bytes
    }

    /// Checks a length prefix; called before any byte of the body is
    /// buffered, so an oversized announcement costs nothing.
    pub fn check_len(&self, header: [u8; HEADER_BYTES]) -> Result<usize, ProtocolViolation> {
        let len = u32::from_be_bytes(header);
        if len == 0 {
            return Err(ProtocolViolation::EmptyFrame);
        }
        if len > self.max_frame_bytes {
            return Err(ProtocolViolation::FrameTooLarge {
                len: u64::from(len),
                max: self.max_frame_bytes,
            });
        }
        Ok(len as usize)
    }

    /// Takes one whole frame off the front of `buf`, or returns `None` when
    /// more bytes are needed. Reserves room for the rest of a frame only once
    /// its length has passed the limit check.
    pub fn decode<B: DeserializeOwned>(
        &self,
        buf: &mut BytesMut,
    ) -> Result<Option<Frame<B>>, ProtocolViolation> {
        match self.split_body(buf)? {
            Some(body) => codec::decode_exact(&body)
                .map(Some)
                .map_err(ProtocolViolation::Undecodable),
            None => Ok(None),
        }
    }

    /// Takes the body of one whole frame off the front of `buf`, undecoded,
    /// or returns `None` when more bytes are needed (see [`Self::decode`]).
    pub(crate) fn split_body(
        &self,
        buf: &mut BytesMut,
    ) -> Result<Option<BytesMut>, ProtocolViolation> {
        let Some(header) = buf.get(..HEADER_BYTES) else {
            return Ok(None);
        };
        let mut h = [0u8; HEADER_BYTES];
        h.copy_from_slice(header);
        let len = self.check_len(h)?;
        let want = HEADER_BYTES + len;
        if buf.len() < want {
            buf.reserve(want - buf.len());
            return Ok(None);
        }
        buf.advance(HEADER_BYTES);
        Ok(Some(buf.split_to(len)))
    }

    /// Decodes a buffer that must hold exactly one frame and nothing else
    /// (the fuzz target and tests use this).
    pub fn decode_one<B: DeserializeOwned>(
        &self,
        bytes: &[u8],
    ) -> Result<Frame<B>, ProtocolViolation> {
        let mut buf = BytesMut::from(bytes);
        match self.decode(&mut buf)? {
            Some(frame) if buf.is_empty() => Ok(frame),
            Some(_) => Err(ProtocolViolation::Undecodable(format!(
                "{} bytes after the frame",
                buf.len()
            ))),
            None => Err(self.truncation(bytes)),
        }
    }

    /// The violation for a stream that ended with `buffered` holding the
    /// start of an unfinished frame.
    pub fn truncation(&self, buffered: &[u8]) -> ProtocolViolation {
        let want = match buffered.get(..HEADER_BYTES) {
            Some(h) => HEADER_BYTES + u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize,
            None => HEADER_BYTES,
        };
        ProtocolViolation::Truncated {
            have: buffered.len(),
            want,
        }
    }
}

/// Checks the sequence numbers of one direction: 1, 2, 3, …
#[derive(Debug, Clone, Copy)]
pub struct SeqTracker {
    next: u64,
}

impl Default for SeqTracker {
    fn default() -> Self {
        Self { next: 1 }
    }
}

impl SeqTracker {
    /// Accepts `seq` if it is the next one, else names the gap or repeat.
    pub fn check(&mut self, seq: u64) -> Result<(), ProtocolViolation> {
        let expected = self.next;
        if seq == expected {
            self.next = expected.saturating_add(1);
            Ok(())
        } else if seq > expected {
            Err(ProtocolViolation::SeqGap { expected, got: seq })
        } else {
            Err(ProtocolViolation::SeqRepeat { expected, got: seq })
        }
    }

    /// Hands out the next sequence number for a sender.
    pub fn issue(&mut self) -> u64 {
        let seq = self.next;
        self.next = seq.saturating_add(1);
        seq
    }
}
