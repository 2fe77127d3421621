//! The async framed transport over a `tokio::net::UnixStream`: a reader that
//! yields checked message bodies and a writer that numbers what it sends.

use std::io;
use std::marker::PhantomData;

use bytes::BytesMut;
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

use crate::frame::{Frame, FrameDecoder, SeqTracker, encode_frame};
use crate::violation::ProtocolViolation;

/// Why a channel stopped working.
#[derive(Debug, Error)]
pub enum TransportError {
    /// The socket failed.
    #[error("control channel I/O: {0}")]
    Io(#[from] io::Error),
    /// The peer broke the protocol.
    #[error("protocol violation: {0}")]
    Violation(#[from] ProtocolViolation),
}

/// Reads frames of body type `B`, checking lengths and sequence numbers.
#[derive(Debug)]
pub struct FrameReader<B> {
    stream: OwnedReadHalf,
    buf: BytesMut,
    decoder: FrameDecoder,
    seq: SeqTracker,
    _body: PhantomData<fn() -> B>,
}

impl<B: DeserializeOwned> FrameReader<B> {
    /// The next message, or `None` on a clean end of stream between frames.
    /// Cancel-safe: dropping the future loses no bytes, so it can sit in a
    /// `select!` loop.
    pub async fn next(&mut self) -> Result<Option<B>, TransportError> {
        loop {
            if let Some(frame) = self.decoder.decode::<B>(&mut self.buf)? {
                self.seq.check(frame.seq)?;
                return Ok(Some(frame.body));
            }
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(self.decoder.truncation(&self.buf).into());
            }
        }
    }
}

/// Writes frames of body type `B`, numbering them 1, 2, 3, …
#[derive(Debug)]
pub struct FrameWriter<B> {
    stream: OwnedWriteHalf,
    buf: Vec<u8>,
    max_frame_bytes: u32,
    seq: SeqTracker,
    _body: PhantomData<fn(&B)>,
}

impl<B: Serialize> FrameWriter<B> {
    /// Sends one message. Not cancel-safe: a dropped send may leave half a
    /// frame on the wire, so callers finish every send they start.
    ///
    /// A refused (oversized) message sends nothing and uses up no sequence
    /// number, so the channel stays usable.
    pub async fn send(&mut self, body: B) -> Result<(), TransportError> {
        self.queue(body)?;
        self.flush().await
    }

    /// Encodes one message behind those already queued, without writing:
    /// a sender with a burst of messages queues them all and flushes once,
    /// one write for many frames. A refused (oversized) message leaves the
    /// queue and the sequence numbers as they were.
    pub fn queue(&mut self, body: B) -> Result<(), ProtocolViolation> {
        let mut seq = self.seq;
        let frame = Frame {
            seq: seq.issue(),
            body,
        };
        encode_frame(&frame, self.max_frame_bytes, &mut self.buf)?;
        self.seq = seq;
        Ok(())
    }

    /// Bytes queued and not yet flushed.
    pub fn queued_bytes(&self) -> usize {
        self.buf.len()
    }

    /// Writes everything queued. Not cancel-safe, like [`Self::send`].
    pub async fn flush(&mut self) -> Result<(), TransportError> {
        if !self.buf.is_empty() {
            let result = self.stream.write_all(&self.buf).await;
            self.buf.clear();
            result?;
        }
        Ok(())
    }

    /// Lowers (or raises, up to [`crate::MAX_FRAME_LIMIT`]) the largest frame
    /// this writer sends, e.g. to the limit the peer announced.
    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: u32) {
        self.max_frame_bytes = FrameDecoder::new(max_frame_bytes).max_frame_bytes();
    }

    /// Closes the sending direction, so the peer reads end of stream.
    pub async fn close(&mut self) -> Result<(), TransportError> {
        self.flush().await?;
        self.stream.shutdown().await?;
        Ok(())
    }
}

/// Splits a connected stream into a reader of `In` and a writer of `Out`,
/// both bounded by `max_frame_bytes`.
pub fn split<In, Out>(
    stream: UnixStream,
    max_frame_bytes: u32,
) -> (FrameReader<In>, FrameWriter<Out>) {
    let (read, write) = stream.into_split();
    let decoder = FrameDecoder::new(max_frame_bytes);
    (
        FrameReader {
            stream: read,
            buf: BytesMut::with_capacity(8 * 1024),
            decoder,
            seq: SeqTracker::default(),
            _body: PhantomData,
        },
        FrameWriter {
            stream: write,
            buf: Vec::with_capacity(8 * 1024),
            max_frame_bytes: decoder.max_frame_bytes(),
            seq: SeqTracker::default(),
            _body: PhantomData,
        },
    )
}
