//! The pages' HTML: escaping, the frame every page shares, and the small
//! pieces pages are made of. Everything a child or a producer wrote
//! (deployment states are ours; step names, reasons, prompts, payloads,
//! progress, log lines are theirs) goes through [`esc`] at the point it
//! is written into a page, so a hostile child cannot run script in an
//! operator's browser; the Content-Security-Policy is the second wall.

use std::fmt::Write as _;

use serde_json::Value;

use super::http::encode;

/// `text` safe inside HTML text and quoted attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A JSON value as text for a page: strings as they are, everything
/// else as compact JSON, cut at `max` characters; escaped.
pub fn value(v: &Value, max: usize) -> String {
    let text = match v {
        Value::Null => "–".to_owned(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let cut: String = text.chars().take(max).collect();
    if cut.len() < text.len() {
        esc(&format!("{cut}…"))
    } else {
        esc(&cut)
    }
}

/// A link to `href` (ours: built from encoded parts) labelled `label`.
pub fn link(href: &str, label: &str) -> String {
    format!("<a href=\"{}\">{}</a>", esc(href), esc(label))
}

/// The link to a deployment's page.
pub fn deployment_link(id: &str) -> String {
    link(&format!("/d/{}", encode(id)), id)
}

/// The link to a mail item's page.
pub fn mail_link(id: u64) -> String {
    link(&format!("/mail/{id}"), &id.to_string())
}

/// A table with a header row and rows of ready HTML cells.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = String::from("<table><thead><tr>");
    for h in header {
        let _ = write!(out, "<th>{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for row in rows {
        out.push_str("<tr>");
        for cell in row {
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
    out
}

/// A refusal or an error, shown where it happened.
pub fn refusal(text: &str) -> String {
    format!("<p class=\"refused\" role=\"alert\">{}</p>", esc(text))
}

/// A note.
pub fn note(text: &str) -> String {
    format!("<p class=\"note\">{}</p>", esc(text))
}

/// The CLI command that does the same, shown beside every action.
pub fn cli(command: &str) -> String {
    format!(
        "<p class=\"cli\">The same from a shell: <code>{}</code></p>",
        esc(command)
    )
}

/// A button that asks for confirmation: a GET of `/confirm` with the
/// action's fields (nothing changes until the confirm page's POST).
pub fn confirm_button(label: &str, fields: &[(&str, &str)]) -> String {
    let mut out = String::from("<form class=\"inline\" method=\"get\" action=\"/confirm\">");
    for (k, v) in fields {
        let _ = write!(
            out,
            "<input type=\"hidden\" name=\"{}\" value=\"{}\">",
            esc(k),
            esc(v)
        );
    }
    let _ = write!(
        out,
        "<button type=\"submit\">{}</button></form>",
        esc(label)
    );
    out
}

/// Where a page sits in the navigation.
const NAV: [(&str, &str); 6] = [
    ("/", "Host"),
    ("/mail", "Mail"),
    ("/questions", "Questions"),
    ("/dead", "Dead mail"),
    ("/journal", "Journal"),
    ("/fleet", "Fleet"),
];

/// A whole page: `title`, the navigation, and `main` (ready HTML).
/// `cursor` is the event stream's position the page shows, from which
/// the script follows the stream (`/static/app.js`); `csrf` the session's
/// token for the logout form.
pub fn page(title: &str, main: &str, cursor: u64, csrf: &str) -> String {
    let mut nav = String::new();
    for (href, label) in NAV {
        let _ = write!(nav, "<a href=\"{href}\">{label}</a> ");
    }
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{title} · wfhost</title><link rel=\"stylesheet\" href=\"/static/app.css\">\
<script src=\"/static/app.js\" defer></script></head>\
<body data-cursor=\"{cursor}\"><header><strong>wfhost</strong> <nav>{nav}</nav>\
<form class=\"inline logout\" method=\"post\" action=\"/logout\">\
<input type=\"hidden\" name=\"csrf\" value=\"{csrf}\"><button type=\"submit\">Log out</button></form>\
<span id=\"live\" class=\"live\"></span></header>\
<main id=\"main\"><h1>{title}</h1>{main}</main></body></html>\n",
        title = esc(title),
        csrf = esc(csrf),
    )
}

/// A page for someone not logged in (no navigation, no script).
pub fn bare(title: &str, main: &str) -> String {
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>{title} · wfhost</title><link rel=\"stylesheet\" href=\"/static/app.css\"></head>\
<body><main><h1>{title}</h1>{main}</main></body></html>\n",
        title = esc(title)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hostile_text_is_inert() {
        let hostile = "<script>alert('x')</script>\"&";
        assert_eq!(
            esc(hostile),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;"
        );
        let v = value(
            &serde_json::json!({"p": "<img src=x onerror=alert(1)>"}),
            200,
        );
        assert!(!v.contains('<') && !v.contains('"'));
    }
}
