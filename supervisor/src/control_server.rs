//! The supervisor's end of the control socket: binding (never stealing a
//! live socket), admission by peer credentials, and answering requests.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, bail};
use nix::unistd::{Gid, Uid};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

use crate::config::SupervisorSettings;
use crate::control::{self, Envelope, Request, Response, SOCKET_NAME};
use crate::deployment;
use crate::exit;
use crate::supervisor::Registry;

/// Where the control socket lives: `$RUNTIME_DIRECTORY` when systemd sets
/// one, else the state dir.
pub fn socket_path(settings: &SupervisorSettings) -> PathBuf {
    match std::env::var_os("RUNTIME_DIRECTORY") {
        // systemd may list several directories separated by ':'.
        Some(dirs) if !dirs.is_empty() => {
            let dirs = dirs.to_string_lossy().into_owned();
            let first = dirs.split(':').next().unwrap_or(&dirs).to_owned();
            PathBuf::from(first).join(SOCKET_NAME)
        }
        _ => settings.state_dir.join(SOCKET_NAME),
    }
}

/// The bound control socket.
pub struct Server {
    listener: UnixListener,
    path: PathBuf,
    admin_gid: Option<Gid>,
    registry: Registry,
}

impl Server {
    /// Binds the socket with mode 0600. A stale socket (nobody answers) is
    /// replaced; a live one belongs to another supervisor and is refused.
    pub fn bind(settings: &SupervisorSettings, registry: Registry) -> anyhow::Result<Self> {
        let path = socket_path(settings);
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
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot set mode 0600 on {}", path.display()))?;
        let admin_gid = match &settings.admin_group {
            Some(name) => match nix::unistd::Group::from_name(name) {
                Ok(Some(g)) => Some(g.gid),
                _ => bail!("admin_group {name:?} does not exist; create it or remove the setting"),
            },
            None => None,
        };
        Ok(Self {
            listener,
            path,
            admin_gid,
            registry,
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
                    let registry = self.registry.clone();
                    let admin_gid = self.admin_gid;
                    tokio::spawn(async move { serve_client(stream, registry, admin_gid).await });
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

async fn serve_client(mut stream: UnixStream, registry: Registry, admin_gid: Option<Gid>) {
    let response = match stream.peer_cred() {
        Ok(cred) if admitted(cred.uid(), cred.gid(), admin_gid) => {
            match control::read_message::<Envelope>(&mut stream).await {
                Ok(envelope) if envelope.v != control::VERSION => Response::failed(
                    exit::USAGE,
                    format!(
                        "control protocol version {} is not spoken here (supervisor speaks {}); use a matching wfhost",
                        envelope.v,
                        control::VERSION
                    ),
                ),
                Ok(envelope) => answer(envelope.request, &registry).await,
                Err(e) => {
                    debug!(error = %e, "unreadable control request");
                    Response::failed(exit::USAGE, format!("unreadable control request: {e}"))
                }
            }
        }
        Ok(cred) => {
            warn!(uid = cred.uid(), pid = ?cred.pid(), "refused a control-socket client");
            Response::failed(
                exit::FAILED,
                format!(
                    "permission denied: uid {} is not root, the supervisor's user, or in its admin_group; \
                     run as one of those or ask for admin_group membership",
                    cred.uid()
                ),
            )
        }
        Err(e) => Response::failed(exit::FAILED, format!("cannot read peer credentials: {e}")),
    };
    let _ = control::write_message(&mut stream, &response).await;
}

fn lookup(registry: &Registry, id: &str) -> Result<deployment::DeploymentHandle, Response> {
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

async fn answer(request: Request, registry: &Registry) -> Response {
    match request {
        Request::Status => {
            let now = Instant::now();
            let handles: Vec<_> = registry
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .values()
                .cloned()
                .collect();
            let deployments: Vec<_> = handles.iter().map(|h| h.snapshot().to_json(now)).collect();
            Response::ok(serde_json::json!({ "deployments": deployments }))
        }
        Request::Kill { deployment } => match lookup(registry, &deployment) {
            Err(r) => r,
            Ok(handle) => match handle.requests.send(deployment::Request::Kill).await {
                Ok(()) => Response::ok(serde_json::json!({ "deployment": deployment })),
                Err(_) => Response::failed(
                    exit::FAILED,
                    format!("deployment {deployment:?} is shutting down"),
                ),
            },
        },
    }
}
