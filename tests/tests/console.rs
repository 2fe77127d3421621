//! The browser console (`[console]`) as an operator's browser and an
//! attacker's requests meet it, against the real `wfhost supervise`: a
//! session needed on every route but the login and the static files, a
//! strict Content-Security-Policy on every response, CSRF refused, a
//! hostile child's words rendered inert, actions carried out and
//! journaled as the console user's, a non-loopback address without TLS
//! refused, the body bound, HTTPS served; and a real Chromium driven
//! through the whole operator's story (`tests/console/browser.mjs`).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use wfhost_tests::{
    LONG, Supervisor, TempDir, command, deployment, ok, stderr, testchild, wait_for, wfhost,
};

/// A loopback port free right now.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// An answer, as read off the wire.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

/// One request to the console on `port`, raw HTTP/1.1.
fn http(port: u16, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the console");
    s.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    if method == "POST" {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("write the request");
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    Answer {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

/// Percent-encoding for a form field.
fn enc(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// The `[console]` table on `port`.
fn console(port: u16) -> String {
    format!("[console]\nlisten = \"127.0.0.1:{port}\"\n\n")
}

/// The conformance child (protocol 3), which does what each payload says.
fn asking(id: &str) -> String {
    deployment(
        id,
        &command(&["{bin}/wfhost-child", "conformance", "--protocol", "3"]),
        "",
    )
}

/// A logged-in session: the cookie header's value and the CSRF token.
struct Session {
    cookie: String,
    csrf: String,
}

/// A deployment of `poison` test children: an item `poison` kills its
/// child (one delivery, so it goes dead at once) until the file `cured`
/// exists.
fn poisoned(cured: &Path) -> String {
    deployment(
        "poisoned",
        &testchild("poison"),
        &format!(
            "max_deliveries = 1\nenv = {{ WFH_CURED = \"{}\" }}",
            cured.display()
        ),
    )
}

/// `wfhost console token`'s link, used once.
fn login(sup: &Supervisor, port: u16) -> Session {
    let url = ok("console token", &sup.client(&["console", "token"]));
    let url = url.trim();
    let path = url
        .split_once(&format!("127.0.0.1:{port}"))
        .map(|(_, p)| p.to_owned())
        .unwrap_or_else(|| panic!("a link to port {port}: {url:?}"));
    let r = http(port, "GET", &path, &[], "");
    assert_eq!(r.status, 303, "{}", r.head);
    let set = r.header("set-cookie").expect("a session cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains("Secure"), "no Secure on plain HTTP: {set}");
    let cookie = set.split(';').next().unwrap_or_default().to_owned();
    // The link is used up.
    assert_eq!(http(port, "GET", &path, &[], "").status, 403);
    let page = http(port, "GET", "/", &[("Cookie", &cookie)], "");
    assert_eq!(page.status, 200, "{}", page.body);
    let csrf = page
        .body
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .expect("a CSRF token on the page")
        .to_owned();
    Session { cookie, csrf }
}

impl Session {
    fn get(&self, port: u16, path: &str) -> Answer {
        http(port, "GET", path, &[("Cookie", &self.cookie)], "")
    }

    fn post(&self, port: u16, path: &str, fields: &[(&str, &str)]) -> Answer {
        let mut body = format!("csrf={}", enc(&self.csrf));
        for (k, v) in fields {
            body.push_str(&format!("&{k}={}", enc(v)));
        }
        http(port, "POST", path, &[("Cookie", &self.cookie)], &body)
    }
}

const ROUTES: [&str; 12] = [
    "/",
    "/d/orders",
    "/mail",
    "/mail/1",
    "/questions",
    "/dead",
    "/journal",
    "/journal?verify=1",
    "/fleet",
    "/confirm?do=drain&deployment=orders",
    "/live",
    "/no/such/page",
];

#[test]
fn every_route_needs_a_session_and_every_answer_carries_the_policy() {
    let port = free_port();
    let sup = Supervisor::start(&format!("{}{}", console(port), asking("orders")));
    sup.wait_deployment("orders", "ready", LONG, |d| d["state"] == "ready");
    for path in ROUTES {
        let r = http(port, "GET", path, &[], "");
        assert_eq!(r.status, 403, "GET {path} without a session: {}", r.head);
        assert!(r.body.contains("wfhost console token"), "{}", r.body);
    }
    for path in ["/do", "/logout", "/"] {
        let r = http(port, "POST", path, &[], "do=drain&deployment=orders");
        assert_eq!(r.status, 403, "POST {path} without a session");
    }
    let forged = http(port, "GET", "/", &[("Cookie", "wfhost_console=00ff")], "");
    assert_eq!(forged.status, 403, "a made-up session id");
    assert_eq!(http(port, "GET", "/login?token=abc", &[], "").status, 403);
    let js = http(port, "GET", "/static/app.js", &[], "");
    assert_eq!(js.status, 200);
    assert!(js.body.contains("EventSource"));
    assert_eq!(http(port, "GET", "/static/app.css", &[], "").status, 200);

    let s = login(&sup, port);
    for path in ROUTES {
        let r = if path == "/live" {
            // An event stream never ends: read its head only.
            let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(c, "GET /live HTTP/1.1\r\nCookie: {}\r\n\r\n", s.cookie).unwrap();
            let mut buf = [0u8; 1024];
            let n = c.read(&mut buf).unwrap();
            let head = String::from_utf8_lossy(&buf[..n]).into_owned();
            assert!(head.contains("text/event-stream"), "{head}");
            Answer {
                status: 200,
                head,
                body: String::new(),
            }
        } else {
            s.get(port, path)
        };
        let expected = if path == "/no/such/page" || path == "/mail/1" {
            404
        } else {
            200
        };
        let expected = if path == "/mail/1" { 200 } else { expected };
        assert_eq!(r.status, expected, "GET {path} with a session: {}", r.body);
        let csp = r
            .header("content-security-policy")
            .unwrap_or_else(|| panic!("no CSP on {path}"));
        assert!(
            csp.contains("default-src 'none'") && csp.contains("script-src 'self'"),
            "{csp}"
        );
        assert!(!csp.contains("unsafe-inline"), "{csp}");
        assert_eq!(
            r.header("x-content-type-options").as_deref(),
            Some("nosniff")
        );
        assert!(!r.body.contains("<script>"), "no inline script on {path}");
    }
    assert_eq!(s.get(port, "/static/nothing").status, 404);
    assert_eq!(
        http(port, "PUT", "/", &[("Cookie", &s.cookie)], "").status,
        405
    );
    // The journal page names the head and verifies.
    let j = s.get(port, "/journal?verify=1");
    assert!(
        j.body.contains("id=\"verdict\"") && j.body.contains("verified:"),
        "{}",
        j.body
    );
    // A logout ends the session.
    assert_eq!(s.post(port, "/logout", &[]).status, 303);
    assert_eq!(s.get(port, "/").status, 403);
}

#[test]
fn a_state_change_without_the_csrf_token_is_refused() {
    let port = free_port();
    let sup = Supervisor::start(&format!("{}{}", console(port), asking("orders")));
    sup.wait_deployment("orders", "ready", LONG, |d| d["state"] == "ready");
    let s = login(&sup, port);
    let drain = "do=drain&deployment=orders";
    for body in [
        drain.to_owned(),
        format!("{drain}&csrf=00"),
        format!("{drain}&csrf={}x", s.csrf),
    ] {
        let r = http(port, "POST", "/do", &[("Cookie", &s.cookie)], &body);
        assert_eq!(r.status, 403, "{body}: {}", r.body);
        assert!(r.body.contains("CSRF"), "{}", r.body);
    }
    // The right token from another site is refused too.
    let cross = http(
        port,
        "POST",
        "/do",
        &[("Cookie", &s.cookie), ("Sec-Fetch-Site", "cross-site")],
        &format!("{drain}&csrf={}", s.csrf),
    );
    assert_eq!(cross.status, 403);
    assert_eq!(
        sup.deployment("orders")["state"],
        "ready",
        "nothing was drained"
    );
    // The confirm page shows the CLI command and changes nothing.
    let confirm = s.get(port, "/confirm?do=drain&deployment=orders");
    assert!(
        confirm.body.contains("wfhost drain orders"),
        "{}",
        confirm.body
    );
    assert_eq!(sup.deployment("orders")["state"], "ready");
    let done = s.post(port, "/do", &[("do", "drain"), ("deployment", "orders")]);
    assert_eq!(done.status, 200);
    assert!(done.body.contains("id=\"outcome\""), "{}", done.body);
    sup.wait_deployment("orders", "drained", LONG, |d| d["state"] == "drained");
    let resumed = s.post(port, "/do", &[("do", "resume"), ("deployment", "orders")]);
    assert!(resumed.body.contains("id=\"outcome\""), "{}", resumed.body);
    sup.wait_deployment("orders", "ready", LONG, |d| d["state"] == "ready");
}

#[test]
fn a_hostile_child_s_words_are_inert_and_an_answer_is_journaled_as_the_console_user_s() {
    let port = free_port();
    let sup = Supervisor::start(&format!("{}{}", console(port), asking("orders")));
    sup.wait_deployment("orders", "ready", LONG, |d| d["state"] == "ready");
    let hostile = r#"{"run":"<script>alert('run')</script>","steps":[{"name":"<script>alert('step')</script>","drain":"wait","ms":1500}],"progress":["<img src=x onerror=alert(1)>"],"ask":{"key":"<script>k</script>","prompt":{"order":"<script>alert('prompt')</script>"}}}"#;
    ok("send", &sup.client(&["send", "orders", hostile]));
    let s = login(&sup, port);
    // The step, while it runs.
    let page = wait_for("the hostile step on the page", LONG, || {
        let r = s.get(port, "/d/orders");
        r.body.contains("alert(&#39;step&#39;)").then_some(r)
    });
    assert!(
        page.body
            .contains("&lt;script&gt;alert(&#39;step&#39;)&lt;/script&gt;")
    );
    assert!(!page.body.contains("<script>alert"), "{}", page.body);
    let q = wait_for("the hostile question", LONG, || {
        let r = s.get(port, "/questions");
        r.body
            .contains("prompt")
            .then_some(r)
            .filter(|r| r.body.contains("alert"))
    });
    assert!(!q.body.contains("<script>"), "{}", q.body);
    assert!(
        q.body.contains("&lt;script&gt;alert(&#39;prompt&#39;)"),
        "{}",
        q.body
    );
    for path in ["/mail/1", "/mail", "/"] {
        let r = s.get(port, path);
        assert!(
            !r.body.contains("<script>") && !r.body.contains("<img"),
            "{path}: {}",
            r.body
        );
    }
    // Answer through the console: confirm shows the CLI, then it is given.
    let key = "<script>k</script>";
    let confirm = s.get(
        port,
        &format!(
            "/confirm?do=answer&id=1&key={}&value={}",
            enc(key),
            enc("{\"ok\":true}")
        ),
    );
    assert!(
        confirm.body.contains("wfhost answer 1 "),
        "{}",
        confirm.body
    );
    assert!(!confirm.body.contains("<script>"), "{}", confirm.body);
    let answered = s.post(
        port,
        "/do",
        &[
            ("do", "answer"),
            ("id", "1"),
            ("key", key),
            ("value", "{\"ok\":true}"),
            ("by", "ana"),
        ],
    );
    assert!(
        answered.body.contains("id=\"outcome\""),
        "{}",
        answered.body
    );
    wait_for("the item done", LONG, || {
        let r = s.get(port, "/mail/1");
        r.body.contains("id=\"outcome\">succeeded").then_some(())
    });
    // Another answer is refused, and the page says why.
    let again = s.post(
        port,
        "/do",
        &[
            ("do", "answer"),
            ("id", "1"),
            ("key", key),
            ("value", "false"),
        ],
    );
    assert!(
        again.body.contains("class=\"refused\"") && again.body.contains("already"),
        "{}",
        again.body
    );
    let journal = sup.journal();
    let record = journal
        .iter()
        .find(|r| r["kind"] == "question_answered")
        .expect("a question_answered record");
    let body = record["body"].to_string();
    assert!(body.contains("console") && body.contains("ana"), "{body}");
}

#[test]
fn dead_mail_is_retried_and_purged_from_the_console() {
    let port = free_port();
    let dir = TempDir::new();
    let cured = dir.join("cured");
    let body = format!("{}{}", console(port), poisoned(&cured));
    let sup = Supervisor::start(&body);
    sup.wait_deployment("poisoned", "ready", LONG, |d| d["state"] == "ready");
    ok("send", &sup.client(&["send", "poisoned", "poison"]));
    ok("send", &sup.client(&["send", "poisoned", "poison"]));
    sup.wait_deployment("poisoned", "two dead", LONG, |d| d["mail"]["dead"] == 2);
    let s = login(&sup, port);
    let dead = s.get(port, "/dead");
    assert!(
        dead.body.contains("do=retry") || dead.body.contains("value=\"retry\""),
        "{}",
        dead.body
    );
    std::fs::write(&cured, "").unwrap();
    let r = s.post(port, "/do", &[("do", "retry"), ("id", "1")]);
    assert!(r.body.contains("id=\"outcome\""), "{}", r.body);
    wait_for("item 1 done", LONG, || {
        s.get(port, "/mail/1")
            .body
            .contains("id=\"outcome\">succeeded")
            .then_some(())
    });
    let p = s.post(port, "/do", &[("do", "purge"), ("deployment", "poisoned")]);
    assert!(p.body.contains("&quot;count&quot;: 1"), "{}", p.body);
    let journal = sup.journal();
    for kind in ["mail_retried", "mail_purged"] {
        let r = journal
            .iter()
            .find(|r| r["kind"] == kind)
            .unwrap_or_else(|| panic!("no {kind}"));
        assert!(
            r["body"].to_string().contains("in the console"),
            "{}",
            r["body"]
        );
    }
}

#[test]
fn a_non_loopback_listen_without_tls_is_refused() {
    let dir = TempDir::new();
    let path = dir.join("wfhost.toml");
    let text = format!(
        "[supervisor]\nstate_dir = \"{}\"\n\n[console]\nlisten = \"0.0.0.0:9180\"\n",
        dir.join("state").display()
    );
    std::fs::write(&path, text).unwrap();
    let path = path.display().to_string();
    let out = wfhost(&["check-config", &path]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("listen") && err.contains("tls_cert") && err.contains("loopback"),
        "{err}"
    );
    let out = wfhost(&["supervise", "--config", &path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not a loopback address"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn bodies_and_heads_are_bounded() {
    let port = free_port();
    let sup = Supervisor::start(&format!("{}{}", console(port), asking("orders")));
    let s = login(&sup, port);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        c,
        "POST /do HTTP/1.1\r\nCookie: {}\r\nContent-Length: 300000\r\n\r\n",
        s.cookie
    )
    .unwrap();
    let mut answer = String::new();
    let _ = c.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    let big = "a".repeat(20_000);
    let r = http(port, "GET", "/", &[("X-Big", &big)], "");
    assert_eq!(r.status, 431);
    assert!(r.header("content-security-policy").is_some());
    // A length a proxy in front could read otherwise than the console:
    // two of them, a sign, a space before the colon.
    for lengths in [
        "Content-Length: 0\r\nContent-Length: 40",
        "Content-Length: +0",
        "Content-Length : 0",
    ] {
        let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).ok();
        write!(
            c,
            "POST /logout HTTP/1.1\r\nCookie: {}\r\n{lengths}\r\n\r\n",
            s.cookie
        )
        .unwrap();
        let mut answer = String::new();
        let _ = c.read_to_string(&mut answer);
        assert!(answer.starts_with("HTTP/1.1 400"), "{lengths}: {answer}");
    }
    assert_eq!(s.get(port, "/").status, 200, "still logged in");
}

#[test]
fn an_event_stream_ends_with_its_session() {
    let port = free_port();
    let sup = Supervisor::start(&format!("{}{}", console(port), asking("orders")));
    sup.wait_deployment("orders", "ready", LONG, |d| d["state"] == "ready");
    let s = login(&sup, port);
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).ok();
    write!(c, "GET /live HTTP/1.1\r\nCookie: {}\r\n\r\n", s.cookie).unwrap();
    let mut buf = [0u8; 4096];
    let n = c.read(&mut buf).unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).contains("text/event-stream"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert_eq!(s.post(port, "/logout", &[]).status, 303);
    // Something happens: the stream wakes, finds its session gone, ends.
    ok("drain", &sup.client(&["drain", "orders"]));
    let started = std::time::Instant::now();
    loop {
        match c.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => panic!("the stream outlived its session ({e})"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the stream outlived its session"
        );
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[test]
fn a_filter_s_words_are_quoted_in_the_command_shown() {
    let port = free_port();
    let sup = Supervisor::start(&format!("{}{}", console(port), asking("orders")));
    let s = login(&sup, port);
    let page = s.get(port, "/mail?deployment=x%3Btouch%20pwned&state=%24(id)");
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("wfhost mail list &#39;x;touch pwned&#39; --state &#39;$(id)&#39;"),
        "{}",
        page.body
    );
}

/// Makes a self-signed certificate for 127.0.0.1 with openssl.
fn certificate(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert.display().to_string(), key.display().to_string())
}

#[test]
fn tls_is_served_with_a_secure_cookie() {
    let dir = TempDir::new();
    let (cert, key) = certificate(dir.path());
    let port = free_port();
    let body = format!(
        "[console]\nlisten = \"127.0.0.1:{port}\"\ntls_cert = \"{cert}\"\ntls_key = \"{key}\"\n\n{}",
        asking("orders")
    );
    let sup = Supervisor::start(&body);
    let url = ok(
        "console token",
        &sup.client(&["console", "token", "--ttl", "1m"]),
    );
    let url = url.trim();
    assert!(
        url.starts_with(&format!("https://127.0.0.1:{port}/login?token=")),
        "{url}"
    );
    let out = Command::new("curl")
        .args(["-s", "-i", "--cacert", &cert, url])
        .output()
        .expect("run curl");
    let head = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(head.starts_with("HTTP/1.1 303"), "{head}");
    let cookie = head
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .expect("a cookie");
    assert!(
        cookie.contains("; Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    assert!(head.contains("Strict-Transport-Security"), "{head}");
    let id = cookie
        .split_once(':')
        .unwrap()
        .1
        .split(';')
        .next()
        .unwrap()
        .trim()
        .to_owned();
    let out = Command::new("curl")
        .args([
            "-s",
            "--cacert",
            &cert,
            "-H",
            &format!("Cookie: {id}"),
            &format!("https://127.0.0.1:{port}/"),
        ])
        .output()
        .expect("run curl");
    assert!(String::from_utf8_lossy(&out.stdout).contains("<h1>Host</h1>"));
    // Plain HTTP on the TLS port gets nothing served.
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(15))).ok();
    let _ = c.write_all(b"GET / HTTP/1.1\r\n\r\n");
    let mut buf = Vec::new();
    let _ = c.read_to_end(&mut buf);
    assert!(!String::from_utf8_lossy(&buf).contains("<h1>"));
}

/// The repository's root (the tests crate's parent).
fn repo() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

/// A real Chromium (Debian's `chromium`) through the operator's story,
/// driven by `tests/console/browser.mjs`. `WFHOST_CONSOLE_SHOTS=DIR`
/// saves the main pages' screenshots there (`docs/console` in the
/// README).
#[test]
fn a_real_browser_answers_retries_and_sees_a_recycle_live() {
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        eprintln!(
            "SKIPPED: no Chromium at {chromium} (apt-get install chromium; .ci/run installs it)"
        );
        return;
    }
    let script = repo().join("tests/console/browser.mjs");
    assert!(
        repo()
            .join("tests/console/node_modules/puppeteer-core")
            .exists(),
        "tests/console has no node_modules: run `npm ci --prefix tests/console` (scripts/test does)"
    );
    let port = free_port();
    let dir = TempDir::new();
    let cured = dir.join("cured");
    let body = format!(
        "{}{}\n{}",
        console(port),
        asking("orders"),
        poisoned(&cured)
    );
    let sup = Supervisor::start(&body);
    sup.wait_deployment("orders", "ready", LONG, |d| d["state"] == "ready");
    sup.wait_deployment("poisoned", "ready", LONG, |d| d["state"] == "ready");
    let ask = r#"{"ask":{"key":"approve","prompt":{"order":"A-1042","amount":120,"note":"<script>alert('from a child')</script>"}}}"#;
    ok("send", &sup.client(&["send", "orders", ask]));
    ok("send", &sup.client(&["send", "poisoned", "poison"]));
    sup.wait_deployment("orders", "a question", LONG, |d| {
        d["mail"]["questions_open"] == 1
    });
    sup.wait_deployment("poisoned", "dead mail", LONG, |d| d["mail"]["dead"] == 1);
    std::fs::write(&cured, "").unwrap();
    let url = ok("console token", &sup.client(&["console", "token"]));
    let mut node = Command::new("node");
    node.arg(&script)
        .env("LOGIN_URL", url.trim())
        .env("CHROMIUM", &chromium)
        .current_dir(repo().join("tests/console"));
    if let Ok(shots) = std::env::var("WFHOST_CONSOLE_SHOTS") {
        node.env("SHOTS", repo().join(shots));
    }
    let out = node.output().expect("run node");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the browser's story failed:\n{said}\nsupervisor log:\n{}",
        sup.log()
    );
    assert!(said.contains("browser: done"), "{said}");
    let journal = sup.journal();
    assert!(
        journal
            .iter()
            .any(|r| r["kind"] == "question_answered" && r["body"].to_string().contains("console"))
    );
}
