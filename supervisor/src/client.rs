//! The CLI's end of the control socket: finding it, sending one request,
//! and turning the answer into output and an exit code.

use std::path::PathBuf;

use crate::config;
use crate::control::{self, Envelope, Request, Response};
use crate::control_server::socket_path;
use crate::exit;

/// How a client command finds the supervisor.
#[derive(Debug, Clone, clap::Args)]
pub struct Target {
    /// The supervisor's config file (the socket is found from it).
    #[arg(long, short, value_name = "PATH", conflicts_with = "socket")]
    pub config: Option<PathBuf>,
    /// The control socket itself.
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
}

impl Target {
    fn socket(&self) -> Result<PathBuf, CallError> {
        match (&self.socket, &self.config) {
            (Some(s), _) => Ok(s.clone()),
            (None, Some(c)) => config::locations_of(c)
                .map(|l| socket_path(&l.state_dir))
                .map_err(|e| CallError {
                    code: exit::USAGE,
                    message: e.to_string(),
                }),
            (None, None) => Err(CallError {
                code: exit::USAGE,
                message: "say which supervisor: --config PATH (its config file) or --socket PATH"
                    .into(),
            }),
        }
    }

    /// Sends `request` and returns the response's data.
    pub fn call(&self, request: Request) -> Result<serde_json::Value, CallError> {
        self.exchange(request, |_| {})
    }

    /// Connects, sends `request`, reads the response, then (for streaming
    /// requests) hands every further message to `each` until the
    /// supervisor closes the stream.
    fn exchange(
        &self,
        request: Request,
        mut each: impl FnMut(serde_json::Value),
    ) -> Result<serde_json::Value, CallError> {
        let path = self.socket()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .map_err(|e| CallError {
                code: exit::FAILED,
                message: format!("cannot start the async runtime: {e}"),
            })?;
        runtime.block_on(async {
            let mut stream = tokio::net::UnixStream::connect(&path).await.map_err(|e| {
                if e.kind() == std::io::ErrorKind::PermissionDenied {
                    CallError {
                        code: exit::FAILED,
                        message: format!(
                            "permission denied: cannot connect to {}: {e}; run as root, the supervisor's user, \
                             or a member of its admin_group",
                            path.display()
                        ),
                    }
                } else {
                    CallError {
                        code: exit::UNREACHABLE,
                        message: format!(
                            "cannot reach the supervisor at {}: {e}; is `wfhost supervise` running with this config?",
                            path.display()
                        ),
                    }
                }
            })?;
            let broken = |e: std::io::Error| CallError {
                code: exit::UNREACHABLE,
                message: format!("the supervisor at {} did not answer: {e}", path.display()),
            };
            let envelope = Envelope { v: control::VERSION, request };
            let wrote = control::write_message(&mut stream, &envelope).await;
            // Even when the write failed, the supervisor may have answered
            // (a refusal is written without waiting for the whole request).
            let response: Response = match (control::read_message(&mut stream).await, wrote) {
                (Ok(response), _) => response,
                (Err(_), Err(e)) | (Err(e), Ok(())) => return Err(broken(e)),
            };
            if !response.ok {
                return Err(CallError {
                    code: response.code.unwrap_or(exit::FAILED),
                    message: response.error.unwrap_or_else(|| "the supervisor reported a failure".into()),
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
            }
            Ok(data)
        })
    }
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

/// Runs a streaming request, printing each message with `each`; returns
/// the exit code.
pub fn stream(target: &Target, request: Request, each: impl FnMut(serde_json::Value)) -> u8 {
    report(target.exchange(request, each), |_| {})
}
