//! The two ends of a control channel, each with its side of the handshake
//! as methods, so the supervisor, the child library and the conformance kit
//! share one handshake instead of writing their own:
//!
//! ```text
//! child end                      supervisor end
//!   Hello (seq 1)  ─────────────▶  read_hello: checked against the channel
//!                  ◀─────────────  welcome: Welcome (protocol, limits)
//!   (refuses another protocol)
//!   Ready          ─────────────▶  await_ready
//! ```
//!
//! No timeouts here: each caller applies its own (the supervisor's
//! `ready_timeout`, the kit's bounded waits).

use thiserror::Error;
use tokio::net::UnixStream;

use crate::codec;
use crate::frame_size::MAX_FRAME_LIMIT;
use crate::handshake::{Hello, OLDEST_PROTOCOL, PROTOCOL_VERSION, speaks};
use crate::message::{Control, Event, Welcome};
use crate::transport::{FrameReader, FrameWriter, TransportError, split};
use crate::violation::ProtocolViolation;

/// Why a handshake failed, worded for the log line that ends the channel.
#[derive(Debug, Error)]
pub enum HandshakeError {
    /// The child's Hello names another protocol version (or its first frame
    /// only decodes as a Hello of another version).
    #[error(
        "the child speaks protocol {got}, this supervisor speaks {OLDEST_PROTOCOL} to {PROTOCOL_VERSION}: upgrade the child's wfhost library (or run a supervisor of its version)"
    )]
    ChildProtocol {
        /// The version the child announced.
        got: u32,
    },
    /// The supervisor's Welcome names another protocol version.
    #[error(
        "the supervisor's Welcome speaks protocol {got}, this child said it speaks {asked}: use a child library matching the supervisor"
    )]
    SupervisorProtocol {
        /// The version the Welcome announced.
        got: u32,
        /// The version the child's Hello announced.
        asked: u32,
    },
    /// The peer closed the channel before the handshake was over.
    #[error("channel closed before {before} ({hint})")]
    Closed {
        /// The message this end was waiting for.
        before: &'static str,
        /// Why it may not have come.
        hint: &'static str,
    },
    /// The peer sent another message than the handshake calls for.
    #[error("unexpected {got} while waiting for {expected}")]
    Unexpected {
        /// The message the handshake calls for.
        expected: &'static str,
        /// The message that came.
        got: &'static str,
    },
    /// The Hello does not fit this channel (another channel id, an
    /// oversized implementation name).
    #[error(transparent)]
    Hello(ProtocolViolation),
    /// The channel failed or carried a broken frame.
    #[error(transparent)]
    Transport(#[from] TransportError),
}

impl HandshakeError {
    /// Whether the child wrote something on its channel before the
    /// handshake failed (a Hello of another version, another channel id,
    /// a broken frame): it speaks the protocol, just not this one, so the
    /// advice is an upgrade, never "wrap it as a plain program".
    pub fn child_wrote(&self) -> bool {
        match self {
            Self::ChildProtocol { .. } | Self::Unexpected { .. } | Self::Hello(_) => true,
            Self::Transport(TransportError::Violation(_)) => true,
            Self::Closed { .. } | Self::Transport(TransportError::Io(_)) => false,
            Self::SupervisorProtocol { .. } => false,
        }
    }
}

/// The supervisor's end of one child's channel, minted with the channel id
/// the child must echo.
#[derive(Debug)]
pub struct SupervisorEnd {
    reader: FrameReader<Event>,
    writer: FrameWriter<Control>,
    channel_id: String,
}

impl SupervisorEnd {
    /// The supervisor's end of `stream` (inside a tokio runtime), for the
    /// spawn whose channel id is `channel_id`; frames in both directions are
    /// bounded by `max_frame_bytes`.
    pub fn new(stream: UnixStream, channel_id: impl Into<String>, max_frame_bytes: u32) -> Self {
        let (reader, writer) = split::<Event, Control>(stream, max_frame_bytes);
        Self {
            reader,
            writer,
            channel_id: channel_id.into(),
        }
    }

    /// The channel id the child must echo.
    pub fn channel_id(&self) -> &str {
        &self.channel_id
    }

    /// Reads the child's first frame, which must be a `Hello` (with
    /// sequence number 1) that passes [`Hello::check`] for this channel. A
    /// first frame that does not decode but begins like a Hello of another
    /// version is refused as [`HandshakeError::ChildProtocol`], so a child
    /// of protocol 1 is told so rather than "undecodable".
    pub async fn read_hello(&mut self) -> Result<Hello, HandshakeError> {
        let first = self.reader.next_explained(other_protocol_hello).await;
        let hello = match reset_as_end(first) {
            Ok(Some(Event::Hello(hello))) => hello,
            Ok(Some(other)) => {
                return Err(HandshakeError::Unexpected {
                    expected: "Hello",
                    got: other.name(),
                });
            }
            Ok(None) => {
                return Err(HandshakeError::Closed {
                    before: "Hello",
                    hint: "did the child start with its control channel at fd 3?",
                });
            }
            Err(TransportError::Violation(ProtocolViolation::UnsupportedProtocol {
                got, ..
            })) => return Err(HandshakeError::ChildProtocol { got }),
            Err(e) => return Err(e.into()),
        };
        match hello.check(&self.channel_id) {
            Ok(()) => Ok(hello),
            Err(ProtocolViolation::UnsupportedProtocol { got, .. }) => {
                Err(HandshakeError::ChildProtocol { got })
            }
            Err(v) => Err(HandshakeError::Hello(v)),
        }
    }

    /// Answers the Hello. `welcome.protocol` is sent as given (the kit sends
    /// other versions on purpose); a supervisor sets the Hello's version,
    /// which [`Hello::check`] has found it speaks.
    pub async fn welcome(&mut self, welcome: Welcome) -> Result<(), HandshakeError> {
        self.writer.send(Control::Welcome(welcome)).await?;
        Ok(())
    }

    /// Waits for the child's `Ready`, which must be its next frame.
    pub async fn await_ready(&mut self) -> Result<(), HandshakeError> {
        match reset_as_end(self.reader.next().await)? {
            Some(Event::Ready) => Ok(()),
            Some(other) => Err(HandshakeError::Unexpected {
                expected: "Ready",
                got: other.name(),
            }),
            None => Err(HandshakeError::Closed {
                before: "Ready",
                hint: "the child may have refused the Welcome",
            }),
        }
    }

    /// The reading half, for the events after the handshake.
    pub fn reader(&mut self) -> &mut FrameReader<Event> {
        &mut self.reader
    }

    /// The writing half, for the controls after the handshake.
    pub fn writer(&mut self) -> &mut FrameWriter<Control> {
        &mut self.writer
    }

    /// Both halves, to be driven separately once the child is ready.
    pub fn into_parts(self) -> (FrameReader<Event>, FrameWriter<Control>) {
        (self.reader, self.writer)
    }
}

/// A connection reset read as the end of stream it is: the peer closed its
/// end with frames of ours still unread (a child that refused the Welcome
/// and exited, say).
fn reset_as_end<T>(read: Result<Option<T>, TransportError>) -> Result<Option<T>, TransportError> {
    match read {
        Err(TransportError::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(None),
        other => other,
    }
}

/// The protocol violation for a first frame that does not decode but begins
/// like a `Hello` (sequence number, variant 0) of another version than this
/// side's, whose first field is its version in every version.
fn other_protocol_hello(body: &[u8]) -> Option<ProtocolViolation> {
    const HELLO_VARIANT: u32 = 0;
    let (_seq, variant, protocol) = codec::decode_prefix::<(u64, u32, u32)>(body)?;
    (variant == HELLO_VARIANT && !speaks(protocol)).then_some(
        ProtocolViolation::UnsupportedProtocol {
            got: protocol,
            supported: PROTOCOL_VERSION,
        },
    )
}

/// The child's end of its channel, before the handshake.
#[derive(Debug)]
pub struct ChildEnd {
    reader: FrameReader<Control>,
    writer: FrameWriter<Event>,
}

/// The child's channel after a Welcome of its protocol version: both
/// halves, now bounded by the Welcome's `max_frame_bytes`.
#[derive(Debug)]
pub struct Welcomed {
    /// The supervisor's Welcome.
    pub welcome: Welcome,
    /// Controls from the supervisor.
    pub reader: FrameReader<Control>,
    /// Events to the supervisor.
    pub writer: FrameWriter<Event>,
}

impl ChildEnd {
    /// The child's end of `stream` (inside a tokio runtime). Until the
    /// Welcome says otherwise, frames up to [`MAX_FRAME_LIMIT`] are read:
    /// the supervisor's configured limit is only known from it.
    pub fn new(stream: UnixStream) -> Self {
        let (reader, writer) = split::<Control, Event>(stream, MAX_FRAME_LIMIT as u32);
        Self { reader, writer }
    }

    /// Sends `hello` and waits for the Welcome; a Welcome of another
    /// protocol version than the Hello's is refused. From then on both directions are held
    /// to the Welcome's `max_frame_bytes`: a larger frame from the
    /// supervisor is a violation, a larger event is refused before sending.
    pub async fn handshake(mut self, hello: Hello) -> Result<Welcomed, HandshakeError> {
        let asked = hello.protocol;
        self.writer.send(Event::Hello(hello)).await?;
        let welcome = match self.reader.next().await? {
            Some(Control::Welcome(welcome)) => welcome,
            Some(other) => {
                return Err(HandshakeError::Unexpected {
                    expected: "Welcome",
                    got: other.name(),
                });
            }
            None => {
                return Err(HandshakeError::Closed {
                    before: "Welcome",
                    hint: "the supervisor closes it on a Hello of a wrong channel id or protocol",
                });
            }
        };
        if welcome.protocol != asked {
            return Err(HandshakeError::SupervisorProtocol {
                got: welcome.protocol,
                asked,
            });
        }
        let max = welcome.limits.max_frame_bytes;
        self.reader.set_max_frame_bytes(max);
        self.writer.set_max_frame_bytes(max);
        Ok(Welcomed {
            welcome,
            reader: self.reader,
            writer: self.writer,
        })
    }
}
