//! The environment through which the supervisor tells a child how to reach
//! it: which fd, which channel, which protocols, which deployment, which
//! key.
//!
//! The supervisor speaks the versions from `WFHOST_PROTOCOL` to
//! `WFHOST_PROTOCOL_MAX` (`WFHOST_PROTOCOL` alone when the second is absent,
//! as from a supervisor of version 2); the child speaks the newest of them
//! it implements, and refuses to start, naming both variables, when there
//! is none (docs/protocol.md §1).

use std::ops::RangeInclusive;
use std::os::fd::RawFd;

use ed25519_dalek::VerifyingKey;
use thiserror::Error;
use wfhost_ipc::handshake::{
    ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_PROTOCOL_MAX,
    ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{OLDEST_PROTOCOL, PROTOCOL_VERSION, key};

/// A `WFHOST_*` variable that is missing or unusable.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum EnvError {
    /// The variable is not set at all: the process was not started by wfhost.
    #[error(
        "{var} is not set: this process must be started by the wfhost supervisor (`wfhost supervise`), which passes the control channel"
    )]
    Missing {
        /// The variable's name.
        var: &'static str,
    },
    /// The variable is set but its value cannot be used.
    #[error(
        "{var}={value:?} is unusable: {reason}; it is set by `wfhost supervise`, do not set it by hand"
    )]
    Invalid {
        /// The variable's name.
        var: &'static str,
        /// The value found.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The supervisor speaks no protocol version this child speaks.
    #[error(
        "{ENV_PROTOCOL}={min} and {max_text} leave no protocol version this child speaks (it speaks {oldest} to {newest}); upgrade the child or the supervisor so they share one",
        max_text = max.map_or_else(|| format!("no {ENV_PROTOCOL_MAX}"), |m| format!("{ENV_PROTOCOL_MAX}={m}"))
    )]
    NoCommonProtocol {
        /// `WFHOST_PROTOCOL`: the oldest version the supervisor speaks.
        min: u32,
        /// `WFHOST_PROTOCOL_MAX`, when set: the newest it speaks.
        max: Option<u32>,
        /// The oldest version this child speaks.
        oldest: u32,
        /// The newest version this child speaks.
        newest: u32,
    },
}

/// Everything a child learns from its `WFHOST_*` environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildEnv {
    /// The inherited fd of the control channel (normally 3).
    pub control_fd: RawFd,
    /// This spawn's channel id, echoed in `Hello`.
    pub channel_id: String,
    /// The protocol version this child speaks with the supervisor (says in
    /// `Hello`): the newest one both speak.
    pub protocol: u32,
    /// The versions the supervisor speaks: `WFHOST_PROTOCOL` to
    /// `WFHOST_PROTOCOL_MAX` (or `WFHOST_PROTOCOL` alone).
    pub supervisor_protocols: RangeInclusive<u32>,
    /// The deployment this child serves; cancels naming another are refused.
    pub deployment: String,
    /// The key that must have signed every cancel this child obeys.
    pub supervisor_key: VerifyingKey,
}

impl ChildEnv {
    /// Reads the `WFHOST_*` variables of this process.
    pub fn from_env() -> Result<Self, EnvError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `lookup`, so the parsing can be tested
    /// without touching the process environment.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, EnvError> {
        let get = |var: &'static str| lookup(var).ok_or(EnvError::Missing { var });
        let invalid = |var: &'static str, value: &str, reason: String| EnvError::Invalid {
            var,
            value: value.to_owned(),
            reason,
        };

        let fd_text = get(ENV_CONTROL_FD)?;
        let control_fd = fd_text
            .trim()
            .parse::<RawFd>()
            .ok()
            .filter(|fd| *fd > 2)
            .ok_or_else(|| {
                invalid(
                    ENV_CONTROL_FD,
                    &fd_text,
                    "expected an fd number above 2".into(),
                )
            })?;

        let channel_id = get(ENV_CHANNEL_ID)?;
        if channel_id.len() != 32 || !channel_id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(invalid(
                ENV_CHANNEL_ID,
                &channel_id,
                "expected 32 hex characters".into(),
            ));
        }

        let version = |var: &'static str, text: &str| {
            text.trim()
                .parse::<u32>()
                .map_err(|e| invalid(var, text, format!("not a version number ({e})")))
        };
        let min_text = get(ENV_PROTOCOL)?;
        let min = version(ENV_PROTOCOL, &min_text)?;
        let max = match lookup(ENV_PROTOCOL_MAX) {
            Some(text) => {
                let max = version(ENV_PROTOCOL_MAX, &text)?;
                if max < min {
                    return Err(invalid(
                        ENV_PROTOCOL_MAX,
                        &text,
                        format!("below {ENV_PROTOCOL}={min}"),
                    ));
                }
                Some(max)
            }
            None => None,
        };
        let supervisor_protocols = min..=max.unwrap_or(min);
        let protocol = newest_shared(min, max, PROTOCOL_VERSION)?;

        let deployment = get(ENV_DEPLOYMENT)?;
        if deployment.trim().is_empty() {
            return Err(invalid(
                ENV_DEPLOYMENT,
                &deployment,
                "the deployment id is empty".into(),
            ));
        }

        let key_text = get(ENV_SUPERVISOR_KEY)?;
        let supervisor_key = key::public_from_hex(&key_text)
            .map_err(|e| invalid(ENV_SUPERVISOR_KEY, &key_text, e.to_string()))?;

        Ok(Self {
            control_fd,
            channel_id,
            protocol,
            supervisor_protocols,
            deployment,
            supervisor_key,
        })
    }

    /// This environment for a child that speaks no version newer than
    /// `newest` (a child held to protocol 2, say) nor than
    /// [`Self::protocol`]: the newest such version it shares with the
    /// supervisor, or why there is none.
    pub fn speaking_at_most(mut self, newest: u32) -> Result<Self, EnvError> {
        let newest = newest.min(self.protocol);
        let (min, max) = (
            *self.supervisor_protocols.start(),
            *self.supervisor_protocols.end(),
        );
        self.protocol = newest_shared(min, (max != min).then_some(max), newest)?;
        Ok(self)
    }
}

/// The newest version from `min` to `max` (`min` alone without it) that
/// this crate speaks and that is at most `newest`.
fn newest_shared(min: u32, max: Option<u32>, newest: u32) -> Result<u32, EnvError> {
    let newest = newest.min(PROTOCOL_VERSION);
    let top = max.unwrap_or(min).min(newest);
    if top >= OLDEST_PROTOCOL && top >= min {
        return Ok(top);
    }
    Err(EnvError::NoCommonProtocol {
        min,
        max,
        oldest: OLDEST_PROTOCOL,
        newest,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn full() -> HashMap<&'static str, String> {
        let key = key::generate().unwrap();
        HashMap::from([
            (ENV_CONTROL_FD, "3".to_owned()),
            (
                ENV_CHANNEL_ID,
                "0123456789abcdef0123456789abcdef".to_owned(),
            ),
            (ENV_PROTOCOL, "2".to_owned()),
            (ENV_PROTOCOL_MAX, "3".to_owned()),
            (ENV_DEPLOYMENT, "billing".to_owned()),
            (ENV_SUPERVISOR_KEY, key::public_hex(&key.verifying_key())),
        ])
    }

    fn parse(vars: &HashMap<&'static str, String>) -> Result<ChildEnv, EnvError> {
        ChildEnv::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn parses_a_complete_environment() {
        let env = parse(&full()).unwrap();
        assert_eq!(env.control_fd, 3);
        assert_eq!(env.deployment, "billing");
        assert_eq!(env.protocol, 3, "the newest version both speak");
        assert_eq!(env.supervisor_protocols, 2..=3);
    }

    #[test]
    fn negotiates_the_newest_shared_version() {
        for (min, max, speaks) in [
            ("2", None, 2),
            ("2", Some("3"), 3),
            ("2", Some("2"), 2),
            ("3", None, 3),
            ("2", Some("9"), 3),
            ("3", Some("4"), 3),
        ] {
            let mut vars = full();
            vars.insert(ENV_PROTOCOL, min.to_owned());
            match max {
                Some(max) => vars.insert(ENV_PROTOCOL_MAX, max.to_owned()),
                None => vars.remove(ENV_PROTOCOL_MAX),
            };
            let env = parse(&vars).unwrap();
            assert_eq!(env.protocol, speaks, "{min}..{max:?}");
        }
    }

    #[test]
    fn a_child_held_to_protocol_2_speaks_2_where_the_supervisor_does() {
        let env = parse(&full()).unwrap().speaking_at_most(2).unwrap();
        assert_eq!(env.protocol, 2);
        let mut vars = full();
        vars.insert(ENV_PROTOCOL, "3".to_owned());
        let err = parse(&vars).unwrap().speaking_at_most(2).unwrap_err();
        assert!(matches!(err, EnvError::NoCommonProtocol { .. }), "{err}");
    }

    #[test]
    fn no_shared_version_is_refused_naming_both_variables() {
        for (min, max) in [("1", None), ("1", Some("1")), ("4", None), ("4", Some("5"))] {
            let mut vars = full();
            vars.insert(ENV_PROTOCOL, min.to_owned());
            match max {
                Some(max) => vars.insert(ENV_PROTOCOL_MAX, max.to_owned()),
                None => vars.remove(ENV_PROTOCOL_MAX),
            };
            let err = parse(&vars).unwrap_err();
            assert!(matches!(err, EnvError::NoCommonProtocol { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.contains(ENV_PROTOCOL) && text.contains(ENV_PROTOCOL_MAX),
                "{text}"
            );
        }
    }

    #[test]
    fn names_each_missing_variable() {
        // WFHOST_PROTOCOL_MAX may be missing: a supervisor of version 2.
        for var in wfhost_ipc::handshake::ENV_ALL
            .into_iter()
            .filter(|v| *v != ENV_PROTOCOL_MAX)
        {
            let mut vars = full();
            vars.remove(var);
            let err = parse(&vars).unwrap_err();
            assert_eq!(err, EnvError::Missing { var });
            let text = err.to_string();
            assert!(
                text.contains(var) && text.contains("wfhost supervise"),
                "{text}"
            );
        }
    }

    #[test]
    fn refuses_bad_values_naming_the_variable() {
        for (var, value) in [
            (ENV_CONTROL_FD, "x"),
            (ENV_CONTROL_FD, "1"),
            (ENV_CHANNEL_ID, "short"),
            (ENV_CHANNEL_ID, "zz23456789abcdef0123456789abcdef"),
            (ENV_PROTOCOL, "two"),
            (ENV_PROTOCOL_MAX, "three"),
            (ENV_PROTOCOL_MAX, "1"),
            (ENV_DEPLOYMENT, " "),
            (ENV_SUPERVISOR_KEY, "abcd"),
        ] {
            let mut vars = full();
            vars.insert(var, value.to_owned());
            match parse(&vars) {
                Err(EnvError::Invalid { var: got, .. }) => assert_eq!(got, var, "{value}"),
                other => panic!("{var}={value}: {other:?}"),
            }
        }
    }
}
