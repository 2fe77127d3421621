//! The messages of the control protocol: `Control` flows down from the
//! supervisor to a child, `Event` flows up from a child to the supervisor.

use serde::{Deserialize, Serialize};

use crate::cancel::{SignedCancel, SignedMailCancel};
use crate::handshake::Hello;

/// What a step does when its run is drained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DrainBehavior {
    /// Abort the step on drain; its time counts against the drain budget.
    Cancel,
    /// Let the step finish (a person approving, say); the budget pauses.
    Wait,
}

impl DrainBehavior {
    /// The lower-case name used in logs, status and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Wait => "wait",
        }
    }
}

/// How a step, a run or a piece of mail ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// It did what it was for.
    Succeeded,
    /// It failed, for the reason given.
    Failed(String),
    /// It was cancelled (by drain or by a signed cancel).
    Cancelled,
}

/// A child's answer to a [`Control::CancelMail`] (protocol 3).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelVerdict {
    /// The item's handler was told to stop; its `MailDone` follows.
    Acknowledged,
    /// The item's handler declared it cannot be cancelled: it runs to its
    /// end.
    NotSupported,
    /// The child refused the cancel (a bad signature, another deployment,
    /// an item it does not hold), in its words.
    Refused(String),
}

/// The grants the supervisor read from the deployment's `grants_file` for
/// this child: the bytes as read, and when.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grants {
    /// Unix time in milliseconds when the file was read.
    pub read_at_ms: u64,
    /// SHA-256 of `body`, so both sides can name the snapshot briefly.
    pub digest: [u8; 32],
    /// The file's contents (JSON), empty when the deployment has none.
    pub body: Vec<u8>,
}

/// The bounds the child must respect, so it can refuse what the supervisor
/// would refuse anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    /// Largest frame body either side may send.
    pub max_frame_bytes: u32,
    /// Largest mail payload.
    pub max_mail_bytes: u32,
    /// The drain-timeout budget in milliseconds.
    pub drain_timeout_ms: u64,
    /// Silence after which the supervisor declares the child hung, in
    /// milliseconds: the longest the child may leave a `Ping` unanswered.
    pub liveness_timeout_ms: u64,
}

/// The supervisor's answer to `Hello`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Welcome {
    /// The protocol version the supervisor speaks; a child refuses a
    /// Welcome of another version.
    pub protocol: u32,
    /// The deployment this child serves.
    pub deployment: String,
    /// The grants in force for this child's life.
    pub grants_snapshot: Grants,
    /// The bounds in force.
    pub limits: Limits,
}

/// Supervisor → child.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Control {
    /// Answer to `Hello`.
    Welcome(Welcome),
    /// Stop taking work and wind down within the budget.
    Drain {
        /// The drain-timeout budget, for the child's information.
        budget_ms: u64,
    },
    /// A signed cancel request the child must verify before acting.
    Cancel(SignedCancel),
    /// A piece of mail to process and acknowledge.
    Mail {
        /// Store-assigned id; ids let the child skip redeliveries.
        id: u64,
        /// 1 on the first delivery, 2 on the next (after the child that
        /// held it died or was recycled), …: a child can tell a
        /// redelivery from new work and finalize instead of re-running.
        attempt: u32,
        /// The payload as sent.
        payload: Vec<u8>,
    },
    /// Liveness probe; must be answered with the same nonce.
    Ping {
        /// Echoed back in `Pong`.
        nonce: u64,
    },
    /// Exit now, cleanly.
    Shutdown,
    /// The supervisor holds this deployment for `valid_ms` more
    /// milliseconds (a fleet lease). A child that hears no newer `Lease`
    /// by then acts as drained on its own: it cancels its cancel-behaviour
    /// steps and takes no more mail, since its supervisor may have lost
    /// the deployment to another host. Never sent outside a fleet.
    Lease {
        /// Milliseconds from receipt until the lease runs out.
        valid_ms: u64,
    },
    /// Protocol 3: a signed cancel of one mail item the child holds. The
    /// child verifies it, tells that item's handler (and no other), and
    /// answers with a `CancelVerdict`.
    CancelMail(SignedMailCancel),
    /// Protocol 3: the answer to an item's question (`Ask`), as stored:
    /// JSON bytes.
    Answer {
        /// The item.
        id: u64,
        /// The question's key, as asked.
        key: String,
        /// The answer (JSON).
        value: Vec<u8>,
    },
}

/// Child → supervisor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// First frame of every child.
    Hello(Hello),
    /// The child can take work.
    Ready,
    /// A step of a run began.
    StepStarted {
        /// The run the step belongs to.
        run: String,
        /// The step's name.
        step: String,
        /// What the step does on drain.
        drain: DrainBehavior,
    },
    /// A step of a run ended.
    StepFinished {
        /// The run the step belongs to.
        run: String,
        /// The step's name.
        step: String,
        /// How it ended.
        outcome: Outcome,
    },
    /// A piece of mail is finished with.
    MailAck {
        /// The mail's id.
        id: u64,
        /// How processing ended.
        outcome: Outcome,
    },
    /// Answer to `Ping`.
    Pong {
        /// The ping's nonce.
        nonce: u64,
    },
    /// A run reached a terminal state; its steps are over.
    RunTerminal {
        /// The run.
        run: String,
        /// How it ended.
        outcome: Outcome,
    },
    /// No cancel-behaviour work is left after a drain.
    Drained,
    /// The child asks to be replaced.
    RecycleRequest {
        /// Why, in the child's words.
        reason: String,
    },
    /// Application-defined event, forwarded to observers.
    Custom {
        /// The kind, chosen by the application.
        kind: String,
        /// Opaque payload.
        bytes: Vec<u8>,
    },
    /// Protocol 3: an item's handler took it: the work has started (an
    /// item delivered but never started is given back uncounted).
    MailStarted {
        /// The item.
        id: u64,
        /// Whether its handler can be cancelled (`false`: a cancel is
        /// answered `NotSupported` and the item runs to its end).
        cancellable: bool,
    },
    /// Protocol 3: an item is finished with, with its result (in protocol
    /// 2, `MailAck`: the same with no result).
    MailDone {
        /// The item.
        id: u64,
        /// How processing ended.
        outcome: Outcome,
        /// What the handler returned (empty allowed).
        result: Vec<u8>,
    },
    /// Protocol 3: the child's answer to a `CancelMail`.
    MailCancelVerdict {
        /// The item.
        id: u64,
        /// What the child did.
        verdict: CancelVerdict,
    },
    /// Protocol 3: an item's handler asks a person a question and waits
    /// for its `Answer`.
    Ask {
        /// The item.
        id: u64,
        /// The question's key, unique within the item (1 to 256 bytes).
        key: String,
        /// The question (JSON, at most 64 KiB).
        prompt: Vec<u8>,
    },
    /// Protocol 3: an item's handler reports progress.
    Progress {
        /// The item.
        id: u64,
        /// What it reports (JSON, at most 64 KiB).
        data: Vec<u8>,
    },
    /// Protocol 3: the child gives an item back unfinished, to be
    /// delivered again without counting a failure.
    GiveBack {
        /// The item.
        id: u64,
        /// It waits for an answer to a question: deliver it again once
        /// the answer is stored, not before.
        awaiting_answer: bool,
    },
}

impl Control {
    /// The variant's name, for logs and violation messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Welcome(_) => "Welcome",
            Self::Drain { .. } => "Drain",
            Self::Cancel(_) => "Cancel",
            Self::Mail { .. } => "Mail",
            Self::Ping { .. } => "Ping",
            Self::Shutdown => "Shutdown",
            Self::Lease { .. } => "Lease",
            Self::CancelMail(_) => "CancelMail",
            Self::Answer { .. } => "Answer",
        }
    }

    /// The oldest protocol version that has this message: the supervisor
    /// never sends it to a child that speaks an older one.
    pub fn since(&self) -> u32 {
        match self {
            Self::CancelMail(_) | Self::Answer { .. } => 3,
            _ => 2,
        }
    }
}

impl Event {
    /// The variant's name, for logs and violation messages.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Hello(_) => "Hello",
            Self::Ready => "Ready",
            Self::StepStarted { .. } => "StepStarted",
            Self::StepFinished { .. } => "StepFinished",
            Self::MailAck { .. } => "MailAck",
            Self::Pong { .. } => "Pong",
            Self::RunTerminal { .. } => "RunTerminal",
            Self::Drained => "Drained",
            Self::RecycleRequest { .. } => "RecycleRequest",
            Self::Custom { .. } => "Custom",
            Self::MailStarted { .. } => "MailStarted",
            Self::MailDone { .. } => "MailDone",
            Self::MailCancelVerdict { .. } => "MailCancelVerdict",
            Self::Ask { .. } => "Ask",
            Self::Progress { .. } => "Progress",
            Self::GiveBack { .. } => "GiveBack",
        }
    }

    /// The oldest protocol version that has this message: a child that
    /// speaks an older one must not send it.
    pub fn since(&self) -> u32 {
        match self {
            Self::MailStarted { .. }
            | Self::MailDone { .. }
            | Self::MailCancelVerdict { .. }
            | Self::Ask { .. }
            | Self::Progress { .. }
            | Self::GiveBack { .. } => 3,
            _ => 2,
        }
    }
}
