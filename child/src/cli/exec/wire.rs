//! The control channel of exec, blocking and without a runtime: frames
//! written whole with one `write` each batch, frames read from what
//! `poll` says is there. The codec, limits and sequence checks are
//! `wfhost_ipc`'s, so the bytes are exactly the runtime's.

use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

use bytes::BytesMut;
use wfhost_child::{ChildEnv, ConnectError};
use wfhost_ipc::{
    Control, Event, Frame, FrameDecoder, HandshakeError, Hello, MAX_FRAME_LIMIT, SeqTracker,
    TransportError, Welcome, encode_frame,
};

/// Bytes asked of the socket per read: a Ping is 3, a Cancel about 130.
const READ_CHUNK: usize = 4096;

/// What a read of the channel found.
pub enum Incoming {
    /// Whole messages, in order.
    Messages(Vec<Control>),
    /// A clean end of stream between frames: the supervisor is gone.
    End,
    /// The channel failed or carried a broken frame.
    Failed(String),
}

/// The child's end of the control channel.
pub struct Wire {
    stream: UnixStream,
    buf: BytesMut,
    decoder: FrameDecoder,
    seq_in: SeqTracker,
    seq_out: SeqTracker,
    max_out: u32,
    out: Vec<u8>,
    /// Set once a write failed: nothing more is sent.
    broken: bool,
}

impl Wire {
    /// Takes the inherited control fd: it must be an open socket; it is
    /// marked close-on-exec so the command never inherits it.
    pub fn take(fd: RawFd) -> Result<Self, ConnectError> {
        let fd_err = |source: io::Error| ConnectError::Fd { fd, source };
        // SAFETY: F_GETFD only reads the descriptor flags of `fd`.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } < 0 {
            return Err(fd_err(io::Error::last_os_error()));
        }
        // SAFETY: `st` is a plain struct the kernel fills.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd, &mut st) } < 0 {
            return Err(fd_err(io::Error::last_os_error()));
        }
        if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Err(fd_err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a socket",
            )));
        }
        // SAFETY: the fd is open (checked above) and was inherited for
        // this process alone; exec takes it once, here.
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: F_SETFD with FD_CLOEXEC on an fd we own.
        if unsafe { libc::fcntl(owned.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
            return Err(fd_err(io::Error::last_os_error()));
        }
        Ok(Self {
            stream: UnixStream::from(owned),
            buf: BytesMut::new(),
            decoder: FrameDecoder::new(MAX_FRAME_LIMIT as u32),
            seq_in: SeqTracker::default(),
            seq_out: SeqTracker::default(),
            max_out: MAX_FRAME_LIMIT as u32,
            out: Vec::new(),
            broken: false,
        })
    }

    /// The socket, for `poll`.
    pub fn fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }

    /// Sends `Hello` for `env`.
    pub fn hello(&mut self, env: &ChildEnv, implementation: &str) -> Result<(), ConnectError> {
        let hello = Hello {
            protocol: env.protocol,
            channel_id: env.channel_id.clone(),
            pid: std::process::id(),
            takes_mail: false,
            implementation: implementation.to_owned(),
        };
        self.send(&[Event::Hello(hello)])
            .map_err(|e| ConnectError::Handshake(HandshakeError::Transport(e)))
    }

    /// Waits for the `Welcome`: of the Hello's protocol version, for
    /// `env.deployment`; from then on frames both ways are held to its
    /// `max_frame_bytes`.
    pub fn welcome(&mut self, env: &ChildEnv) -> Result<Welcome, ConnectError> {
        let handshake = |e: HandshakeError| ConnectError::Handshake(e);
        let first = loop {
            match self.next_frame() {
                Ok(Some(message)) => break message,
                Ok(None) => {}
                Err(e) => return Err(handshake(HandshakeError::Transport(e))),
            }
            match self.fill() {
                Ok(0) if self.buf.is_empty() => {
                    return Err(handshake(HandshakeError::Closed {
                        before: "Welcome",
                        hint: "the supervisor closes it on a Hello of a wrong channel id or protocol",
                    }));
                }
                Ok(0) => {
                    let cut = self.decoder.truncation(&self.buf);
                    return Err(handshake(HandshakeError::Transport(cut.into())));
                }
                Ok(_) => {}
                Err(e) => return Err(handshake(HandshakeError::Transport(e.into()))),
            }
        };
        let welcome = match first {
            Control::Welcome(welcome) => welcome,
            other => {
                return Err(handshake(HandshakeError::Unexpected {
                    expected: "Welcome",
                    got: other.name(),
                }));
            }
        };
        if welcome.protocol != env.protocol {
            return Err(handshake(HandshakeError::SupervisorProtocol {
                got: welcome.protocol,
                asked: env.protocol,
            }));
        }
        if welcome.deployment != env.deployment {
            return Err(ConnectError::WrongDeployment {
                welcome: welcome.deployment,
                env: env.deployment.clone(),
            });
        }
        self.decoder = FrameDecoder::new(welcome.limits.max_frame_bytes);
        self.max_out = welcome.limits.max_frame_bytes;
        Ok(welcome)
    }

    /// Reads what the socket holds (call when `poll` says it is readable)
    /// and returns every whole message in it.
    pub fn receive(&mut self) -> Incoming {
        match self.fill() {
            Ok(0) if self.buf.is_empty() => return Incoming::End,
            Ok(0) => {
                let cut = self.decoder.truncation(&self.buf);
                return Incoming::Failed(TransportError::from(cut).to_string());
            }
            Ok(_) => {}
            Err(e) => return Incoming::Failed(TransportError::from(e).to_string()),
        }
        let mut messages = Vec::new();
        loop {
            match self.next_frame() {
                Ok(Some(message)) => messages.push(message),
                Ok(None) => break,
                Err(e) => return Incoming::Failed(e.to_string()),
            }
        }
        // A large frame (mail) once read needs no room kept for it.
        if self.buf.is_empty() && self.buf.capacity() > 4 * READ_CHUNK {
            self.buf = BytesMut::new();
        }
        Incoming::Messages(messages)
    }

    /// Writes `events` as consecutive frames in one write. An event over
    /// the supervisor's `max_frame_bytes` is not sent (the supervisor would
    /// end the wiring) and the error says so.
    pub fn send(&mut self, events: &[Event]) -> Result<(), TransportError> {
        if self.broken {
            return Err(TransportError::Io(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "an earlier write failed",
            )));
        }
        self.out.clear();
        for event in events {
            let frame = Frame {
                seq: self.seq_out.issue(),
                body: event,
            };
            encode_frame(&frame, self.max_out, &mut self.out)?;
        }
        let written = self.stream.write_all(&self.out);
        if self.out.capacity() > 4 * READ_CHUNK {
            self.out = Vec::new();
        }
        written.map_err(|e| {
            self.broken = true;
            TransportError::Io(e)
        })
    }

    /// Closes the sending direction: the supervisor reads end of stream.
    pub fn close(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Write);
    }

    /// One read of up to [`READ_CHUNK`] bytes (more when a frame's
    /// announced length, already checked, needs them) onto the buffer.
    fn fill(&mut self) -> io::Result<usize> {
        if self.buf.capacity() - self.buf.len() < READ_CHUNK {
            self.buf.reserve(READ_CHUNK);
        }
        let start = self.buf.len();
        let room = self.buf.capacity() - start;
        self.buf.resize(start + room, 0);
        let read = loop {
            match self.stream.read(&mut self.buf[start..]) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => break other,
            }
        };
        self.buf.truncate(start + *read.as_ref().unwrap_or(&0));
        read
    }

    /// The next whole message off the buffer, sequence-checked.
    fn next_frame(&mut self) -> Result<Option<Control>, TransportError> {
        let Some(frame) = self.decoder.decode::<Control>(&mut self.buf)? else {
            return Ok(None);
        };
        self.seq_in.check(frame.seq)?;
        Ok(Some(frame.body))
    }
}
