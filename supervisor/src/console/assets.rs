//! The console's two static files, compiled into the binary: no CDN, no
//! build step, nothing read from disk at run time.

use super::http::Response;

/// The script: follows the event stream and swaps the page in anew.
pub const APP_JS: &str = include_str!("assets/app.js");

/// The style sheet.
pub const APP_CSS: &str = include_str!("assets/app.css");

/// `/static/NAME`, or 404.
pub fn get(name: &str) -> Response {
    let (body, kind) = match name {
        "app.js" => (APP_JS, "text/javascript; charset=utf-8"),
        "app.css" => (APP_CSS, "text/css; charset=utf-8"),
        _ => return Response::text(404, "no such file"),
    };
    Response {
        status: 200,
        headers: vec![
            ("Content-Type", kind.into()),
            ("Cache-Control", "no-cache".into()),
        ],
        body: body.as_bytes().to_vec(),
    }
}
