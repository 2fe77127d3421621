//! The CLI's end of the control socket: finding it, sending a request (a
//! command that makes several keeps one connection for them), and turning
//! the answer into output and an exit code.

use std::path::PathBuf;

use super::protocol::{self as control, Envelope, Request, Response};
use super::server::socket_path;
use crate::config;
use crate::exit;

/// How a client command finds the supervisor: `--socket`, else the
/// socket of the config named by `--config`, else of `$WFHOST_CONFIG`,
/// else of `/etc/wfhost/wfhost.toml`.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The supervisor's config file (the socket is found from its
    /// state_dir). Without --config or --socket: $WFHOST_CONFIG, else
    /// /etc/wfhost/wfhost.toml.
    #[arg(long, short, value_name = "PATH", conflicts_with = "socket")]
    pub config: Option<PathBuf>,
    /// The control socket itself (it wins over any config).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

/// A failed call, with the exit code it maps to.
#[derive(Debug)]
pub struct CallError {
    /// Exit code for the CLI.
    pub code: u8,
    /// Message for stderr.
    pub message: String,
    /// The request may have reached the supervisor but its answer was
    /// lost: only a request that is safe to repeat may be sent again.
    pub answer_lost: bool,
    /// The supervisor answered that the request may have taken effect
    /// all the same (a `send` whose commit failed midway).
    pub outcome_unknown: bool,
}

impl CallError {
    fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            answer_lost: false,
            outcome_unknown: false,
        }
    }

    /// Whether the request may have taken effect: a repeat under the same
    /// idempotency key settles it.
    fn unsettled(&self) -> bool {
        self.answer_lost || self.outcome_unknown
    }
}

/// How often `send` repeats a request whose answer was lost, and the
/// first pause between tries (doubled each time).
const SEND_TRIES: u32 = 5;
const SEND_RETRY_PAUSE: std::time::Duration = std::time::Duration::from_millis(100);

impl Target {
    fn socket(&self) -> Result<PathBuf, CallError> {
        if let Some(socket) = &self.socket {
            return Ok(socket.clone());
        }
        let usage = |e: config::ConfigError| CallError::new(exit::USAGE, e.to_string());
        let path = config::find(self.config.as_deref()).map_err(usage)?;
        config::locations_of(&path)
            .map(|l| socket_path(&l.state_dir))
            .map_err(usage)
    }

    /// Sends `request` and returns the response's data.
    pub fn call(&self, request: Request) -> Result<serde_json::Value, CallError> {
        self.exchange(request, &[], |_| {})
    }

    /// Sends a streaming request (`events` or `logs` without `follow`) and
    /// returns every message of its stream.
    pub fn collect(&self, request: Request) -> Result<Vec<serde_json::Value>, CallError> {
        let mut all = Vec::new();
        self.exchange(request, &[], |m| all.push(m))?;
        Ok(all)
    }

    /// Sends mail exactly once (see [`Kept::send`]), on a connection of its own.
    pub fn send(
        &self,
        deployment: &str,
        payload: &[u8],
        key: Option<&str>,
        deadline_ms: Option<u64>,
    ) -> Result<serde_json::Value, CallError> {
        self.kept().send(deployment, payload, key, deadline_ms)
    }

    /// A connection to keep for several requests.
    pub fn kept(&self) -> Kept<'_> {
        Kept {
            target: self,
            runtime: None,
            stream: None,
        }
    }

    /// One request on a connection of its own (see [`Kept::exchange`]).
    fn exchange(
        &self,
        request: Request,
        body: &[u8],
        each: impl FnMut(serde_json::Value),
    ) -> Result<serde_json::Value, CallError> {
        self.kept().exchange(request, body, each)
    }
}

/// One connection kept for a command's several requests (`wfhost call`:
/// its send, then its waits for the end), as the SDK clients keep theirs
/// (docs/control.md): one connect and one credential check, not one per
/// request. For requests safe to repeat only (a `send` under its key,
/// `mail-result`): one whose kept connection was closed before it was
/// answered (the supervisor ends an idle one) is sent once more on a new
/// connection.
pub struct Kept<'t> {
    target: &'t Target,
    runtime: Option<tokio::runtime::Runtime>,
    /// Open after a plain answer; a refusal or a stream ends it.
    stream: Option<tokio::net::UnixStream>,
}

impl Kept<'_> {
    /// Sends `request` and returns the response's data.
    pub fn call(&mut self, request: Request) -> Result<serde_json::Value, CallError> {
        self.exchange(request, &[], |_| {})
    }

    /// Sends mail exactly once: under the caller's idempotency key, or a
    /// fresh random one, so that a request whose outcome is not known (its
    /// answer lost, or the store's commit failed midway) can be repeated
    /// and is enqueued at most once; it is repeated a few times before
    /// giving up. Mail that a repeat finds already accepted under a key of
    /// our own making is this call's own, so it is reported as new.
    pub fn send(
        &mut self,
        deployment: &str,
        payload: &[u8],
        key: Option<&str>,
        deadline_ms: Option<u64>,
    ) -> Result<serde_json::Value, CallError> {
        let own_key = key.is_none();
        let key = match key {
            Some(k) => k.to_owned(),
            None => auto_key()?,
        };
        let mut pause = SEND_RETRY_PAUSE;
        let mut tries = 0;
        loop {
            let request = Request::Send {
                deployment: deployment.to_owned(),
                payload_bytes: payload.len() as u64,
                key: Some(key.clone()),
                deadline_ms,
            };
            tries += 1;
            match self.exchange(request, payload, |_| {}) {
                Err(e) if e.unsettled() && tries < SEND_TRIES => {
                    std::thread::sleep(pause);
                    pause *= 2;
                }
                Err(mut e) if e.unsettled() => {
                    e.message = format!(
                        "{}\nwfhost: the outcome is unknown after {tries} tries under idempotency key {key:?}: \
                         the mail may have been accepted; sending again with --key {key:?} enqueues it at \
                         most once",
                        e.message
                    );
                    return Err(e);
                }
                Ok(mut data) if own_key && tries > 1 => {
                    data["new"] = serde_json::Value::Bool(true);
                    return Ok(data);
                }
                other => return other,
            }
        }
    }

    /// Sends `request` and `body` (a `send`'s payload) on the kept
    /// connection (made first if there is none), reads the response, then
    /// (for streaming requests) hands every further message to `each`
    /// until the supervisor closes the stream.
    fn exchange(
        &mut self,
        request: Request,
        body: &[u8],
        mut each: impl FnMut(serde_json::Value),
    ) -> Result<serde_json::Value, CallError> {
        let path = self.target.socket()?;
        let runtime = match self.runtime.take() {
            Some(runtime) => runtime,
            None => tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .map_err(|e| {
                    CallError::new(exit::FAILED, format!("cannot start the async runtime: {e}"))
                })?,
        };
        let reused = self.stream.is_some();
        let mut result = runtime.block_on(self.converse(&path, request.clone(), body, &mut each));
        if reused && matches!(&result, Err(e) if e.answer_lost) {
            // Closed under us before any answer: once more, afresh.
            result = runtime.block_on(self.converse(&path, request, body, &mut each));
        }
        self.runtime = Some(runtime);
        result
    }

    /// One request and its answer on the kept connection, kept open after
    /// a plain answer.
    async fn converse(
        &mut self,
        path: &std::path::Path,
        request: Request,
        body: &[u8],
        each: &mut impl FnMut(serde_json::Value),
    ) -> Result<serde_json::Value, CallError> {
        let mut stream = match self.stream.take() {
            Some(stream) => stream,
            None => connect(path).await?,
        };
        let broken = |e: std::io::Error| CallError {
            answer_lost: true,
            ..CallError::new(
                exit::UNREACHABLE,
                format!("the supervisor at {} did not answer: {e}", path.display()),
            )
        };
        let envelope = Envelope {
            v: control::VERSION,
            request,
        };
        let mut wrote = control::write_message(&mut stream, &envelope).await;
        if wrote.is_ok() && !body.is_empty() {
            wrote = tokio::io::AsyncWriteExt::write_all(&mut stream, body).await;
        }
        // Even when the write failed, the supervisor may have answered
        // (a refusal is written without waiting for the whole request).
        let response: Response = match (control::read_message(&mut stream).await, wrote) {
            (Ok(response), _) => response,
            (Err(_), Err(e)) | (Err(e), Ok(())) => return Err(broken(e)),
        };
        if !response.ok {
            let outcome_unknown = response.outcome_unknown();
            return Err(CallError {
                outcome_unknown,
                ..CallError::new(
                    response.code.unwrap_or(exit::FAILED),
                    response
                        .error
                        .unwrap_or_else(|| "the supervisor reported a failure".into()),
                )
            });
        }
        let data = response.data.unwrap_or(serde_json::Value::Null);
        if data["streaming"] == true {
            loop {
                match control::read_message::<serde_json::Value>(&mut stream).await {
                    Ok(message) => each(message),
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                    Err(e) => return Err(broken(e)),
                }
            }
        } else {
            self.stream = Some(stream);
        }
        Ok(data)
    }
}

/// A new connection to the supervisor at `path`, or why not (and what to do).
async fn connect(path: &std::path::Path) -> Result<tokio::net::UnixStream, CallError> {
    tokio::net::UnixStream::connect(path).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            CallError::new(
                exit::FAILED,
                format!(
                    "permission denied: cannot connect to {}: {e}; run as root, the supervisor's user, \
                     or a member of its admin_group",
                    path.display()
                ),
            )
        } else {
            CallError::new(
                exit::UNREACHABLE,
                format!(
                    "cannot reach the supervisor at {}: {e}; is `wfhost supervise` running with this config?",
                    path.display()
                ),
            )
        }
    })
}

fn report(result: Result<serde_json::Value, CallError>, f: impl FnOnce(serde_json::Value)) -> u8 {
    match result {
        Ok(data) => {
            f(data);
            exit::OK
        }
        Err(e) => {
            eprintln!("wfhost: {}", e.message);
            e.code
        }
    }
}

/// Runs `f` on a successful call, or prints the error; returns the exit code.
pub fn run(target: &Target, request: Request, f: impl FnOnce(serde_json::Value)) -> u8 {
    report(target.call(request), f)
}

impl Target {
    /// One streaming request: each message to `each` until the
    /// supervisor closes the stream (or the connection ends).
    pub fn stream_once(
        &self,
        request: Request,
        each: impl FnMut(serde_json::Value),
    ) -> Result<(), CallError> {
        self.exchange(request, &[], each).map(|_| ())
    }
}

/// Runs a streaming request, printing each message with `each`; returns
/// the exit code.
pub fn stream(target: &Target, request: Request, each: impl FnMut(serde_json::Value)) -> u8 {
    report(target.exchange(request, &[], each), |_| {})
}

/// Runs `f` on mail accepted by [`Target::send`], or prints the error;
/// returns the exit code.
pub fn send(
    target: &Target,
    deployment: &str,
    payload: &[u8],
    key: Option<&str>,
    deadline_ms: Option<u64>,
    f: impl FnOnce(serde_json::Value),
) -> u8 {
    report(target.send(deployment, payload, key, deadline_ms), f)
}

/// A random idempotency key for a send whose caller gave none.
fn auto_key() -> Result<String, CallError> {
    let random = wfhost_ipc::new_channel_id().map_err(|e| {
        CallError::new(
            exit::FAILED,
            format!("cannot read the OS random source: {e}"),
        )
    })?;
    Ok(format!("auto-{random}"))
}
