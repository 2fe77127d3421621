//! The console's actions: drain, resume, recycle, cancel a deployment's
//! runs, cancel an item, answer a question, retry and purge dead mail.
//! Each is asked for with a GET of `/confirm` (nothing changes), which
//! shows what will happen and the CLI command that does the same, and is
//! carried out only by that page's POST to `/do` (with the session's
//! CSRF token), through the control socket's own handler for it.

use std::collections::HashMap;

use serde_json::Value;

use super::html::{self, esc};
use super::http::{Request, Response};
use super::pages::Seen;
use crate::control::handlers::{Context, answer_console};
use crate::control::protocol;
use crate::login::Opened;

/// An action, read from a form's fields.
struct Action {
    /// The control request that carries it out.
    request: protocol::Request,
    /// What it does, in words.
    what: String,
    /// The CLI command that does the same.
    cli: String,
    /// The page to go back to.
    back: String,
}

/// `text` quoted for a POSIX shell.
pub fn quoted(text: &str) -> String {
    if !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@".contains(&b))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// The action the fields name, or why they name none.
fn action(f: &HashMap<String, String>) -> Result<Action, String> {
    let get = |k: &str| f.get(k).map(String::as_str).filter(|v| !v.is_empty());
    let deployment = || {
        get("deployment")
            .map(str::to_owned)
            .ok_or("no deployment named")
    };
    let id = || {
        get("id")
            .and_then(|i| i.parse::<u64>().ok())
            .ok_or("no mail item id given")
    };
    let d_back = |d: &str| format!("/d/{}", super::http::encode(d));
    Ok(match get("do").unwrap_or_default() {
        "drain" => {
            let d = deployment()?;
            Action {
                what: format!("Drain {d} under its drain budget; it stays drained until resumed."),
                cli: format!("wfhost drain {}", quoted(&d)),
                back: d_back(&d),
                request: protocol::Request::Drain { deployment: d },
            }
        }
        "resume" => {
            let d = deployment()?;
            Action {
                what: format!("Start {d} again and wait for it to be ready."),
                cli: format!("wfhost resume {}", quoted(&d)),
                back: d_back(&d),
                request: protocol::Request::Resume { deployment: d },
            }
        }
        "recycle" => {
            let d = deployment()?;
            Action {
                what: format!(
                    "Replace {d}'s children without losing mail, and wait for the new ones to be ready."
                ),
                cli: format!("wfhost recycle {}", quoted(&d)),
                back: d_back(&d),
                request: protocol::Request::Recycle {
                    deployment: d,
                    reason: None,
                },
            }
        }
        "cancel" => {
            let d = deployment()?;
            Action {
                what: format!("Cancel every run of {d} with a signed, journaled request."),
                cli: format!("wfhost cancel {}", quoted(&d)),
                back: d_back(&d),
                request: protocol::Request::Cancel {
                    deployment: d,
                    run: None,
                },
            }
        }
        "cancel-item" => {
            let id = id()?;
            Action {
                what: format!("Cancel mail item {id}."),
                cli: format!("wfhost mail cancel {id}"),
                back: format!("/mail/{id}"),
                request: protocol::Request::MailCancel { id, reason: None },
            }
        }
        "answer" => {
            let id = id()?;
            let key = get("key").ok_or("no question key given")?.to_owned();
            let text = get("value").ok_or("no answer given")?;
            let value: Value = serde_json::from_str(text)
                .map_err(|e| format!("the answer is not JSON ({e}); write true, 42, \"text\" or {{\"approved\": true}}"))?;
            let by = get("by").map(str::to_owned);
            let mut cli = format!("wfhost answer {id} {} {}", quoted(&key), quoted(text));
            if let Some(b) = &by {
                cli.push_str(&format!(" --by {}", quoted(b)));
            }
            Action {
                what: format!("Answer question {key:?} of mail item {id} with {}.", value),
                cli,
                back: format!("/mail/{id}"),
                request: protocol::Request::Answer {
                    id,
                    key,
                    value,
                    by,
                    peer: None,
                },
            }
        }
        "retry" => {
            let id = id()?;
            Action {
                what: format!(
                    "Put dead mail item {id} back at the head of its inbox, its failures reset."
                ),
                cli: format!("wfhost mail retry {id}"),
                back: format!("/mail/{id}"),
                request: protocol::Request::MailRetry {
                    id: Some(id),
                    dead: false,
                    deployment: None,
                },
            }
        }
        "retry-dead" => {
            let d = get("deployment").map(str::to_owned);
            let (whose, arg) = dead_of(d.as_deref());
            Action {
                what: format!("Retry the dead mail of {whose}."),
                cli: format!("wfhost mail retry --dead {arg}")
                    .trim_end()
                    .to_owned(),
                back: "/dead".into(),
                request: protocol::Request::MailRetry {
                    id: None,
                    dead: true,
                    deployment: d,
                },
            }
        }
        "purge" => {
            let d = get("deployment").map(str::to_owned);
            let (whose, arg) = dead_of(d.as_deref());
            Action {
                what: format!("Delete the dead mail of {whose} for good."),
                cli: format!("wfhost mail purge --dead {arg}")
                    .trim_end()
                    .to_owned(),
                back: "/dead".into(),
                request: protocol::Request::MailPurge {
                    deployment: d,
                    older_than_ms: None,
                },
            }
        }
        other => return Err(format!("no such action {other:?}")),
    })
}

/// Whose dead mail an action concerns: in words, and as the CLI's
/// argument (shell-quoted; empty for every deployment).
fn dead_of(deployment: Option<&str>) -> (&str, String) {
    (
        deployment.unwrap_or("every deployment"),
        deployment.map(quoted).unwrap_or_default(),
    )
}

/// The fields an action's form carries on to `/do`.
const FIELDS: [&str; 6] = ["do", "deployment", "id", "key", "value", "by"];

/// `GET /confirm?do=…`: what the action will do, the CLI command, and
/// the form that does it.
pub async fn confirm(seen: &Seen<'_>) -> Response {
    let main = match action(&seen.request.query) {
        Ok(a) => {
            let mut form = String::from("<form method=\"post\" action=\"/do\" class=\"confirm\">");
            form.push_str(&format!(
                "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
                esc(&seen.opened.csrf)
            ));
            for k in FIELDS {
                if let Some(v) = seen.request.query.get(k) {
                    form.push_str(&format!(
                        "<input type=\"hidden\" name=\"{k}\" value=\"{}\">",
                        esc(v)
                    ));
                }
            }
            form.push_str("<button type=\"submit\" id=\"confirm\">Confirm</button></form>");
            format!(
                "<p class=\"what\">{}</p>{}{form}<p>{}</p>",
                esc(&a.what),
                html::cli(&a.cli),
                html::link(&a.back, "Back, doing nothing")
            )
        }
        Err(e) => html::refusal(&e),
    };
    seen.page("Confirm", &main).await
}

/// `POST /do`: carries the action out through its handler and shows the
/// answer, or the refusal, as the CLI would get it.
pub async fn carry_out(request: &Request, ctx: &Context, opened: &Opened) -> Response {
    let seen = Seen {
        ctx,
        opened,
        request,
    };
    let form = request.form();
    let a = match action(&form) {
        Ok(a) => a,
        Err(e) => return seen.page("Refused", &html::refusal(&e)).await,
    };
    let name = a.request.name();
    let r = answer_console(a.request, &opened.who, ctx).await;
    tracing::info!(action = %name, by = %opened.who.name(), ok = r.ok, "a console action");
    let mut main = format!("<p class=\"what\">{}</p>", esc(&a.what));
    if r.ok {
        let data = r.data.unwrap_or(Value::Null);
        main.push_str(&format!(
            "<p class=\"ok\" id=\"outcome\">done</p><pre class=\"answer\">{}</pre>",
            esc(&serde_json::to_string_pretty(&data).unwrap_or_default())
        ));
    } else {
        main.push_str(&html::refusal(&format!(
            "refused: {}",
            r.error.unwrap_or_else(|| "the request failed".into())
        )));
    }
    main.push_str(&html::cli(&a.cli));
    main.push_str(&format!("<p>{}</p>", html::link(&a.back, "Back")));
    seen.page(if r.ok { "Done" } else { "Refused" }, &main)
        .await
}
