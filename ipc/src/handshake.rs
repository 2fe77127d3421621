//! The handshake: the child's `Hello`, and the environment through which it
//! learns how to reach the supervisor.

use serde::{Deserialize, Serialize};

use crate::violation::ProtocolViolation;

/// The newest protocol version this crate speaks.
pub const PROTOCOL_VERSION: u32 = 3;

/// The oldest protocol version this crate still speaks: a supervisor
/// keeps hosting the children deployed before it was upgraded.
pub const OLDEST_PROTOCOL: u32 = 2;

/// Whether this crate speaks protocol `version`.
pub fn speaks(version: u32) -> bool {
    (OLDEST_PROTOCOL..=PROTOCOL_VERSION).contains(&version)
}

/// Longest `implementation` a Hello may carry, in bytes.
pub const MAX_IMPLEMENTATION_BYTES: usize = 128;

/// The fd at which a child finds its control channel.
pub const CONTROL_FD: i32 = 3;

/// Environment variable: fd number of the control channel.
pub const ENV_CONTROL_FD: &str = "WFHOST_CONTROL_FD";
/// Environment variable: this spawn's channel id (32 hex chars).
pub const ENV_CHANNEL_ID: &str = "WFHOST_CHANNEL_ID";
/// Environment variable: the oldest protocol version the supervisor
/// speaks (`2`: what a protocol-2 child checks it can speak).
pub const ENV_PROTOCOL: &str = "WFHOST_PROTOCOL";
/// Environment variable: the newest protocol version the supervisor
/// speaks (`3`; absent from supervisors that speak only 2). A child
/// speaks the newest version both sides know.
pub const ENV_PROTOCOL_MAX: &str = "WFHOST_PROTOCOL_MAX";
/// Environment variable: the deployment id.
pub const ENV_DEPLOYMENT: &str = "WFHOST_DEPLOYMENT";
/// Environment variable: hex ed25519 public key that signs cancels.
pub const ENV_SUPERVISOR_KEY: &str = "WFHOST_SUPERVISOR_KEY";

/// Every `WFHOST_*` variable of the contract: what a child must not pass
/// on to the programs it starts.
pub const ENV_ALL: [&str; 6] = [
    ENV_CONTROL_FD,
    ENV_CHANNEL_ID,
    ENV_PROTOCOL,
    ENV_PROTOCOL_MAX,
    ENV_DEPLOYMENT,
    ENV_SUPERVISOR_KEY,
];

/// The child's first frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The protocol version the child speaks.
    pub protocol: u32,
    /// The channel id from the child's environment.
    pub channel_id: String,
    /// The child's pid, as it sees itself.
    pub pid: u32,
    /// Whether the child takes mail: the supervisor refuses `wfhost send`
    /// to a deployment whose child does not.
    pub takes_mail: bool,
    /// Who implements the child side, e.g. `wfhost-child-rust/0.1.0` or
    /// `@wfhost/child/0.1.0` (shown in status); at most
    /// [`MAX_IMPLEMENTATION_BYTES`].
    pub implementation: String,
}

impl Hello {
    /// Checks a Hello against the channel the supervisor minted for this
    /// spawn; a stale or foreign child is a violation.
    pub fn check(&self, expected_channel: &str) -> Result<(), ProtocolViolation> {
        if !speaks(self.protocol) {
            return Err(ProtocolViolation::UnsupportedProtocol {
                got: self.protocol,
                supported: PROTOCOL_VERSION,
            });
        }
        if self.implementation.len() > MAX_IMPLEMENTATION_BYTES {
            return Err(ProtocolViolation::Unexpected {
                message: format!(
                    "Hello with an implementation name of {} bytes (at most {MAX_IMPLEMENTATION_BYTES})",
                    self.implementation.len()
                ),
                state: "starting".into(),
            });
        }
        if self.channel_id != expected_channel {
            return Err(ProtocolViolation::WrongChannel {
                expected: expected_channel.to_owned(),
                got: self.channel_id.clone(),
            });
        }
        Ok(())
    }
}

/// Mints a fresh channel id: 16 random bytes as 32 hex chars.
pub fn new_channel_id() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)?;
    Ok(hex::encode(bytes))
}
