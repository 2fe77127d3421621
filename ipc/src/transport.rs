//! The async framed transport over a Unix stream socket: a reader that
//! yields checked message bodies and a writer that numbers what it sends.
//!
//! Both halves share one socket registered with the runtime for
//! readability only. tokio's own `UnixStream` also asks for writability,
//! and on a Unix socket every read the peer makes signals "writable" to the
//! sender (the kernel's write-space callback): with that interest each
//! round trip woke the sending process twice, once for nothing, which cost
//! about 3 µs a side on a round trip of 9 µs (DESIGN §10, figure 1). Writes
//! go straight to the socket instead; only when its buffer is full does a
//! write wait for room, through a short-lived writability registration of
//! a duplicate descriptor.

use std::io::{self, Write};
use std::marker::PhantomData;
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use bytes::{BufMut, BytesMut};
use serde::Serialize;
use serde::de::DeserializeOwned;
use thiserror::Error;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::net::UnixStream;

use crate::codec;
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
    socket: Socket,
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
        self.next_explained(|_| None).await
    }

    /// Lowers (or raises, up to [`crate::MAX_FRAME_LIMIT`]) the largest frame
    /// this reader accepts, e.g. to the limit a Welcome announced; a larger
    /// announcement is then refused from its header alone.
    pub fn set_max_frame_bytes(&mut self, max_frame_bytes: u32) {
        self.decoder = FrameDecoder::new(max_frame_bytes);
    }

    /// [`Self::next`], where a body that does not decode is first shown to
    /// `explain`, which may name the problem better than the codec can (a
    /// peer speaking another protocol version, say).
    pub(crate) async fn next_explained(
        &mut self,
        explain: impl Fn(&[u8]) -> Option<ProtocolViolation>,
    ) -> Result<Option<B>, TransportError> {
        loop {
            if let Some(body) = self.decoder.split_body(&mut self.buf)? {
                let frame: Frame<B> = codec::decode_exact(&body)
                    .map_err(|e| explain(&body).unwrap_or(ProtocolViolation::Undecodable(e)))?;
                self.seq.check(frame.seq)?;
                return Ok(Some(frame.body));
            }
            if self.read_some().await? == 0 {
                if self.buf.is_empty() {
                    return Ok(None);
                }
                return Err(self.decoder.truncation(&self.buf).into());
            }
        }
    }

    /// Reads what the socket holds (at least one byte, or 0 at end of
    /// stream) into the buffer's spare room.
    async fn read_some(&mut self) -> io::Result<usize> {
        let io = self.socket.get()?;
        if self.buf.capacity() == self.buf.len() {
            self.buf.reserve(READ_RESERVE);
        }
        loop {
            let mut ready = io.readable().await?;
            let room = self.buf.capacity() - self.buf.len();
            match ready.try_io(|fd| recv_into(fd.get_ref(), &mut self.buf)) {
                Ok(Ok(n)) => {
                    // A short read emptied the socket: the next read waits
                    // for the next edge instead of trying and failing first
                    // (as tokio's own streams do).
                    if n > 0 && n < room {
                        ready.clear_ready();
                    }
                    return Ok(n);
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) => return Err(e),
                Err(_would_block) => {}
            }
        }
    }
}

/// Room added when the read buffer is full: the first burst grows it to
/// reads of about this size, which it then keeps (tokio's `read_buf` adds
/// only 64 bytes).
const READ_RESERVE: usize = 8 * 1024;

/// Initial capacity of each half's buffer. Control frames are tens of
/// bytes and a supervisor holds a channel per child (DESIGN §10 idle RSS:
/// 8 KiB a half was 1.6 MiB over 100 idle children); a burst or a large
/// frame grows the buffer as needed.
const INITIAL_BUFFER: usize = 1024;

/// One `recv(2)` into the spare capacity of `buf`, which grows by what was
/// received. Reads into uninitialised memory, as tokio's `read_buf` does,
/// so an idle channel's buffer pages are not touched before data arrives.
fn recv_into(socket: &StdUnixStream, buf: &mut BytesMut) -> io::Result<usize> {
    let spare = buf.spare_capacity_mut();
    // SAFETY: `spare` is writable memory of `spare.len()` bytes owned by
    // `buf`; recv(2) writes at most that many bytes into it.
    let n = unsafe {
        libc::recv(
            socket.as_raw_fd(),
            spare.as_mut_ptr().cast(),
            spare.len(),
            0,
        )
    };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    // SAFETY: recv(2) initialised the first `n` bytes of the spare capacity.
    unsafe { buf.advance_mut(n) };
    Ok(n)
}

/// Writes frames of body type `B`, numbering them 1, 2, 3, …
#[derive(Debug)]
pub struct FrameWriter<B> {
    socket: Socket,
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
            let result = match self.socket.get() {
                Ok(io) => write_all(io, &self.buf).await,
                Err(e) => Err(e),
            };
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
        self.socket.get()?.get_ref().shutdown(Shutdown::Write)?;
        Ok(())
    }
}

/// Like tokio's write half: dropping the writer closes the sending
/// direction, so the peer reads end of stream even while this side still
/// reads.
impl<B> Drop for FrameWriter<B> {
    fn drop(&mut self) {
        if let Ok(io) = self.socket.get() {
            let _ = io.get_ref().shutdown(Shutdown::Write);
        }
    }
}

/// Writes all of `bytes` straight to the (non-blocking) socket; while its
/// buffer is full, waits for room through a duplicate of the descriptor
/// registered for writability, dropped once everything is written.
async fn write_all(io: &AsyncFd<StdUnixStream>, mut bytes: &[u8]) -> io::Result<()> {
    let mut waiter: Option<AsyncFd<StdUnixStream>> = None;
    while !bytes.is_empty() {
        let written = match &waiter {
            None => io.get_ref().write(bytes),
            Some(waiter) => {
                let mut ready = waiter.writable().await?;
                match ready.try_io(|fd| fd.get_ref().write(bytes)) {
                    Ok(result) => result,
                    Err(_would_block) => continue,
                }
            }
        };
        match written {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => bytes = &bytes[n..],
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && waiter.is_none() => {
                waiter = Some(register(io.get_ref().try_clone()?, Interest::WRITABLE)?);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Registers `stream` with the current runtime for `interest` (which
/// must exist: callers check, as `AsyncFd` would panic without one).
fn register(stream: StdUnixStream, interest: Interest) -> io::Result<AsyncFd<StdUnixStream>> {
    // SAFETY: the `AsyncFd` owns `stream`, whose descriptor stays open and
    // the same until the `AsyncFd` is dropped.
    unsafe { AsyncFd::register_with_interest(stream, interest) }.map_err(io::Error::from)
}

/// The socket both halves share, or why it could not be registered
/// (reported by the first read or write, so [`split`] stays infallible).
#[derive(Debug, Clone)]
struct Socket(Result<Arc<AsyncFd<StdUnixStream>>, (io::ErrorKind, String)>);

impl Socket {
    /// Takes `stream` out of tokio's registration (readable and writable)
    /// and registers it again for readability only, with the runtime of
    /// the caller (as before, `split` is called inside one).
    fn new(stream: UnixStream) -> Self {
        let registered = tokio::runtime::Handle::try_current()
            .map_err(io::Error::other)
            .and_then(|_| stream.into_std())
            .and_then(|std| register(std, Interest::READABLE))
            .map(Arc::new)
            .map_err(|e| (e.kind(), format!("registering the control socket: {e}")));
        Self(registered)
    }

    fn get(&self) -> io::Result<&AsyncFd<StdUnixStream>> {
        match &self.0 {
            Ok(io) => Ok(io),
            Err((kind, message)) => Err(io::Error::new(*kind, message.clone())),
        }
    }
}

/// Splits a connected stream into a reader of `In` and a writer of `Out`,
/// both bounded by `max_frame_bytes`.
pub fn split<In, Out>(
    stream: UnixStream,
    max_frame_bytes: u32,
) -> (FrameReader<In>, FrameWriter<Out>) {
    let socket = Socket::new(stream);
    let decoder = FrameDecoder::new(max_frame_bytes);
    (
        FrameReader {
            socket: socket.clone(),
            buf: BytesMut::with_capacity(INITIAL_BUFFER),
            decoder,
            seq: SeqTracker::default(),
            _body: PhantomData,
        },
        FrameWriter {
            socket,
            buf: Vec::with_capacity(INITIAL_BUFFER),
            max_frame_bytes: decoder.max_frame_bytes(),
            seq: SeqTracker::default(),
            _body: PhantomData,
        },
    )
}
