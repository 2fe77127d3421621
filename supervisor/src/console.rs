//! The console in the browser (DESIGN §8, the console): served by the
//! supervisor itself when `[console] listen` is set, off by default.
//!
//! Every page is plain HTML that works without JavaScript; the one
//! script (`/static/app.js`, compiled in like the style sheet) only
//! follows the durable event stream (server-sent events from the cursor
//! the page was made at, resumed by `Last-Event-ID`) and swaps in the
//! page anew when something happened. Reads and actions go through the
//! control socket's own handlers (`control::handlers::answer_console`),
//! so the console shows what the CLI shows and every action is carried
//! out, refused and journaled exactly as the CLI's is, naming the user
//! who minted the session's login link.
//!
//! Who may use it: a session opened by a one-time link from `wfhost
//! console token` (a control request, so only those the control socket
//! admits), an `HttpOnly`, `SameSite=Strict` cookie (`Secure` under
//! TLS), a CSRF token in every form that changes anything, and a strict
//! Content-Security-Policy on every response. Plain HTTP only on
//! loopback or a Unix socket (`config/console.rs` refuses the rest).

mod actions;
mod assets;
mod html;
pub mod http;
mod live;
mod pages;
mod tls;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::config::{ConsoleListen, ConsoleSettings};
use crate::control::handlers::Context;
use crate::login::Opened;
use http::{Request, Response, Unread};

/// The session cookie's name.
const COOKIE: &str = "wfhost_console";

/// Most connections served at once (each open page holds one for its
/// event stream); past it a connection is answered 503 at once.
const MAX_CONNECTIONS: usize = 64;

/// How long a TLS handshake may take.
const HANDSHAKE_TIME: Duration = Duration::from_secs(10);

/// The console's listener, bound at start-up (a port in use stops the
/// start, as the metrics endpoint's does).
pub struct Bound {
    listener: Listener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    url: String,
}

enum Listener {
    Tcp(TcpListener),
    Unix(UnixListener, PathBuf),
}

impl Drop for Listener {
    fn drop(&mut self) {
        if let Self::Unix(_, path) = self {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Binds the console's address and loads its TLS files.
pub async fn bind(settings: &ConsoleSettings) -> anyhow::Result<Bound> {
    let tls = match &settings.tls {
        Some(files) => Some(tls::acceptor(files)?),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (listener, url) = match &settings.listen {
        ConsoleListen::Tcp(addr) => {
            let listener = TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot bind the console on {addr} ([console] listen)"))?;
            let at = listener.local_addr().unwrap_or(*addr);
            let host = if at.ip().is_unspecified() {
                crate::config::hostname().unwrap_or_else(|| "localhost".into())
            } else {
                at.ip().to_string()
            };
            let host = if at.is_ipv6() && !at.ip().is_unspecified() {
                format!("[{host}]")
            } else {
                host
            };
            (
                Listener::Tcp(listener),
                format!("{scheme}://{host}:{}", at.port()),
            )
        }
        ConsoleListen::Unix(path) => {
            // A socket left by a supervisor that died is replaced; the
            // control socket, bound first, already refused a live one.
            let _ = std::fs::remove_file(path);
            let listener = UnixListener::bind(path).with_context(|| {
                format!(
                    "cannot bind the console on {} ([console] listen)",
                    path.display()
                )
            })?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .with_context(|| format!("cannot set the mode of {}", path.display()))?;
            (
                Listener::Unix(listener, path.clone()),
                format!("{scheme}://localhost"),
            )
        }
    };
    Ok(Bound { listener, tls, url })
}

/// What every connection is served with.
struct Served {
    ctx: Context,
    tls: bool,
}

/// Serves the console until the task is aborted.
pub async fn serve(bound: Bound, ctx: Context) {
    ctx.shared.door.open(bound.url.clone());
    info!(url = %bound.url, "serving the console (`wfhost console token` prints a login link)");
    let served = Arc::new(Served {
        ctx,
        tls: bound.tls.is_some(),
    });
    let seats = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let accepted = match &bound.listener {
            Listener::Tcp(l) => l.accept().await.map(|(s, _)| Stream::Tcp(s)),
            Listener::Unix(l, _) => l.accept().await.map(|(s, _)| Stream::Unix(s)),
        };
        let stream = match accepted {
            Ok(s) => s,
            Err(e) => {
                warn!(error = %e, "console accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let seat = seats.clone().try_acquire_owned();
        let (tls, served) = (bound.tls.clone(), served.clone());
        tokio::spawn(async move {
            let Ok(_seat) = seat else {
                let busy = Response::text(
                    503,
                    "the console serves its limit of connections; close a tab and try again",
                );
                let mut stream = stream;
                let _ = http::write(&mut stream, &busy, tls.is_some()).await;
                return;
            };
            match tls {
                Some(acceptor) => {
                    match tokio::time::timeout(HANDSHAKE_TIME, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => connection(s, &served).await,
                        Ok(Err(e)) => debug!(error = %e, "console TLS handshake failed"),
                        Err(_) => debug!("console TLS handshake timed out"),
                    }
                }
                None => connection(stream, &served).await,
            }
        });
    }
}

/// A TCP or Unix stream, one type for the TLS acceptor and the server.
enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_read(cx, buf),
            Self::Unix(s) => std::pin::Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_write(cx, buf),
            Self::Unix(s) => std::pin::Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_flush(cx),
            Self::Unix(s) => std::pin::Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            Self::Tcp(s) => std::pin::Pin::new(s).poll_shutdown(cx),
            Self::Unix(s) => std::pin::Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// Serves one connection: one request, one response (or an event stream).
async fn connection<S: AsyncRead + AsyncWrite + Unpin + Send>(mut stream: S, served: &Served) {
    let read = tokio::time::timeout(http::REQUEST_TIME, http::read(&mut stream)).await;
    let request = match read {
        Ok(Ok(r)) => r,
        Ok(Err(Unread::Refuse(status, why))) => {
            let _ = http::write(&mut stream, &Response::text(status, why), served.tls).await;
            return;
        }
        Ok(Err(Unread::Gone)) | Err(_) => return,
    };
    if request.method == "GET" && request.path == "/live" {
        match session(&request, served) {
            Some((id, _)) => {
                // The stream ends with its session (a logout, or the end
                // of its 12 hours), as every other request does.
                let open = || served.ctx.shared.door.session(&id).is_some();
                return live::stream(stream, &request, &served.ctx, served.tls, open).await;
            }
            None => {
                let _ = http::write(&mut stream, &unauthorised(), served.tls).await;
                return;
            }
        }
    }
    let response = route(&request, served).await;
    let _ = http::write(&mut stream, &response, served.tls).await;
}

/// The session the request's cookie names, if it is open.
fn session(request: &Request, served: &Served) -> Option<(String, Opened)> {
    let id = request.cookie(COOKIE)?;
    let opened = served.ctx.shared.door.session(id)?;
    Some((id.to_owned(), opened))
}

/// What anyone without a session gets, whatever they asked for.
fn unauthorised() -> Response {
    Response::html(
        403,
        html::bare(
            "Log in",
            "<p>The console needs a login link. On the supervisor's host, run</p>\
             <pre>wfhost console token</pre><p>and open the link it prints (once; it expires).</p>",
        ),
    )
}

/// Answers one request.
async fn route(request: &Request, served: &Served) -> Response {
    let (method, path) = (request.method.as_str(), request.path.as_str());
    // The two routes open to everyone.
    if let Some(asset) = path.strip_prefix("/static/") {
        return match method {
            "GET" | "HEAD" => assets::get(asset),
            _ => Response::text(405, "method not allowed"),
        };
    }
    if path == "/login" {
        return match method {
            "GET" => login(request, served),
            _ => Response::text(405, "method not allowed"),
        };
    }
    let Some((id, opened)) = session(request, served) else {
        return unauthorised();
    };
    let ctx = &served.ctx;
    match method {
        "GET" => pages::get(request, ctx, &opened).await,
        "POST" => {
            if let Err(refused) = csrf(request, &opened) {
                return refused;
            }
            match path {
                "/logout" => {
                    ctx.shared.door.end(&id);
                    let mut r = Response::see_other("/login");
                    r.headers.push(("Set-Cookie", cookie("", 0, served.tls)));
                    r
                }
                "/do" => actions::carry_out(request, ctx, &opened).await,
                _ => pages::not_found(&opened),
            }
        }
        _ => Response::text(405, "method not allowed"),
    }
}

/// A state-changing request must carry the session's CSRF token, and
/// must not come from another site.
fn csrf(request: &Request, opened: &Opened) -> Result<(), Response> {
    let cross = request
        .header("sec-fetch-site")
        .is_some_and(|s| s == "cross-site");
    let form = request.form();
    let given = form.get("csrf").map(String::as_str).unwrap_or_default();
    if cross || !same(given.as_bytes(), opened.csrf.as_bytes()) {
        return Err(Response::html(
            403,
            html::bare(
                "Refused",
                "<p>This form's CSRF token is missing or wrong, so nothing was done. Open the page again and resubmit.</p>",
            ),
        ));
    }
    Ok(())
}

/// Equal bytes, compared in time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The session cookie (empty with `max_age` 0: removed).
fn cookie(value: &str, max_age: u64, tls: bool) -> String {
    let secure = if tls { "; Secure" } else { "" };
    format!("{COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}")
}

/// `GET /login?token=…`: a one-time token opens a session, and the
/// browser is sent on to the host page (so the token leaves its address
/// bar and history entry).
fn login(request: &Request, served: &Served) -> Response {
    let token = request
        .query
        .get("token")
        .map(String::as_str)
        .unwrap_or_default();
    match served.ctx.shared.door.redeem(token) {
        Some((id, opened)) => {
            info!(by = %opened.who.name(), "a console session was opened");
            let mut r = Response::see_other("/");
            let max_age = wfhost_policy::login::SESSION_TTL.as_secs();
            r.headers
                .push(("Set-Cookie", cookie(&id, max_age, served.tls)));
            r
        }
        None if token.is_empty() => unauthorised(),
        None => Response::html(
            403,
            html::bare(
                "Log in",
                "<p class=\"refused\">This login link was used already or has expired.</p>\
                 <p>Run <code>wfhost console token</code> on the supervisor's host for a new one.</p>",
            ),
        ),
    }
}
