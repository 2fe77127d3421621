//! The console's pages, one file each, every one read through the
//! control socket's handlers (`answer_console`), so a page shows what the
//! CLI's command shows, and on a fleet host what the fleet's status says.

mod deployment;
mod fleet;
mod host;
mod journal;
mod mail;
mod questions;

use serde_json::Value;

use super::html;
use super::http::{Request, Response};
use crate::control::handlers::{Context, answer_console};
use crate::control::protocol;
use crate::login::Opened;

/// What a page is made with.
pub struct Seen<'a> {
    /// The handlers' context.
    pub ctx: &'a Context,
    /// The session.
    pub opened: &'a Opened,
    /// The request.
    pub request: &'a Request,
}

impl Seen<'_> {
    /// A control request's data, or its refusal's words.
    pub async fn ask(&self, request: protocol::Request) -> Result<Value, String> {
        let r = answer_console(request, &self.opened.who, self.ctx).await;
        match (r.ok, r.data) {
            (true, Some(data)) => Ok(data),
            _ => Err(r.error.unwrap_or_else(|| "the request failed".into())),
        }
    }

    /// A query field.
    pub fn query(&self, name: &str) -> Option<&str> {
        self.request
            .query
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// The whole page around `main`, following the stream from now.
    pub async fn page(&self, title: &str, main: &str) -> Response {
        let cursor = match self.ctx.shared.reader.call(|s| s.last_event_seq()).await {
            Ok(Ok(seq)) => seq,
            _ => 0,
        };
        Response::html(200, html::page(title, main, cursor, &self.opened.csrf))
    }
}

/// Answers a `GET`.
pub async fn get(request: &Request, ctx: &Context, opened: &Opened) -> Response {
    let seen = Seen {
        ctx,
        opened,
        request,
    };
    let path = request.path.as_str();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        [""] => host::page(&seen).await,
        ["d", id] if !id.is_empty() => deployment::page(&seen, id).await,
        ["mail"] => mail::list(&seen).await,
        ["mail", id] => match id.parse::<u64>() {
            Ok(id) => mail::item(&seen, id).await,
            Err(_) => not_found(opened),
        },
        ["questions"] => questions::page(&seen).await,
        ["dead"] => mail::dead(&seen).await,
        ["journal"] => journal::page(&seen).await,
        ["fleet"] => fleet::page(&seen).await,
        ["confirm"] => super::actions::confirm(&seen).await,
        _ => not_found(opened),
    }
}

/// 404, inside the frame (the visitor is logged in).
pub fn not_found(opened: &Opened) -> Response {
    let mut r = Response::html(
        404,
        html::page(
            "Not found",
            "<p>There is no such page. The navigation above lists them.</p>",
            0,
            &opened.csrf,
        ),
    );
    r.status = 404;
    r
}

/// Milliseconds as people read them, or a dash.
pub fn ms(v: &Value) -> String {
    v.as_u64().map_or_else(|| "–".to_owned(), crate::human::ms)
}

/// A Unix-ms time as RFC 3339, or a dash.
pub fn at(v: &Value) -> String {
    v.as_u64()
        .map_or_else(|| "–".to_owned(), crate::clock::rfc3339_ms)
}
