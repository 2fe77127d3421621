//! Starting a child as the supervisor does: a fresh socketpair whose child
//! end lands at fd 3, the environment given and nothing else, stdin from
//! `/dev/null`, stdout and stderr piped back, its own process group and the
//! parent-death signal.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits,
//! so forking from a tokio worker (which may retire) would kill children at
//! random. [`Spawner`] forks every child on dedicated threads that live
//! as long as the process (two, so one child's fork-to-exec, which the
//! forking thread waits out, overlaps the next one's);
//! [`spawn_with_channel`] forks on the calling thread, for callers whose
//! thread outlives the child (a `main` thread running a current-thread
//! runtime).
//!
//! The spawner also remembers which of this process's children it forked,
//! so a subreaper can tell the orphans it adopted ([`Spawner::adopted`])
//! from the children the runtime reaps.

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, RwLock, mpsc};

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use tokio::net::UnixStream;
use tokio::process::{Child, ChildStderr, ChildStdout, Command};
use tokio::sync::oneshot;

use crate::orphans::own_children;
use crate::rlimits::Rlimits;
use crate::setup::ChildSetup;

/// Everything needed to start one child, built before the fork so nothing
/// is allocated after it.
#[derive(Debug, Clone)]
pub struct ChildSpec {
    /// The program: a path, or a name looked up in the `PATH` of `env`.
    pub program: PathBuf,
    /// Arguments after the program.
    pub args: Vec<OsString>,
    /// The child's whole environment (nothing is inherited).
    pub env: Vec<(OsString, OsString)>,
    /// Run as this uid.
    pub uid: Option<u32>,
    /// Run as this gid.
    pub gid: Option<u32>,
    /// Working directory.
    pub working_dir: Option<PathBuf>,
    /// The `cgroup.procs` of the cgroup the child starts in
    /// ([`Cgroup::procs_for_spawn`](crate::Cgroup::procs_for_spawn)).
    pub cgroup_procs: Option<Arc<File>>,
    /// Resource limits set before it runs its program (already
    /// [`fitted`](Rlimits::fitted)).
    pub rlimits: Rlimits,
}

impl ChildSpec {
    /// A spec for `program` with `args` and an empty environment.
    pub fn new(program: impl Into<PathBuf>, args: impl IntoIterator<Item = OsString>) -> Self {
        Self {
            program: program.into(),
            args: args.into_iter().collect(),
            env: Vec::new(),
            uid: None,
            gid: None,
            working_dir: None,
            cgroup_procs: None,
            rlimits: Rlimits::default(),
        }
    }
}

/// A started child: the process, its control channel and its output.
#[derive(Debug)]
pub struct Spawned {
    /// The process; awaiting `wait()` reaps it.
    pub child: Child,
    /// Its pid, which is also its process group id.
    pub pid: u32,
    /// This side's end of the control socketpair.
    pub control: UnixStream,
    /// The child's stdout.
    pub stdout: Option<ChildStdout>,
    /// The child's stderr.
    pub stderr: Option<ChildStderr>,
}

/// Forks and execs one child on the calling thread, with the child end of
/// a fresh socketpair at fd 3 and nothing else inherited beyond 0–2. Must
/// be called inside a tokio runtime (the child is reaped through it), from
/// a thread that outlives the child (see the module docs).
pub fn spawn_with_channel(spec: &ChildSpec) -> io::Result<Spawned> {
    // Close-on-exec from birth: another thread may fork at this moment.
    let (ours, theirs): (OwnedFd, OwnedFd) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .map_err(|e| io::Error::other(format!("cannot create the control socketpair: {e}")))?;

    let mut std_cmd = std::process::Command::new(&spec.program);
    std_cmd
        .args(&spec.args)
        .env_clear()
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(uid) = spec.uid {
        std::os::unix::process::CommandExt::uid(&mut std_cmd, uid);
    }
    if let Some(gid) = spec.gid {
        std::os::unix::process::CommandExt::gid(&mut std_cmd, gid);
    }
    if let Some(dir) = &spec.working_dir {
        std_cmd.current_dir(dir);
    }
    let mut setup = ChildSetup::new()?
        .control_fd(theirs.as_raw_fd())
        .rlimits(spec.rlimits);
    if let Some(procs) = &spec.cgroup_procs {
        setup = setup.cgroup(procs.as_raw_fd());
    }
    setup.install(&mut std_cmd);
    let mut cmd = Command::from(std_cmd);
    cmd.kill_on_drop(false);

    let mut child = cmd.spawn()?;
    // Drop our copy of the child's end, or we would never see its EOF.
    drop(theirs);
    let Some(pid) = child.id() else {
        return Err(io::Error::other(
            "the child exited before its pid could be read",
        ));
    };
    let std_stream = std::os::unix::net::UnixStream::from(ours);
    std_stream.set_nonblocking(true)?;
    let control = UnixStream::from_std(std_stream)?;
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

type Request = (ChildSpec, oneshot::Sender<io::Result<Spawned>>);

/// Threads that fork children.
const SPAWNER_THREADS: usize = 2;

/// Handle to the spawner threads, which fork every child.
#[derive(Debug, Clone)]
pub struct Spawner {
    tx: mpsc::Sender<Request>,
    /// Pids of the children it forked that have not been
    /// [`released`](Spawner::released).
    spawned: Arc<Mutex<HashSet<u32>>>,
    /// Held shared across each fork until its pid is in `spawned`, and
    /// exclusively by [`Spawner::adopted`], so a reader never sees a fresh
    /// child it does not know yet.
    forking: Arc<RwLock<()>>,
}

impl Spawner {
    /// Starts the spawner threads; they register children with `runtime`
    /// so they can be awaited there.
    pub fn start(runtime: tokio::runtime::Handle) -> io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Request>();
        let rx = Arc::new(Mutex::new(rx));
        let spawned: Arc<Mutex<HashSet<u32>>> = Arc::default();
        let forking: Arc<RwLock<()>> = Arc::default();
        for n in 0..SPAWNER_THREADS {
            let (rx, known, gate) = (rx.clone(), spawned.clone(), forking.clone());
            let runtime = runtime.clone();
            std::thread::Builder::new()
                .name(format!("wfhost-spawner-{n}"))
                .spawn(move || {
                    let _enter = runtime.enter();
                    loop {
                        let next = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                        let Ok((spec, reply)) = next else { return };
                        let open = gate.read().unwrap_or_else(|p| p.into_inner());
                        let result = spawn_with_channel(&spec);
                        if let Ok(s) = &result {
                            known
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .insert(s.pid);
                        }
                        drop(open);
                        let _ = reply.send(result);
                    }
                })?;
        }
        Ok(Self {
            tx,
            spawned,
            forking,
        })
    }

    /// This process's children that the spawner did not fork: orphans a
    /// subreaper adopted (zombies included), never a child the runtime
    /// is waiting for.
    pub fn adopted(&self) -> Vec<u32> {
        let _no_fork = self.forking.write().unwrap_or_else(|p| p.into_inner());
        let known = self.spawned.lock().unwrap_or_else(|p| p.into_inner());
        let mut children = own_children();
        children.retain(|pid| !known.contains(pid));
        children
    }

    /// Forgets child `pid` once it has been reaped (its pid may be reused).
    pub fn released(&self, pid: u32) {
        self.spawned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&pid);
    }

    /// Spawns a child on a spawner thread.
    pub async fn spawn(&self, spec: ChildSpec) -> io::Result<Spawned> {
        let (reply, rx) = oneshot::channel();
        let gone = || io::Error::other("the spawner thread has stopped");
        self.tx.send((spec, reply)).map_err(|_| gone())?;
        rx.await.map_err(|_| gone())?
    }
}
