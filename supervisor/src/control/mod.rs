//! The control socket: the protocol (`docs/control.md`), the supervisor's
//! server with one handler per request, and the CLI's client.

pub mod client;
pub(crate) mod handlers;
pub mod protocol;
pub mod server;
