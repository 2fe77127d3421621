//! The supervisor's end of the control socket: binding (never stealing a
//! live socket), admission by peer credentials, the bounds every client
//! shares (connections and buffered bytes, [`budget`](super::budget)), and
//! answering requests.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::AsyncReadExt;
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

use super::admission::Admission;
use super::budget::{self, Budget, Seat};
use super::handlers::{self, Context as ClientContext};
use super::host::HostAsks;
use super::protocol::{self, Envelope, Request, Response, SOCKET_NAME};
use crate::config::SupervisorSettings;
use crate::deployment::Registry;
use crate::exit;
use crate::shared::Shared;

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

/// The bound control socket. Bound first thing at start-up: it is what
/// refuses a second supervisor on the same state dir, before that one
/// opens the store or touches a child.
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
    link: Option<PathBuf>,
    admission: Admission,
    budget: Arc<Budget>,
}

/// What a client's request is answered with.
pub struct Served {
    /// The live deployments.
    pub registry: Registry,
    /// The store, the key and the rest of the supervisor's shared state.
    pub shared: Arc<Shared>,
    /// Where reload and stop requests go.
    pub host: HostAsks,
}

impl Server {
    /// Binds the socket with mode 0600 (inside a tokio runtime). A stale
    /// socket (nobody answers) is replaced; a live one belongs to another
    /// supervisor and is refused.
    pub fn bind(settings: &SupervisorSettings) -> anyhow::Result<Self> {
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
        let admission = Admission::new(&path);
        admission.set_group(settings.admin_group.as_deref())?;
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
            admission,
            budget: Arc::default(),
        })
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Who may connect, for a reload to change `admin_group`.
    pub fn admission(&self) -> Admission {
        self.admission.clone()
    }

    /// Accepts and answers clients until the task is aborted; a client
    /// past [`budget::MAX_CLIENTS`] is told so at once and closed. Clients
    /// that connect before this runs wait in the listen backlog.
    pub async fn serve(self, with: Served) {
        let mut refusals = Refusals::default();
        loop {
            match self.listener.accept().await {
                Ok((stream, _)) => {
                    let Some(seat) = self.budget.seat() else {
                        refuse_now(&stream, &Budget::too_many_clients());
                        refusals.note(&self.budget);
                        continue;
                    };
                    let ctx = ClientContext {
                        registry: with.registry.clone(),
                        shared: with.shared.clone(),
                        host: with.host.clone(),
                        budget: self.budget.clone(),
                    };
                    tokio::spawn(serve_client(stream, ctx, self.admission.clone(), seat));
                }
                Err(e) => {
                    warn!(error = %e, "control socket accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// Clients refused for the connection limit: logged at most once a
/// second, with how many, so a flood of them cannot flood the log.
#[derive(Default)]
struct Refusals {
    since_log: u64,
    logged_at: Option<Instant>,
}

impl Refusals {
    fn note(&mut self, budget: &Budget) {
        self.since_log += 1;
        let due = self
            .logged_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(1));
        if due {
            warn!(
                refused = self.since_log,
                open = budget.clients(),
                limit = budget::MAX_CLIENTS,
                "control-socket clients refused: the connection limit is reached"
            );
            self.since_log = 0;
            self.logged_at = Some(Instant::now());
        }
    }
}

/// Writes `error` to a client that will not be served, without waiting:
/// a refusal is far smaller than a socket's buffer, and a client that
/// never reads it must not hold anything.
fn refuse_now(stream: &UnixStream, error: &str) {
    let response = Response::failed(exit::FAILED, error);
    let Ok(json) = serde_json::to_vec(&response) else {
        return;
    };
    let mut message = (json.len() as u32).to_be_bytes().to_vec();
    message.extend_from_slice(&json);
    let _ = stream.try_write(&message);
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(link) = &self.link {
            let _ = std::fs::remove_file(link);
        }
    }
}

/// How long a client may take to send its request.
pub(super) const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Most request bytes read from a client that is about to be refused.
const REFUSED_READ_LIMIT: usize = 64 << 10;

/// Reads (and drops) a refused client's request, bounded in size and time,
/// so it is waiting for the answer when the refusal is written, rather
/// than finding a closed socket.
async fn discard_request(stream: &mut UnixStream) {
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

/// How long a kept-open connection may wait for its next request.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves one client, request after request until it closes the
/// connection, idles past [`IDLE_TIMEOUT`] or asks for a stream; its seat
/// is held until it is gone. A producer that keeps one connection pays
/// the connect and the peer-credential check once, not per request.
async fn serve_client(
    mut stream: UnixStream,
    ctx: ClientContext,
    admission: Admission,
    _seat: Seat,
) {
    let cred = match stream.peer_cred() {
        Ok(cred) if admission.admits(cred.uid(), cred.gid()) => cred,
        Ok(cred) => {
            let pid = cred
                .pid()
                .map_or_else(|| "unknown".to_owned(), |p| p.to_string());
            warn!(uid = cred.uid(), pid = %pid, "refused a control-socket client");
            discard_request(&mut stream).await;
            let refusal = Response::failed(
                exit::FAILED,
                format!(
                    "permission denied: uid {} is not root, the supervisor's user, or in its admin_group; \
                     run as one of those or ask for admin_group membership",
                    cred.uid()
                ),
            );
            let _ = protocol::write_message(&mut stream, &refusal).await;
            return;
        }
        Err(e) => {
            let refusal =
                Response::failed(exit::FAILED, format!("cannot read peer credentials: {e}"));
            let _ = protocol::write_message(&mut stream, &refusal).await;
            return;
        }
    };
    crate::observe::connections::admitted();
    let mut first = true;
    loop {
        // The first request is due within REQUEST_TIMEOUT; between
        // requests the client may idle, and closing is how it says it is
        // done.
        let wait = if first { REQUEST_TIMEOUT } else { IDLE_TIMEOUT };
        let len = match tokio::time::timeout(wait, stream.read_u32()).await {
            Ok(Ok(len)) => len,
            Ok(Err(e)) => {
                debug!(error = %e, "control client closed its connection");
                return;
            }
            Err(_) if !first => return,
            Err(_) => {
                let response = Response::failed(
                    exit::USAGE,
                    "unreadable control request: no request within 10s".to_owned(),
                );
                let _ = protocol::write_message(&mut stream, &response).await;
                return;
            }
        };
        // A reload may have taken the client's admin_group away since its
        // last request: a kept connection serves only while it is admitted.
        if !admission.admits(cred.uid(), cred.gid()) {
            return;
        }
        crate::observe::connections::request();
        let request = read(&mut stream, len, &ctx).await;
        // A refused send may leave its payload unread, and an unreadable
        // request leaves the framing unknown: their answer is the
        // connection's last.
        let last = match &request {
            Ok(Request::Send { .. }) => None,
            Ok(_) => Some(false),
            Err(_) => Some(true),
        };
        let response = match request {
            Ok(Request::Events {
                after,
                follow,
                mail,
                deployment,
            }) => {
                let filter = handlers::events::Filter { mail, deployment };
                match handlers::events::known(&ctx.shared, &filter).await {
                    Ok(()) => {
                        return handlers::events::stream(
                            stream,
                            &ctx.shared,
                            after,
                            follow,
                            filter,
                        )
                        .await;
                    }
                    Err(refusal) => refusal,
                }
            }
            Ok(Request::Logs {
                deployment,
                lines,
                follow,
            }) => match handlers::fleet::elsewhere(&ctx, &deployment, "its output").await {
                // A fleet host that does not run it names the one that does.
                Some(refusal) => refusal,
                None => {
                    return handlers::logs::stream(stream, &ctx, &deployment, lines, follow).await;
                }
            },
            Ok(request) => handlers::answer(request, &mut stream, &ctx).await,
            Err(response) => response,
        };
        let last = last.unwrap_or(!response.ok);
        if protocol::write_message(&mut stream, &response)
            .await
            .is_err()
            || last
        {
            return;
        }
        first = false;
    }
}

/// The request of `len` bytes that follows its length prefix, checked
/// for the protocol version, or the refusal to answer with.
async fn read(stream: &mut UnixStream, len: u32, ctx: &ClientContext) -> Result<Request, Response> {
    let read = tokio::time::timeout(
        REQUEST_TIMEOUT,
        budget::read_request_of::<Envelope>(stream, len, &ctx.budget),
    );
    let read = match read.await {
        Ok(r) => r,
        Err(_) => Err(budget::ReadError::Io(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no request within 10s",
        ))),
    };
    match read {
        Ok(envelope) if envelope.v != protocol::VERSION => Err(Response::failed(
            exit::USAGE,
            format!(
                "control protocol version {} is not spoken here (supervisor speaks {}); use a matching wfhost",
                envelope.v,
                protocol::VERSION
            ),
        )),
        Ok(envelope) => Ok(envelope.request),
        Err(budget::ReadError::Full(why)) => {
            debug!(error = %why, "control request refused: the buffer budget is spent");
            Err(Response::failed(exit::FAILED, why))
        }
        Err(e) => {
            debug!(error = %e, "unreadable control request");
            Err(Response::failed(
                exit::USAGE,
                format!("unreadable control request: {e}"),
            ))
        }
    }
}
