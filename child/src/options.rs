//! The options an application connects with: what `Hello` tells the
//! supervisor. Apart from the runtime, so the handshake reads them without
//! reaching up into it.

/// What a child tells the supervisor about itself in `Hello`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Whether the application takes mail; when false the supervisor
    /// refuses `wfhost send` to the deployment instead of accepting mail
    /// nobody will process.
    pub takes_mail: bool,
    /// The implementation shown in `wfhost status`.
    pub implementation: String,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            takes_mail: true,
            implementation: concat!("wfhost-child-rust/", env!("CARGO_PKG_VERSION")).to_owned(),
        }
    }
}
