//! The control socket: the protocol (`docs/control.md`), the supervisor's
//! server with one handler per request, the requests only its control
//! loop carries out (reload, stop), and the CLI's client.

pub mod admission;
pub mod budget;
pub mod client;
pub mod forward;
pub mod forwarded;
pub(crate) mod handlers;
pub mod host;
pub mod protocol;
pub mod server;
