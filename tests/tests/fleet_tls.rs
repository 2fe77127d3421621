//! TLS to PostgreSQL and the password kept out of the config (issue 25):
//! a real PostgreSQL with `ssl = on`, certificates made with `openssl`,
//! real `wfhost supervise` fleet hosts. `verify-full` connects and says
//! so (status, the log, and the server's own `pg_stat_ssl` for every
//! connection); a wrong CA, a wrong host name and an expired certificate
//! are each refused at start, naming the host, what failed and the
//! setting; a server that demands a client certificate gets one; a
//! password file others can read is refused; no password shows anywhere.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wfhost_tests::certs::{self, Certs};
use wfhost_tests::fleet::Fleet;
use wfhost_tests::postgres::{PgServer, USER};
use wfhost_tests::{Supervisor, TempDir, bin, command, ok, stdout, write_config};

/// The password of the tests that use one: distinctive, so a grep finds
/// any leak.
const SECRET: &str = "Tr0ub4dor-zx81-s3cret";

/// A fleet host's config on the TLS server at `port`: `store` lines go
/// into `[store]` (after `url`, unless `url` is among them).
fn body(url: &str, store: &str) -> String {
    let child = command(&[
        "{bin}/wfh-fleetchild",
        "--record",
        "/dev/null",
        "--work-ms",
        "1",
    ]);
    format!(
        "[store]\nurl = \"{url}\"\n{store}\n\n[fleet]\nhost_id = \"t1\"\nlease_ttl = \"3s\"\nlease_renew = \"500ms\"\n\n\
         [[deployment]]\nid = \"d1\"\ncommand = {child}\n"
    )
}

fn url(host: &str, port: u16) -> String {
    format!("postgresql://{USER}@{host}:{port}/postgres")
}

/// `wfhost supervise` on `body` expected to refuse to start: its exit
/// code and everything it wrote.
fn refused(body: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = TempDir::new();
    let config = dir.join("wfhost.toml");
    write_config(&config, &dir.join("state"), body);
    let mut child = Command::new(bin("wfhost"))
        .args(["supervise", "--config"])
        .arg(&config)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn wfhost supervise");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "wfhost supervise did not refuse to start within 30s:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

fn assert_refused(body: &str, wanted: &[&str]) -> String {
    let (code, text) = refused(body, &[]);
    assert_ne!(code, Some(0), "{text}");
    for w in wanted {
        assert!(text.contains(w), "wanted {w:?} in:\n{text}");
    }
    text
}

/// `ssl` of every wfhost connection the server has, by application name.
fn ssl_of_connections(pg: &PgServer) -> Vec<(String, bool)> {
    pg.psql(
        "postgres",
        "SELECT a.application_name || ' ' || s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) \
         WHERE a.application_name LIKE 'wfhost%' ORDER BY 1",
    )
    .lines()
    .filter_map(|l| {
        let (name, ssl) = l.rsplit_once(' ')?;
        Some((name.to_owned(), ssl == "true"))
    })
    .collect()
}

fn tls_server(certs: &Certs, hba: &str) -> (PgServer, u16) {
    let port = PgServer::free_port();
    let pg = PgServer::start_tls(
        port,
        &certs.server_crt,
        &certs.server_key,
        Some(&certs.ca),
        hba,
    );
    (pg, port)
}

fn root(certs: &Certs) -> String {
    format!("sslrootcert = \"{}\"", certs.ca.display())
}

#[test]
fn verify_full_connects_every_connection_encrypted_and_status_says_so() {
    let _lock = Fleet::lock();
    let dir = TempDir::new();
    let certs = certs::make(&dir.join("certs"), USER);
    let (pg, port) = tls_server(
        &certs,
        "hostssl all all 127.0.0.1/32 trust\nhost all all 127.0.0.1/32 reject",
    );
    let store = format!("{}\nsslmode = \"verify-full\"", root(&certs));
    let sup = Supervisor::start(&body(&url("localhost", port), &store));
    sup.ready_pid("d1", Duration::from_secs(30));
    let status = sup.status();
    assert_eq!(status["store"]["encrypted"], true, "{status}");
    let shown = status["store"]["encryption"].as_str().unwrap_or_default();
    assert!(
        shown.starts_with("TLS (TLSv1.3") && shown.contains("verify-full"),
        "{shown}"
    );
    let text = ok("status", &sup.client(&["status"]));
    assert!(text.contains("store connection: TLS (TLSv1.3"), "{text}");
    let log = sup.plain_log();
    assert!(
        log.contains("connected to the database: encrypted"),
        "{log}"
    );
    // The server's view: every connection the host holds is TLS (the
    // store, its reader, the lease loop's, the query one, the listener).
    let conns = ssl_of_connections(&pg);
    assert!(conns.len() >= 5, "{conns:?}");
    assert!(conns.iter().all(|(_, ssl)| *ssl), "{conns:?}");
    assert!(conns.iter().any(|(n, _)| n == "wfhost-listen"), "{conns:?}");
}

#[test]
fn a_certificate_that_does_not_verify_is_refused_at_start_naming_host_failure_and_setting() {
    let _lock = Fleet::lock();
    let dir = TempDir::new();
    let certs = certs::make(&dir.join("certs"), USER);
    let (_pg, port) = tls_server(&certs, "hostssl all all 127.0.0.1/32 trust");
    let full = "sslmode = \"verify-full\"";
    // A CA that signed nothing here.
    let wrong_ca = format!("sslrootcert = \"{}\"\n{full}", certs.other_ca.display());
    assert_refused(
        &body(&url("localhost", port), &wrong_ca),
        &[
            "of localhost",
            "was not signed by a CA in sslrootcert",
            "sslmode=verify-full",
            "[store] sslrootcert",
        ],
    );
    // The certificate names localhost, not 127.0.0.1.
    assert_refused(
        &body(
            &url("127.0.0.1", port),
            &format!("{}\n{full}", root(&certs)),
        ),
        &[
            "of 127.0.0.1",
            "is not valid for the name \"127.0.0.1\"",
            "subjectAltName",
            "verify-ca",
        ],
    );
    // verify-ca checks the chain only: the same connection is taken.
    let ca_only = format!("{}\nsslmode = \"verify-ca\"", root(&certs));
    let sup = Supervisor::start(&body(&url("127.0.0.1", port), &ca_only));
    assert!(
        sup.status()["store"]["encryption"]
            .as_str()
            .unwrap_or_default()
            .contains("verify-ca")
    );
    drop(sup);
    // An expired server certificate.
    let port2 = PgServer::free_port();
    let _expired = PgServer::start_tls(
        port2,
        &certs.expired_crt,
        &certs.expired_key,
        None,
        "hostssl all all 127.0.0.1/32 trust",
    );
    assert_refused(
        &body(
            &url("localhost", port2),
            &format!("{}\n{full}", root(&certs)),
        ),
        &[
            "of localhost",
            "has expired",
            "renew the server's certificate",
        ],
    );
    // No CA at all under verify-full: said before any connection.
    assert_refused(
        &body(&url("localhost", port), full),
        &["no CA certificate is set", "[store] sslrootcert"],
    );
}

#[test]
fn a_client_certificate_is_sent_when_the_server_demands_one() {
    let _lock = Fleet::lock();
    let dir = TempDir::new();
    let certs = certs::make(&dir.join("certs"), USER);
    // Only a certificate whose CN is the user gets in.
    let (pg, port) = tls_server(&certs, "hostssl all all 127.0.0.1/32 cert");
    let base = format!("{}\nsslmode = \"verify-full\"", root(&certs));
    let text = assert_refused(&body(&url("localhost", port), &base), &["localhost"]);
    assert!(
        text.contains("demands a client certificate") && text.contains("[store] sslcert"),
        "the refusal names the client certificate and the setting: {text}"
    );
    let with_cert = format!(
        "{base}\nsslcert = \"{}\"\nsslkey = \"{}\"",
        certs.client_crt.display(),
        certs.client_key.display()
    );
    let sup = Supervisor::start(&body(&url("localhost", port), &with_cert));
    sup.ready_pid("d1", Duration::from_secs(30));
    assert_eq!(sup.status()["store"]["encrypted"], true);
    assert!(ssl_of_connections(&pg).iter().all(|(_, ssl)| *ssl));
    drop(sup);
    // A key others can read is refused like a password file.
    std::fs::set_permissions(
        &certs.client_key,
        std::os::unix::fs::PermissionsExt::from_mode(0o644),
    )
    .expect("chmod");
    assert_refused(
        &body(&url("localhost", port), &with_cert),
        &["sslkey", "mode 0644", "chmod 600"],
    );
}

/// Every file under `dir`, read as text (logs, configs are skipped).
fn texts_under(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(texts_under(&path));
        } else if path.extension().is_some_and(|x| x == "log")
            && let Ok(text) = std::fs::read_to_string(&path)
        {
            out.push((path.display().to_string(), text));
        }
    }
    out
}

#[test]
fn the_password_comes_from_a_private_file_or_the_environment_and_never_shows() {
    let _lock = Fleet::lock();
    let dir = TempDir::new();
    let certs = certs::make(&dir.join("certs"), USER);
    let (pg, port) = tls_server(&certs, "hostssl all all 127.0.0.1/32 scram-sha-256");
    pg.psql(
        "postgres",
        &format!("ALTER ROLE {USER} PASSWORD '{SECRET}'"),
    );
    let tls = format!("{}\nsslmode = \"verify-full\"", root(&certs));
    let mut outputs: Vec<(String, String)> = Vec::new();
    // No password anywhere: refused by the server, clearly.
    let (code, text) = refused(&body(&url("localhost", port), &tls), &[]);
    assert_ne!(code, Some(0));
    assert!(
        text.contains("asks for a password") && text.contains("password_file"),
        "{text}"
    );
    outputs.push(("no password".into(), text));
    // A password file others can read.
    let file = dir.join("pg-password");
    std::fs::write(&file, format!("{SECRET}\n")).expect("write the password file");
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    let with_file = format!("{tls}\npassword_file = \"{}\"", file.display());
    let text = assert_refused(
        &body(&url("localhost", port), &with_file),
        &[
            "password_file",
            &file.display().to_string(),
            "mode 0644",
            "chmod 600",
        ],
    );
    outputs.push(("0644".into(), text));
    // Mode 0600: it connects.
    certs::private(&file);
    let sup = Supervisor::start(&body(&url("localhost", port), &with_file));
    sup.ready_pid("d1", Duration::from_secs(30));
    outputs.push(("status".into(), stdout(&sup.client(&["status", "--json"]))));
    drop(sup);
    // PGPASSWORD.
    let sup = Supervisor::start_with_env(
        &body(&url("localhost", port), &tls),
        &[("PGPASSWORD", SECRET)],
    );
    sup.ready_pid("d1", Duration::from_secs(30));
    outputs.extend(texts_under(sup.dir().path()));
    drop(sup);
    // A wrong CA with the password in the url itself: the refusal shows
    // the url without it.
    let in_url = format!("postgresql://{USER}:{SECRET}@localhost:{port}/postgres");
    let wrong = format!(
        "sslrootcert = \"{}\"\nsslmode = \"verify-full\"",
        certs.other_ca.display()
    );
    let (code, text) = refused(&body(&in_url, &wrong), &[]);
    assert_ne!(code, Some(0));
    outputs.push(("wrong CA, password in url".into(), text));
    // The password in the url, connected: status, the log, check-config,
    // journal verify.
    let sup = Supervisor::start(&body(&in_url, &tls));
    sup.ready_pid("d1", Duration::from_secs(30));
    for args in [
        &["status"][..],
        &["status", "--json"],
        &["journal", "verify"],
        &["check-config"],
    ] {
        let out = sup.client(args);
        outputs.push((
            args.join(" "),
            format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr)),
        ));
    }
    outputs.extend(texts_under(sup.dir().path()));
    outputs.push((
        "server log".into(),
        std::fs::read_to_string(pg.socket_dir().join("server.log")).unwrap_or_default(),
    ));
    for (what, text) in &outputs {
        assert!(!text.contains(SECRET), "{what} shows the password:\n{text}");
    }
}
