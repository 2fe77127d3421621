//! `[console]`: where the browser console listens, and its TLS files,
//! checked. Plain HTTP is served on loopback (or a Unix socket) only: a
//! session cookie and every answer would cross the network readable, so
//! a non-loopback address without `tls_cert` and `tls_key` is refused
//! here, naming the setting.

use std::net::SocketAddr;

use toml::Spanned;

use super::error::Problem;
use super::raw::RawConsole;
use super::resolve;
use super::types::{ConsoleListen, ConsoleSettings, ConsoleTls};

/// The checked `[console]`, if the file has the table; relative paths
/// are relative to `dir`, the config file's directory.
pub(super) fn settings(
    raw: Option<Spanned<RawConsole>>,
    dir: &std::path::Path,
) -> Result<Option<ConsoleSettings>, Problem> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let table = raw.span();
    let raw = raw.into_inner();
    let Some(listen) = raw.listen else {
        return Err(Problem::new(
            table,
            "[console] has no listen",
            "set listen = \"127.0.0.1:9180\" (or a Unix socket path such as \"/run/wfhost/console.sock\"), or remove [console] to keep the console off",
        ));
    };
    let text = listen.get_ref().0.clone();
    let listen_at = if text.starts_with('/') || text.starts_with('.') {
        ConsoleListen::Unix(resolve::relative_to(dir, &text))
    } else {
        match text.parse::<SocketAddr>() {
            Ok(addr) => ConsoleListen::Tcp(addr),
            Err(_) => {
                return Err(Problem::new(
                    listen.span(),
                    format!("invalid console listen {text:?}"),
                    "use IP:PORT, e.g. \"127.0.0.1:9180\", or an absolute path for a Unix socket",
                ));
            }
        }
    };
    let file = |f: &Option<Spanned<super::raw::Text<{ super::raw::PATH_MAX }>>>| {
        f.as_ref()
            .map(|f| (resolve::relative_to(dir, &f.get_ref().0), f.span()))
    };
    let (cert, key) = (file(&raw.tls_cert), file(&raw.tls_key));
    let tls = match (cert, key) {
        (Some((cert, _)), Some((key, _))) => Some((cert, key)),
        (None, None) => None,
        (Some((_, span)), None) | (None, Some((_, span))) => {
            return Err(Problem::new(
                span,
                "[console] names one of tls_cert and tls_key without the other",
                "set both (a PEM certificate chain and its PEM private key), or neither to serve plain HTTP on loopback",
            ));
        }
    };
    if let (ConsoleListen::Tcp(addr), None) = (&listen_at, &tls)
        && !addr.ip().is_loopback()
    {
        return Err(Problem::new(
            listen.span(),
            format!(
                "console listen {addr} is not a loopback address, and [console] has no tls_cert and tls_key"
            ),
            "the console serves plain HTTP on loopback only: listen on 127.0.0.1 (and reach it through an SSH tunnel: ssh -L 9180:127.0.0.1:9180 HOST), or set tls_cert and tls_key",
        ));
    }
    for (path, span) in [file(&raw.tls_cert), file(&raw.tls_key)]
        .into_iter()
        .flatten()
    {
        if !path.is_file() {
            return Err(Problem::new(
                span,
                format!("{} is not a readable file", path.display()),
                "name an existing PEM file (relative paths are relative to the config file's directory)",
            ));
        }
    }
    Ok(Some(ConsoleSettings {
        listen: listen_at,
        tls: tls.map(|(cert, key)| ConsoleTls { cert, key }),
    }))
}

/// How a reload's comparison shows `[console]`.
pub fn describe(console: Option<&ConsoleSettings>) -> String {
    match console {
        None => "off".into(),
        Some(c) => {
            let at = match &c.listen {
                ConsoleListen::Tcp(a) => a.to_string(),
                ConsoleListen::Unix(p) => p.display().to_string(),
            };
            match &c.tls {
                Some(t) => format!("{at} with TLS ({})", t.cert.display()),
                None => at,
            }
        }
    }
}
