//! The supervisor's end of the control socket: binding (never stealing a
//! live socket), admission by peer credentials, and answering requests.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use nix::unistd::{Gid, Uid};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::config::SupervisorSettings;
use crate::control::{self, Envelope, Request, Response, SOCKET_NAME};
use crate::deployment::{self, DeploymentHandle};
use crate::exit;
use crate::recycle::Origin;
use crate::shared::{Shared, unix_ms};
use crate::supervisor::Registry;

/// Where the control socket lives: `$RUNTIME_DIRECTORY` when systemd sets
/// one, else the state dir.
pub fn socket_path(state_dir: &Path) -> PathBuf {
    match std::env::var_os("RUNTIME_DIRECTORY") {
        // systemd may list several directories separated by ':'.
        Some(dirs) if !dirs.is_empty() => {
            let dirs = dirs.to_string_lossy().into_owned();
            let first = dirs.split(':').next().unwrap_or(&dirs).to_owned();
            PathBuf::from(first).join(SOCKET_NAME)
        }
        _ => state_dir.join(SOCKET_NAME),
    }
}

/// The bound control socket.
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
    link: Option<PathBuf>,
    admin_gid: Option<Gid>,
    registry: Registry,
    shared: Arc<Shared>,
}

/// What a client handler needs.
#[derive(Clone)]
struct ClientContext {
    registry: Registry,
    shared: Arc<Shared>,
    admin_gid: Option<Gid>,
}

impl Server {
    /// Binds the socket with mode 0600. A stale socket (nobody answers) is
    /// replaced; a live one belongs to another supervisor and is refused.
    pub fn bind(
        settings: &SupervisorSettings,
        registry: Registry,
        shared: Arc<Shared>,
    ) -> anyhow::Result<Self> {
        let path = socket_path(&settings.state_dir);
        if path.exists() {
            match std::os::unix::net::UnixStream::connect(&path) {
                Ok(stream) => {
                    let holder = nix::sys::socket::getsockopt(
                        &stream,
                        nix::sys::socket::sockopt::PeerCredentials,
                    )
                    .map(|c| format!("pid {}", c.pid()))
                    .unwrap_or_else(|_| "another process".to_owned());
                    bail!(
                        "another supervisor ({holder}) is running on {}; stop it first, or use another state_dir",
                        path.display()
                    );
                }
                Err(_) => std::fs::remove_file(&path).with_context(|| {
                    format!("cannot remove the stale control socket {}", path.display())
                })?,
            }
        }
        let listener = UnixListener::bind(&path)
            .with_context(|| format!("cannot bind the control socket {}", path.display()))?;
        let admin_gid = match &settings.admin_group {
            Some(name) => match nix::unistd::Group::from_name(name) {
                Ok(Some(g)) => Some(g.gid),
                _ => bail!("admin_group {name:?} does not exist; create it or remove the setting"),
            },
            None => None,
        };
        // 0600 unless an admin group is configured: then the group may
        // connect too (SO_PEERCRED still checks every caller).
        let mode = if let Some(gid) = admin_gid {
            nix::unistd::chown(&path, None, Some(gid))
                .with_context(|| format!("cannot give {} to admin_group", path.display()))?;
            0o660
        } else {
            0o600
        };
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set mode {mode:o} on {}", path.display()))?;
        // Under systemd the socket lives in $RUNTIME_DIRECTORY; a link in the
        // state dir lets `--config` clients (which lack that variable) find it.
        let link = settings.state_dir.join(SOCKET_NAME);
        let link = if link != path {
            let _ = std::fs::remove_file(&link);
            std::os::unix::fs::symlink(&path, &link)
                .with_context(|| format!("cannot link {} to {}", link.display(), path.display()))?;
            Some(link)
        } else {
            None
        };
        Ok(Self {
            listener,
            path,
            link,
            admin_gid,
            registry,
            shared,
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Accepts and answers clients until the task is aborted.
    pub async fn serve(self) {
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    let ctx = ClientContext {
                        registry: self.registry.clone(),
                        shared: self.shared.clone(),
                        admin_gid: self.admin_gid,
                    };
                    tokio::spawn(serve_client(stream, ctx));
                }
                Err(e) => {
                    warn!(error = %e, "control socket accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(link) = &self.link {
            let _ = std::fs::remove_file(link);
        }
    }
}

/// Whether a peer may use the socket: root, our own user, or a member of
/// the configured admin group.
fn admitted(uid: u32, gid: u32, admin_gid: Option<Gid>) -> bool {
    if uid == 0 || uid == Uid::current().as_raw() {
        return true;
    }
    let Some(admin) = admin_gid else { return false };
    if gid == admin.as_raw() {
        return true;
    }
    match nix::unistd::User::from_uid(Uid::from_raw(uid)) {
        Ok(Some(user)) => std::ffi::CString::new(user.name)
            .ok()
            .and_then(|name| nix::unistd::getgrouplist(&name, user.gid).ok())
            .is_some_and(|groups| groups.contains(&admin)),
        _ => false,
    }
}

/// How long a client may take to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Most request bytes read from a client that is about to be refused.
const REFUSED_READ_LIMIT: usize = 64 << 10;

/// Reads (and drops) a refused client's request, bounded in size and time,
/// so it is waiting for the answer when the refusal is written, rather
/// than finding a closed socket.
async fn discard_request(stream: &mut UnixStream) {
    use tokio::io::AsyncReadExt;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        let len = stream.read_u32().await? as usize;
        let mut left = len.min(REFUSED_READ_LIMIT);
        let mut buf = [0u8; 4096];
        while left > 0 {
            let want = left.min(buf.len());
            let n = stream.read(&mut buf[..want]).await?;
            if n == 0 {
                break;
            }
            left -= n;
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
}

async fn serve_client(mut stream: UnixStream, ctx: ClientContext) {
    let request = match stream.peer_cred() {
        Ok(cred) if admitted(cred.uid(), cred.gid(), ctx.admin_gid) => {
            let read = tokio::time::timeout(
                REQUEST_TIMEOUT,
                control::read_message::<Envelope>(&mut stream),
            );
            let read = match read.await {
                Ok(r) => r,
                Err(_) => Err(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "no request within 10s",
                )),
            };
            match read {
                Ok(envelope) if envelope.v != control::VERSION => Err(Response::failed(
                    exit::USAGE,
                    format!(
                        "control protocol version {} is not spoken here (supervisor speaks {}); use a matching wfhost",
                        envelope.v,
                        control::VERSION
                    ),
                )),
                Ok(envelope) => Ok(envelope.request),
                Err(e) => {
                    debug!(error = %e, "unreadable control request");
                    Err(Response::failed(
                        exit::USAGE,
                        format!("unreadable control request: {e}"),
                    ))
                }
            }
        }
        Ok(cred) => {
            warn!(uid = cred.uid(), pid = ?cred.pid(), "refused a control-socket client");
            discard_request(&mut stream).await;
            Err(Response::failed(
                exit::FAILED,
                format!(
                    "permission denied: uid {} is not root, the supervisor's user, or in its admin_group; \
                     run as one of those or ask for admin_group membership",
                    cred.uid()
                ),
            ))
        }
        Err(e) => Err(Response::failed(
            exit::FAILED,
            format!("cannot read peer credentials: {e}"),
        )),
    };
    let response = match request {
        Ok(Request::Events { after, follow }) => {
            return stream_events(stream, &ctx.shared, after, follow).await;
        }
        Ok(request) => answer(request, &mut stream, &ctx).await,
        Err(response) => response,
    };
    let _ = control::write_message(&mut stream, &response).await;
}

fn lookup(registry: &Registry, id: &str) -> Result<DeploymentHandle, Response> {
    let map = registry.read().unwrap_or_else(|p| p.into_inner());
    map.get(id).cloned().ok_or_else(|| {
        let known: Vec<&str> = map.keys().map(String::as_str).collect();
        Response::failed(
            exit::FAILED,
            format!(
                "unknown deployment {id:?}; known deployments: {}",
                known.join(", ")
            ),
        )
    })
}

/// Sends `request` to a deployment and awaits its answer.
async fn ask<T>(
    handle: &DeploymentHandle,
    request: impl FnOnce(oneshot::Sender<Result<T, String>>) -> deployment::Request,
) -> Result<T, Response> {
    let (tx, rx) = oneshot::channel();
    let gone = || {
        Response::failed(
            exit::FAILED,
            "the deployment is shutting down; nothing was done",
        )
    };
    handle
        .requests
        .send(request(tx))
        .await
        .map_err(|_| gone())?;
    match rx.await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Response::failed(exit::FAILED, e)),
        Err(_) => Err(gone()),
    }
}

async fn answer(request: Request, stream: &mut UnixStream, ctx: &ClientContext) -> Response {
    match answer_inner(request, stream, ctx).await {
        Ok(r) | Err(r) => r,
    }
}

async fn answer_inner(
    request: Request,
    stream: &mut UnixStream,
    ctx: &ClientContext,
) -> Result<Response, Response> {
    use serde_json::json;
    Ok(match request {
        Request::Status => {
            let handles: Vec<DeploymentHandle> = ctx
                .registry
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect();
            let ids: Vec<String> = handles.iter().map(|h| h.config().id.clone()).collect();
            let counts = ctx
                .shared
                .reader
                .call(move |s| {
                    ids.iter()
                        .map(|id| s.mail_counts(id))
                        .collect::<Result<Vec<_>, _>>()
                })
                .await
                .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
                .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
            let now = Instant::now();
            let deployments: Vec<_> = handles
                .iter()
                .zip(&counts)
                .map(|(h, mail)| h.snapshot().to_json(now, mail))
                .collect();
            Response::ok(json!({ "deployments": deployments }))
        }
        Request::Kill { deployment } => {
            let handle = lookup(&ctx.registry, &deployment)?;
            if handle
                .requests
                .send(deployment::Request::Kill)
                .await
                .is_err()
            {
                return Err(Response::failed(
                    exit::FAILED,
                    format!("deployment {deployment:?} is shutting down"),
                ));
            }
            Response::ok(json!({ "deployment": deployment }))
        }
        Request::Drain { deployment } => {
            let handle = lookup(&ctx.registry, &deployment)?;
            let message = ask(&handle, |reply| deployment::Request::Drain { reply }).await?;
            Response::ok(json!({ "deployment": deployment, "message": message }))
        }
        Request::Resume { deployment } => {
            let handle = lookup(&ctx.registry, &deployment)?;
            let message = ask(&handle, |reply| deployment::Request::Resume { reply }).await?;
            Response::ok(json!({ "deployment": deployment, "message": message }))
        }
        Request::Recycle { deployment, reason } => {
            let handle = lookup(&ctx.registry, &deployment)?;
            let old = handle.snapshot().pid;
            let reason = reason.unwrap_or_else(|| "operator request".into());
            let pid = ask(&handle, |reply| deployment::Request::Recycle {
                origin: Origin::Operator,
                reason,
                reply: Some(reply),
            })
            .await?;
            Response::ok(json!({ "deployment": deployment, "old_pid": old, "pid": pid }))
        }
        Request::Cancel { deployment, run } => {
            let handle = lookup(&ctx.registry, &deployment)?;
            let r = run.clone();
            let seq = ask(&handle, |reply| deployment::Request::Cancel {
                run: r,
                reply,
            })
            .await?;
            Response::ok(json!({ "deployment": deployment, "run": run, "journal_seq": seq }))
        }
        Request::Send {
            deployment,
            payload_bytes,
            key,
        } => {
            let handle = lookup(&ctx.registry, &deployment)?;
            if let Some(key) = &key
                && (key.is_empty() || key.len() > control::MAX_KEY_BYTES)
            {
                return Err(Response::failed(
                    exit::USAGE,
                    format!(
                        "idempotency key must be 1 to {} bytes, not {}; nothing was accepted",
                        control::MAX_KEY_BYTES,
                        key.len()
                    ),
                ));
            }
            if let Some(refusal) = handle.with_status(mail_refusal) {
                return Err(Response::failed(exit::FAILED, refusal));
            }
            let cfg = handle.config();
            // Refused from the announced size alone, before reading it.
            if payload_bytes > u64::from(cfg.max_mail_bytes) {
                return Err(Response::failed(
                    exit::FAILED,
                    format!(
                        "payload of {payload_bytes} bytes exceeds max_mail_bytes ({} bytes) of {deployment}; nothing was accepted",
                        cfg.max_mail_bytes
                    ),
                ));
            }
            let payload =
                tokio::time::timeout(REQUEST_TIMEOUT, control::read_payload(stream, payload_bytes))
                    .await
                    .map_err(|_| {
                        Response::failed(
                            exit::USAGE,
                            format!("the payload did not arrive within {REQUEST_TIMEOUT:?}; nothing was accepted"),
                        )
                    })?
                    .map_err(|e| {
                        Response::failed(
                            exit::USAGE,
                            format!("unreadable payload: {e}; nothing was accepted"),
                        )
                    })?;
            let (id, limit, at) = (deployment.clone(), cfg.max_inbox, unix_ms());
            let accepted = ctx
                .shared
                .store
                .call(move |s| s.enqueue_mail(&id, key.as_deref(), &payload, limit, at))
                .await
                .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
                .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
            if accepted.new {
                // The store wrote the `mail_accepted` event with the mail.
                ctx.shared.events_written();
                let _ = handle.requests.send(deployment::Request::MailArrived).await;
            }
            Response::ok(
                json!({ "deployment": deployment, "id": accepted.id, "new": accepted.new }),
            )
        }
        Request::Events { .. } => Response::failed(exit::USAGE, "events is a streaming request"),
    })
}

/// Why a deployment cannot take mail, if it cannot: its child said in
/// Hello that it takes none (a plain command under `wfhost-child exec`).
fn mail_refusal(status: &crate::status::Status) -> Option<String> {
    if status.takes_mail != Some(false) {
        return None;
    }
    let id = &status.id;
    let who = status.implementation.as_deref().unwrap_or("its child");
    Some(format!(
        "deployment {id} takes no mail: its child ({who}) said so in its handshake, as a plain command \
         under `wfhost-child exec` does; nothing was accepted\n  help: make {id}'s command a workflow \
         that takes mail (the Rust, TypeScript or Python SDK), or send to another deployment"
    ))
}

/// Events from the cursor, then (with `follow`) new ones as they are
/// committed, with no gap and no duplicate: the follower subscribes to the
/// commit ticks first, then reads the durable log from its cursor, and
/// reads from the cursor again after every tick.
async fn stream_events(mut stream: UnixStream, shared: &Shared, after: u64, follow: bool) {
    let mut ticks = shared.events.subscribe();
    let started = Response::ok(serde_json::json!({"streaming": true}));
    if control::write_message(&mut stream, &started).await.is_err() {
        return;
    }
    let mut last = after;
    if backlog(&mut stream, shared, &mut last).await.is_err() || !follow {
        return;
    }
    let mut probe = [0u8; 1];
    loop {
        tokio::select! {
            tick = ticks.changed() => {
                if tick.is_err() || backlog(&mut stream, shared, &mut last).await.is_err() {
                    return;
                }
            }
            // The follower hung up (or sent something it should not): done.
            _ = tokio::io::AsyncReadExt::read(&mut stream, &mut probe) => return,
        }
    }
}

/// Writes every stored event after `*last`, advancing it.
async fn backlog(stream: &mut UnixStream, shared: &Shared, last: &mut u64) -> Result<(), ()> {
    const PAGE: usize = 1000;
    loop {
        let after = *last;
        let page = match shared
            .reader
            .call(move |s| s.events_after(after, PAGE))
            .await
        {
            Ok(Ok(page)) => page,
            _ => return Err(()),
        };
        for event in &page {
            *last = event.seq;
            control::write_message(stream, event)
                .await
                .map_err(|_| ())?;
        }
        if page.len() < PAGE {
            return Ok(());
        }
    }
}
