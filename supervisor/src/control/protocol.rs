//! The control-socket protocol, in one place (`docs/control.md` is the
//! contract other clients implement).
//!
//! A client connects to the supervisor's Unix socket and sends a request;
//! the supervisor answers with one response, and serves the next request
//! on the same connection while the client keeps it (`server.rs` says when
//! it closes one). Each message is a
//! `u32` big-endian length followed by that many bytes of JSON (at most
//! [`MAX_MESSAGE`]). Requests carry the protocol version `v`; a supervisor
//! refuses versions it does not speak. A `send` carries its payload raw,
//! `payload_bytes` of it right after the JSON, so any payload up to
//! `max_mail_bytes` fits whatever the JSON limit.
//!
//! ```text
//! → {"v":2,"cmd":"status"}
//! ← {"ok":true,"data":{"deployments":[…]}}
//! → {"v":2,"cmd":"kill","deployment":"billing"}
//! ← {"ok":false,"code":1,"error":"unknown deployment \"billing\"; …"}
//! → {"v":2,"cmd":"send","deployment":"billing","payload_bytes":2,"key":"order-9"} "hi"
//! ← {"ok":true,"data":{"deployment":"billing","id":17,"new":true}}
//! ```
//!
//! `events` and `logs` stream: after the `{"ok":true}` response the
//! supervisor writes one message per event (`{"seq":…,"at_ms":…,
//! "deployment":…,"kind":…,"body":…}`) or per line of child output
//! (`{"seq":…,"at_ms":…,"pid":…,"stream":…,"text":…,"cut":…}`) until the
//! backlog is done or, with `follow`, until the client hangs up.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The protocol version this build speaks.
pub const VERSION: u32 = 2;

/// Longest idempotency key `send` accepts, in bytes.
pub const MAX_KEY_BYTES: usize = 256;

/// Largest message either side accepts (an answer such as `status`).
pub const MAX_MESSAGE: u32 = 4 << 20;

/// Largest request the supervisor reads: requests are small JSON (a
/// `send`'s payload follows its request, outside this bound).
pub const MAX_REQUEST: u32 = 64 << 10;

/// Largest `send` payload the socket carries: `check-config` refuses a
/// `max_mail_bytes` above it.
pub const MAX_SEND_PAYLOAD: u64 = crate::config::defaults::MAX_SEND_PAYLOAD;

/// The socket's file name inside its directory.
pub const SOCKET_NAME: &str = "wfhost.sock";

/// A request with its version.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// Protocol version of the sender.
    pub v: u32,
    /// The request proper.
    #[serde(flatten)]
    pub request: Request,
}

/// What a client can ask.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "kebab-case")]
pub enum Request {
    /// Every deployment's status.
    Status,
    /// Re-read the config file, as SIGHUP does; answered with what was
    /// started, stopped, recycled and left alone.
    Reload,
    /// Stop gracefully, as SIGTERM does; answered once the stop began.
    Stop,
    /// SIGKILL a deployment's child now, even while it is stopping.
    Kill {
        /// The deployment.
        deployment: String,
    },
    /// Drain a deployment; it stays drained until resumed.
    Drain {
        /// The deployment.
        deployment: String,
    },
    /// Start a drained or failed deployment again.
    Resume {
        /// The deployment.
        deployment: String,
    },
    /// Replace a deployment's child; answered with the new pid.
    Recycle {
        /// The deployment.
        deployment: String,
        /// Why, for the journal.
        reason: Option<String>,
    },
    /// A signed operator cancel of one run, or of every run.
    Cancel {
        /// The deployment.
        deployment: String,
        /// The run; every run when absent.
        run: Option<String>,
    },
    /// Accept mail; answered once it is durable, with its id (and `new`:
    /// false when `key` named mail accepted before).
    Send {
        /// The deployment.
        deployment: String,
        /// How many raw payload bytes follow the JSON message.
        payload_bytes: u64,
        /// Idempotency key: a retry with the same key and payload gets the
        /// first item's id and enqueues nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
        /// The item's deadline, in ms from its first delivery (else the
        /// deployment's `mail_deadline`, if any).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deadline_ms: Option<u64>,
    },
    /// A fleet: hand a deployment to another host (drained where it
    /// runs, its lease released for that host only); answered once the
    /// host holds it.
    Move {
        /// The deployment.
        deployment: String,
        /// The host to run it.
        to: String,
    },
    /// A fleet: drain host `host` for maintenance (it hands every
    /// deployment to the others, as `move` does, and takes none until
    /// `host-resume`); with `wait`, answered once it holds none.
    HostDrain {
        /// The host (its `[fleet] host_id`).
        host: String,
        /// Answer once the host holds no lease.
        #[serde(default)]
        wait: bool,
    },
    /// A fleet: let a drained host take deployments again.
    HostResume {
        /// The host.
        host: String,
    },
    /// A fleet: the live hosts (and the drained ones), each with its
    /// heartbeat age, state, leases held and connection.
    Hosts,
    /// The durable event stream from a cursor, optionally followed live.
    Events {
        /// Print events with a sequence number above this.
        after: u64,
        /// Keep streaming new events.
        follow: bool,
        /// Only this mail item's events; a followed stream ends after its
        /// end.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mail: Option<u64>,
        /// Only this deployment's events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deployment: Option<String>,
    },
    /// A deployment's recent child output, optionally followed live.
    Logs {
        /// The deployment.
        deployment: String,
        /// How many of the newest lines kept to send first.
        lines: u64,
        /// Keep streaming new lines.
        follow: bool,
    },
    /// A page of stored mail with each item's history, ascending by id.
    MailList {
        /// One deployment's mail; every deployment's when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deployment: Option<String>,
        /// One state's (`inbox`, `processing`, `done`, `dead`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        state: Option<String>,
        /// Only ids above this.
        #[serde(default)]
        after: u64,
        /// At most this many (default 100, at most 10000).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// One mail item with its history (never its payload).
    MailShow {
        /// The item.
        id: u64,
    },
    /// One item's end: its outcome and result (base64), once it has
    /// ended; with `wait_ms`, answered when it ends or when that many
    /// milliseconds have passed, whichever comes first.
    MailResult {
        /// The item.
        id: u64,
        /// How long to wait for its end (absent or 0: answer at once; at
        /// most 300000: a longer wait asks again).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        wait_ms: Option<u64>,
    },
    /// Cancel one item: in the inbox it ends cancelled and is never
    /// delivered; held by a child, the cancel is journaled and sent, and
    /// answered with the child's verdict.
    MailCancel {
        /// The item.
        id: u64,
        /// Why, for the journal and the child (default "operator cancel").
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// The open questions of items' handlers (of one deployment, or all).
    Questions {
        /// One deployment's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deployment: Option<String>,
    },
    /// A person's answer to question `key` of item `id`.
    Answer {
        /// The item.
        id: u64,
        /// The question's key.
        key: String,
        /// The answer (any JSON value).
        value: serde_json::Value,
        /// A label for who answered, beside the peer's credentials.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
        /// Who asked the host that forwarded this to the item's owner
        /// (set by that host; a client's own is replaced by its
        /// credentials).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        peer: Option<serde_json::Value>,
    },
    /// A piece of one item's payload, as hex.
    MailPayload {
        /// The item.
        id: u64,
        /// Where the piece starts, in bytes.
        offset: u64,
        /// At most this many bytes (at most 1 MiB).
        length: usize,
    },
    /// Dead mail back to the inbox with its failures reset: one item, or
    /// (with `dead`) a deployment's, or every deployment's.
    MailRetry {
        /// The item.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<u64>,
        /// Every dead item (of `deployment`, if given).
        #[serde(default)]
        dead: bool,
        /// With `dead`: one deployment's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deployment: Option<String>,
    },
    /// Deletes dead mail (of one deployment, or all; only what has been
    /// dead longer than `older_than_ms`, if given).
    MailPurge {
        /// One deployment's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        deployment: Option<String>,
        /// Only mail dead for longer than this many milliseconds.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        older_than_ms: Option<u64>,
    },
    /// A one-time login link to this supervisor's console, usable for
    /// `ttl_ms` (default 15 minutes); its sessions act as the client.
    ConsoleToken {
        /// How long the link may be used.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ttl_ms: Option<u64>,
    },
}

/// Which host of a fleet answers a request (a host outside a fleet
/// answers every request itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route<'a> {
    /// Any host: its own (config, children's output) or the store's,
    /// which every host reads alike.
    Anywhere,
    /// Only the host running the deployment, because `what` is kept
    /// there; any other host refuses, naming the owner.
    Kept {
        /// The deployment.
        deployment: &'a str,
        /// What is kept where it runs, for the refusal.
        what: &'static str,
    },
    /// The deployment's owner: another host carries the request to it
    /// through the database and relays its answer.
    Owner(&'a str),
    /// The fleet as a whole (every deployment's status, mail for any
    /// deployment, a move between hosts).
    Fleet,
}

impl Request {
    /// Which host answers this request: one row per request.
    pub fn route(&self) -> Route<'_> {
        match self {
            Self::Status | Self::Send { .. } | Self::Move { .. } => Route::Fleet,
            Self::Kill { deployment }
            | Self::Drain { deployment }
            | Self::Resume { deployment }
            | Self::Recycle { deployment, .. }
            | Self::Cancel { deployment, .. } => Route::Owner(deployment),
            Self::MailRetry {
                deployment: Some(deployment),
                ..
            }
            | Self::MailPurge {
                deployment: Some(deployment),
                ..
            } => Route::Kept {
                deployment,
                what: "its dead mail's handling",
            },
            Self::Reload
            | Self::Stop
            | Self::HostDrain { .. }
            | Self::HostResume { .. }
            | Self::Hosts
            | Self::Events { .. }
            | Self::Logs { .. }
            | Self::MailList { .. }
            | Self::MailShow { .. }
            | Self::MailResult { .. }
            | Self::MailCancel { .. }
            | Self::Questions { .. }
            | Self::Answer { .. }
            | Self::MailPayload { .. }
            | Self::MailRetry { .. }
            | Self::MailPurge { .. }
            | Self::ConsoleToken { .. } => Route::Anywhere,
        }
    }

    /// The request's name on the wire (`"mail-list"`).
    pub fn name(&self) -> String {
        serde_json::to_value(self)
            .ok()
            .and_then(|v| v["cmd"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }
}

/// The `outcome` of a failed answer that may have taken effect.
pub const UNKNOWN_OUTCOME: &str = "unknown";

/// The answer.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Response {
    /// Whether the operation succeeded.
    pub ok: bool,
    /// The result, when it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<serde_json::Value>,
    /// The exit code the client should use when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u8>,
    /// What went wrong and what to do, when it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `"unknown"` when a failed `send` may have been accepted all the
    /// same (its commit failed midway): the client sends again under the
    /// same key to learn which.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
}

impl Response {
    /// A success carrying `data`.
    pub fn ok(data: serde_json::Value) -> Self {
        Self {
            ok: true,
            data: Some(data),
            code: None,
            error: None,
            outcome: None,
        }
    }

    /// A failure with exit code `code` and a message naming the next step.
    pub fn failed(code: u8, error: impl Into<String>) -> Self {
        Self {
            ok: false,
            data: None,
            code: Some(code),
            error: Some(error.into()),
            outcome: None,
        }
    }

    /// A failure that may have taken effect all the same
    /// (`"outcome": "unknown"`).
    pub fn unknown(code: u8, error: impl Into<String>) -> Self {
        Self {
            outcome: Some(UNKNOWN_OUTCOME.to_owned()),
            ..Self::failed(code, error)
        }
    }

    /// Whether this failure may have taken effect all the same.
    pub fn outcome_unknown(&self) -> bool {
        self.outcome.as_deref() == Some(UNKNOWN_OUTCOME)
    }
}

/// Reads one length-prefixed JSON message.
pub async fn read_message<T: for<'de> Deserialize<'de>>(
    stream: &mut (impl AsyncRead + Unpin),
) -> std::io::Result<T> {
    let len = stream.read_u32().await?;
    if len == 0 || len > MAX_MESSAGE {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("control message of {len} bytes (limit {MAX_MESSAGE})"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    stream.read_exact(&mut buf).await?;
    serde_json::from_slice(&buf)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

/// Writes one length-prefixed JSON message.
pub async fn write_message<T: Serialize>(
    stream: &mut (impl AsyncWrite + Unpin),
    msg: &T,
) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(msg).map_err(std::io::Error::other)?;
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|&l| l <= MAX_MESSAGE)
        .ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "control message too large")
        })?;
    stream.write_u32(len).await?;
    stream.write_all(&bytes).await?;
    stream.flush().await
}
