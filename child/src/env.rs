//! The environment through which the supervisor tells a child how to reach
//! it: which fd, which channel, which protocol, which deployment, which key.

use std::os::fd::RawFd;

use ed25519_dalek::VerifyingKey;
use thiserror::Error;
use wfhost_ipc::handshake::{
    ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{PROTOCOL_VERSION, key};

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
}

/// Everything a child learns from its `WFHOST_*` environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildEnv {
    /// The inherited fd of the control channel (normally 3).
    pub control_fd: RawFd,
    /// This spawn's channel id, echoed in `Hello`.
    pub channel_id: String,
    /// The protocol version the supervisor speaks.
    pub protocol: u32,
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

        let proto_text = get(ENV_PROTOCOL)?;
        let protocol = proto_text.trim().parse::<u32>().map_err(|e| {
            invalid(
                ENV_PROTOCOL,
                &proto_text,
                format!("not a version number ({e})"),
            )
        })?;
        if protocol != PROTOCOL_VERSION {
            return Err(invalid(
                ENV_PROTOCOL,
                &proto_text,
                format!(
                    "this child speaks protocol {PROTOCOL_VERSION}; upgrade the child or the supervisor so they match"
                ),
            ));
        }

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
            deployment,
            supervisor_key,
        })
    }
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
        assert_eq!(env.protocol, 2);
    }

    #[test]
    fn names_each_missing_variable() {
        for var in wfhost_ipc::handshake::ENV_ALL {
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
            (ENV_PROTOCOL, "1"),
            (ENV_PROTOCOL, "3"),
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
