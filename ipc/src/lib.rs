//! The wfhost wire protocol: everything that crosses the socketpair between
//! the supervisor and a workflow child, and the signed records the supervisor
//! issues. No processes, no files: bytes in, typed values out.

pub mod cancel;
pub mod channel;
mod codec;
pub mod frame;
mod frame_size;
pub mod handshake;
pub mod key;
pub mod message;
pub mod signed;
pub mod transport;
pub mod violation;

pub use cancel::{
    CancelOrigin, CancelRefused, CancelRequested, MailCancelRequested, SignedCancel,
    SignedMailCancel,
};
pub use channel::{ChildEnd, HandshakeError, SupervisorEnd, Welcomed};
pub use frame::{
    DEFAULT_MAX_FRAME_BYTES, Frame, FrameDecoder, MAX_FRAME_LIMIT, SeqTracker, encode_frame,
};
pub use handshake::{Hello, OLDEST_PROTOCOL, PROTOCOL_VERSION, new_channel_id, speaks};
pub use key::KeyId;
pub use message::{CancelVerdict, Control, DrainBehavior, Event, Grants, Limits, Outcome, Welcome};
pub use signed::{Signable, SignatureError, Signed};
pub use transport::{FrameReader, FrameWriter, TransportError, split};
pub use violation::ProtocolViolation;
