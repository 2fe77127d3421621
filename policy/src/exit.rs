//! How a child ended: its exit status as an operator reads it, and the
//! typed cause the machine gives its end (for facts, status and metrics).

/// How a process ended, in the terms an operator reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExitStatus {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
    /// Neither could be read.
    Unknown,
}

impl ExitStatus {
    /// "exit status 3" or "killed by signal 9 (SIGKILL)".
    pub fn describe(self) -> String {
        match self {
            Self::Code(code) => format!("exit status {code}"),
            Self::Signal(sig) => match signal_name(sig) {
                Some(name) => format!("killed by signal {sig} ({name})"),
                None => format!("killed by signal {sig}"),
            },
            Self::Unknown => "unknown exit status".to_owned(),
        }
    }
}

fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// Why a child's wiring ended: an operator kill is not a crash, and a
/// stop is not an exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitCause {
    /// It could not be started at all.
    SpawnFailed(String),
    /// It exited without being asked to.
    Exited(ExitStatus),
    /// It broke the protocol and was killed.
    Violation(String),
    /// It stopped answering pings (or reading its channel) and was killed.
    Hung,
    /// It sent no `Ready` within `ready_timeout` and was killed.
    NotReady,
    /// An operator killed it (`wfhost kill`).
    Killed,
    /// The supervisor stopped it (a stop of a starting child, or a drain
    /// that passed its `drain_deadline`).
    Stopped(ExitStatus),
    /// It drained: it reported `Drained` and was stopped, or exited by
    /// itself while it was draining. The end every drain asks for.
    Drained(ExitStatus),
    /// It ended (exited, broke the handshake, or ran out of
    /// `ready_timeout`) without ever sending its Hello on fd 3: most likely
    /// a program that does not speak the wfhost protocol at all.
    Silent(Box<ExitCause>),
}

impl ExitCause {
    /// One line for logs, status and the journal.
    pub fn describe(&self) -> String {
        match self {
            Self::SpawnFailed(e) => format!("spawn failed: {e}"),
            Self::Exited(s) => format!("exited unexpectedly: {}", s.describe()),
            Self::Violation(v) => format!("protocol violation: {v}"),
            Self::Hung => "hung: no pong (or no reading) within liveness_timeout".to_owned(),
            Self::NotReady => "no Ready within ready_timeout".to_owned(),
            Self::Killed => "killed by an operator".to_owned(),
            Self::Stopped(s) => format!("stopped: {}", s.describe()),
            // SIGTERM (or 128+15, as a wrapper passes it on) is how a
            // drained child is stopped: nothing more to say.
            Self::Drained(ExitStatus::Code(0 | 143) | ExitStatus::Signal(15)) => {
                "drained".to_owned()
            }
            Self::Drained(s) => format!("drained ({})", s.describe()),
            Self::Silent(inner) => format!(
                "{}; it never sent a Hello on fd 3, so it does not speak the wfhost protocol: run a plain \
                 program as command = [\"wfhost-child\", \"exec\", \"--\", PROGRAM, ARGS…], or build it on a \
                 wfhost SDK (Rust, TypeScript, Python)",
                inner.describe()
            ),
        }
    }

    /// A few words for a table column: "drained", "crashed: exit 3",
    /// "not a wfhost child"; [`Self::describe`] has the whole of it.
    pub fn brief(&self) -> String {
        let status = |s: &ExitStatus| match *s {
            ExitStatus::Code(code) => format!("exit {code}"),
            ExitStatus::Signal(sig) => {
                signal_name(sig).map_or_else(|| format!("signal {sig}"), str::to_owned)
            }
            ExitStatus::Unknown => "unknown status".to_owned(),
        };
        match self {
            Self::SpawnFailed(_) => "spawn failed".to_owned(),
            Self::Exited(s) => format!("crashed: {}", status(s)),
            Self::Violation(_) => "protocol violation".to_owned(),
            Self::Hung => "hung".to_owned(),
            Self::NotReady => "not ready in time".to_owned(),
            Self::Killed => "killed by operator".to_owned(),
            Self::Stopped(ExitStatus::Signal(15)) => "stopped".to_owned(),
            Self::Stopped(s) => format!("stopped: {}", status(s)),
            Self::Drained(_) if self.describe() == "drained" => "drained".to_owned(),
            Self::Drained(s) => format!("drained: {}", status(s)),
            Self::Silent(_) => "not a wfhost child".to_owned(),
        }
    }

    /// Whether the child broke the protocol.
    pub fn is_violation(&self) -> bool {
        match self {
            Self::Violation(_) => true,
            Self::Silent(inner) => inner.is_violation(),
            _ => false,
        }
    }

    /// The cause's name in facts and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::SpawnFailed(_) => "spawn_failed",
            Self::Exited(_) => "exited",
            Self::Violation(_) => "violation",
            Self::Hung => "hung",
            Self::NotReady => "not_ready",
            Self::Killed => "killed",
            Self::Stopped(_) => "stopped",
            Self::Drained(_) => "drained",
            Self::Silent(inner) => inner.kind(),
        }
    }
}
