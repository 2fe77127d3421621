//! A child's environment and the spawner that starts it (the plumbing is
//! `wfhost-process`, shared with `wfhost-child exec` and the conformance
//! kit, so every child anywhere is started the same way).

use std::ffi::OsString;

use wfhost_ipc::handshake::{
    CONTROL_FD, ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_PROTOCOL_MAX,
    ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{OLDEST_PROTOCOL, PROTOCOL_VERSION};
pub use wfhost_process::{ChildSpec, Spawned, Spawner};

use crate::config::DeploymentConfig;

/// PATH given to children that configure none (as systemd does).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The child's environment: configured variables, a default PATH, then the
/// `WFHOST_*` contract (which configuration cannot override) and its
/// origin, which every process it starts inherits, so one that escapes it
/// is still known to be its ([`wfhost_process::ENV_ORIGIN`]). Where it
/// starts and its rlimits are its enclosure's to fill in.
pub fn child_spec(cfg: &DeploymentConfig, channel_id: &str, public_key: &str) -> ChildSpec {
    let mut env: Vec<(String, String)> = cfg
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !cfg.env.contains_key("PATH") {
        env.push(("PATH".into(), DEFAULT_PATH.into()));
    }
    env.push((ENV_CONTROL_FD.into(), CONTROL_FD.to_string()));
    env.push((ENV_CHANNEL_ID.into(), channel_id.into()));
    // The oldest version first: a child of that version checks it alone.
    env.push((ENV_PROTOCOL.into(), OLDEST_PROTOCOL.to_string()));
    env.push((ENV_PROTOCOL_MAX.into(), PROTOCOL_VERSION.to_string()));
    env.push((ENV_DEPLOYMENT.into(), cfg.id.clone()));
    env.push((ENV_SUPERVISOR_KEY.into(), public_key.into()));
    env.push((wfhost_process::ENV_ORIGIN.into(), channel_id.into()));
    let (program, args) = match cfg.command.split_first() {
        Some((program, args)) => (program.as_str(), args),
        None => ("", &[][..]),
    };
    ChildSpec {
        program: program.into(),
        args: args.iter().map(OsString::from).collect(),
        env: env
            .into_iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect(),
        uid: cfg.uid,
        gid: cfg.gid,
        working_dir: cfg.working_dir.clone(),
        cgroup_procs: None,
        rlimits: Default::default(),
    }
}
