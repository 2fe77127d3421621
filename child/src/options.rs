//! The options an application connects with: what `Hello` tells the
//! supervisor. Apart from the runtime, so the handshake reads them without
//! reaching up into it.

use wfhost_ipc::PROTOCOL_VERSION;

/// What a child tells the supervisor about itself in `Hello`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Whether the application takes mail; when false the supervisor
    /// refuses `wfhost send` to the deployment instead of accepting mail
    /// nobody will process.
    pub takes_mail: bool,
    /// The implementation shown in `wfhost status`.
    pub implementation: String,
    /// The newest protocol version this child may speak: the newest this
    /// library speaks ([`PROTOCOL_VERSION`]) by default. `2` holds it to
    /// protocol 2 whatever the supervisor offers: it then behaves as a
    /// child built before version 3 (no `MailStarted`, `MailAck` without a
    /// result, no cancel of one item), which is what tests use to stand
    /// in for a child deployed before the supervisor was upgraded.
    pub newest_protocol: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            takes_mail: true,
            implementation: concat!("wfhost-child-rust/", env!("CARGO_PKG_VERSION")).to_owned(),
            newest_protocol: PROTOCOL_VERSION,
        }
    }
}

impl Options {
    /// These options, holding the child to protocol versions up to
    /// `newest` (see [`Self::newest_protocol`]).
    pub fn speaking_at_most(mut self, newest: u32) -> Self {
        self.newest_protocol = newest;
        self
    }
}
