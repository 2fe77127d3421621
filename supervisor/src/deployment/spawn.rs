//! Spawning children from one dedicated, long-lived thread.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
//! so forking from a tokio worker (which may retire) would kill children at
//! random. Every fork happens on the `wfhost-spawner` thread, which lives as
//! long as the supervisor.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc;

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::sync::oneshot;
use wfhost_ipc::PROTOCOL_VERSION;
use wfhost_ipc::handshake::{
    CONTROL_FD, ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_SUPERVISOR_KEY,
};

use crate::config::DeploymentConfig;

/// PATH given to children that configure none (as systemd does).
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Everything needed to start one child, built before the fork so nothing
/// is allocated after it.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// Absolute path of the program.
    pub program: PathBuf,
    /// Arguments after the program.
    pub args: Vec<String>,
    /// The child's whole environment (configured plus `WFHOST_*`).
    pub env: Vec<(String, String)>,
    /// Run as this uid.
    pub uid: Option<u32>,
    /// Run as this gid.
    pub gid: Option<u32>,
    /// Working directory.
    pub working_dir: Option<PathBuf>,
}

/// A started child: the process, its control channel and its output.
#[derive(Debug)]
pub struct Spawned {
    /// The process; awaiting `wait()` reaps it.
    pub child: Child,
    /// Its pid (also its process group id).
    pub pid: u32,
    /// The supervisor's end of the control socketpair.
    pub control: tokio::net::UnixStream,
    /// The child's stdout.
    pub stdout: Option<ChildStdout>,
    /// The child's stderr.
    pub stderr: Option<ChildStderr>,
}

type Request = (ChildSpec, oneshot::Sender<io::Result<Spawned>>);

/// Handle to the spawner thread.
#[derive(Debug, Clone)]
pub struct Spawner {
    tx: mpsc::Sender<Request>,
}

/// The soft `RLIMIT_NOFILE` every child starts with, whatever the
/// supervisor raised its own to.
const CHILD_NOFILE_SOFT: libc::rlim_t = 1024;

impl Spawner {
    /// Starts the spawner thread; it registers children with `runtime` so
    /// they can be awaited there.
    pub fn start(runtime: tokio::runtime::Handle) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("wfhost-spawner".into())
            .spawn(move || {
                let _enter = runtime.enter();
                for (spec, reply) in rx {
                    let _ = reply.send(spawn_one(&spec));
                }
            })?;
        Ok(Self { tx })
    }

    /// Spawns a child on the spawner thread.
    pub async fn spawn(&self, spec: ChildSpec) -> io::Result<Spawned> {
        let (reply, rx) = oneshot::channel();
        let gone = || io::Error::other("the spawner thread has stopped");
        self.tx.send((spec, reply)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}

/// The child's environment: configured variables, a default PATH, then the
/// `WFHOST_*` contract (which configuration cannot override).
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
    env.push((ENV_PROTOCOL.into(), PROTOCOL_VERSION.to_string()));
    env.push((ENV_DEPLOYMENT.into(), cfg.id.clone()));
    env.push((ENV_SUPERVISOR_KEY.into(), public_key.into()));
    ChildSpec {
        program: cfg.command[0].clone().into(),
        args: cfg.command[1..].to_vec(),
        env,
        uid: cfg.uid,
        gid: cfg.gid,
        working_dir: cfg.working_dir.clone(),
    }
}

/// Forks and execs one child with the child end of a fresh socketpair at
/// fd 3 and nothing else inherited beyond 0–2.
fn spawn_one(spec: &ChildSpec) -> io::Result<Spawned> {
    let (ours, theirs): (OwnedFd, OwnedFd) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(io::Error::from)?;

    let mut cmd = Command::new(&spec.program);
    cmd.args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(false);
    if let Some(uid) = spec.uid {
        cmd.uid(uid);
    }
    if let Some(gid) = spec.gid {
        cmd.gid(gid);
    }
    if let Some(dir) = &spec.working_dir {
        cmd.current_dir(dir);
    }

    // Everything the pre-exec hook needs is captured as plain integers.
    let parent = std::process::id() as libc::pid_t;
    let theirs_fd = theirs.as_raw_fd();
    let nofile_hard = nofile_limit()?.rlim_max;
    // SAFETY: the hook makes only async-signal-safe libc calls on integers
    // captured above: no allocation, no locks, no logging.
    unsafe {
        cmd.pre_exec(move || child_setup(parent, theirs_fd, nofile_hard));
    }

    let mut child = cmd.spawn()?;
    // Drop our copy of the child's end, or we would never see its EOF.
    drop(theirs);
    let Some(pid) = child.id() else {
        return Err(io::Error::other(
            "child exited before its pid could be read",
        ));
    };
    let std_stream = std::os::unix::net::UnixStream::from(ours);
    std_stream.set_nonblocking(true)?;
    let control = tokio::net::UnixStream::from_std(std_stream)?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    Ok(Spawned {
        child,
        pid,
        control,
        stdout,
        stderr,
    })
}

/// Runs in the child between fork and exec. Async-signal-safe only.
fn child_setup(parent: libc::pid_t, theirs_fd: i32, nofile_hard: libc::rlim_t) -> io::Result<()> {
    // SAFETY: raw syscalls on integers; each result is checked.
    unsafe {
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        // The supervisor may have died before the death signal was armed.
        if libc::getppid() != parent {
            libc::_exit(1);
        }
        if theirs_fd == CONTROL_FD {
            // dup2 onto itself is a no-op that leaves close-on-exec set.
            if libc::fcntl(CONTROL_FD, libc::F_SETFD, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
        } else if libc::dup2(theirs_fd, CONTROL_FD) < 0 {
            return Err(io::Error::last_os_error());
        }
        // Mark every fd above 3 close-on-exec (not closed now: the runtime's
        // exec-error pipe must survive until exec).
        let first = (CONTROL_FD + 1) as libc::c_uint;
        if libc::syscall(
            libc::SYS_close_range,
            first,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        ) != 0
        {
            return Err(io::Error::last_os_error());
        }
        let limit = libc::rlimit {
            rlim_cur: CHILD_NOFILE_SOFT.min(nofile_hard),
            rlim_max: nofile_hard,
        };
        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

fn nofile_limit() -> io::Result<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(limit)
}

/// Raises the supervisor's soft `RLIMIT_NOFILE` to its hard limit: each
/// child costs several fds and a thousand children pass the default 1,024.
/// Returns the new soft limit.
pub fn raise_nofile_limit() -> io::Result<u64> {
    let mut limit = nofile_limit()?;
    if limit.rlim_cur < limit.rlim_max {
        limit.rlim_cur = limit.rlim_max;
        // SAFETY: setrlimit reads the struct we own.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(limit.rlim_cur)
}
