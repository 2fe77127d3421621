//! A throwaway PostgreSQL server for tests: `initdb` and `pg_ctl` (from
//! `/usr/lib/postgresql/15/bin`, else the newest `/usr/lib/postgresql/*/bin`,
//! else PATH) in a short temp dir, listening
//! only on a Unix socket in that dir, run as an unprivileged user when the
//! tests run as root (PostgreSQL refuses root), and always stopped with
//! `pg_ctl stop -m fast` when dropped, even when the test fails.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::TempDir;

/// Where Debian keeps each PostgreSQL version's server binaries.
const DEBIAN_LIB: &str = "/usr/lib/postgresql";
/// The version this machine has and the store was written against.
const PREFERRED: u32 = 15;
/// The superuser the cluster is made with (trust auth on its socket).
pub const USER: &str = "wfhost";
/// The user that runs the server when the tests run as root: the
/// packaged `postgres` user if there is one, else this one, created.
const TEST_USER: &str = "wfhost-pg";

/// A user's uid and gid.
type Ids = (u32, u32);

/// A running server, stopped on drop.
pub struct PgServer {
    dir: TempDir,
    bin: PathBuf,
    owner: Option<(u32, u32)>,
    port: u16,
    options: String,
}

/// The directory holding `initdb`, `pg_ctl` and `psql`.
fn bin_dir() -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(DEBIAN_LIB)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort_by_key(|(v, _)| (*v == PREFERRED, *v));
    if let Some((_, bin)) = versions.pop() {
        return bin;
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|d| d.join("initdb").exists() && d.join("pg_ctl").exists())
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL server binaries (initdb, pg_ctl) are neither in {DEBIAN_LIB}/*/bin nor on PATH: \
                 install them (apt-get install -y postgresql)"
            )
        })
}

/// The uid and gid of user `name`, if it exists.
fn user(name: &str) -> Option<(u32, u32)> {
    let c = CString::new(name).ok()?;
    // SAFETY: getpwnam returns a pointer into static storage or null; it
    // is read at once, before any other call could overwrite it.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: checked non-null above.
    let pw = unsafe { &*pw };
    Some((pw.pw_uid, pw.pw_gid))
}

/// An unprivileged user to run the server as, created if need be.
fn unprivileged() -> (u32, u32) {
    if let Some(ids) = user("postgres").or_else(|| user(TEST_USER)) {
        return ids;
    }
    // Two tests may race to create it; either way it exists afterwards.
    let _ = Command::new("useradd")
        .args([
            "--system",
            "--no-create-home",
            "--shell",
            "/usr/sbin/nologin",
            TEST_USER,
        ])
        .status();
    user(TEST_USER)
        .unwrap_or_else(|| panic!("cannot create the unprivileged user {TEST_USER} (useradd)"))
}

impl PgServer {
    /// Makes a cluster in a fresh temp dir and starts it, without fsync:
    /// tests check what the store does, not the disk, and share the machine.
    pub fn start() -> Self {
        Self::start_with("-c fsync=off -c full_page_writes=off")
    }

    /// Like [`PgServer::start`], durable as in production (fsync on), for
    /// measuring commit costs.
    pub fn start_durable() -> Self {
        Self::start_with("")
    }

    /// Like [`PgServer::start`], also listening on TCP at `addr:port`
    /// (an address this host has), trusting every client there: for
    /// hosts that reach the server through a network (a namespace).
    pub fn start_listening(addr: &str, port: u16) -> Self {
        Self::start_on(
            &format!("-c fsync=off -c full_page_writes=off -c listen_addresses='{addr}'"),
            port,
            true,
        )
    }

    fn start_with(settings: &str) -> Self {
        Self::start_on(&format!("-c listen_addresses='' {settings}"), 5432, false)
    }

    /// Like [`PgServer::start`], also listening on `127.0.0.1:port` with
    /// TLS on (`ssl = on`): the server's certificate `cert` and key `key`,
    /// `ca` (if any) as `ssl_ca_file` for client certificates, and the
    /// `hba` lines ahead of pg_hba.conf's own (e.g. `hostssl all all
    /// 127.0.0.1/32 cert`). Nothing plain is allowed over TCP.
    pub fn start_tls(port: u16, cert: &Path, key: &Path, ca: Option<&Path>, hba: &str) -> Self {
        Self::start_tls_with(
            "-c fsync=off -c full_page_writes=off",
            port,
            cert,
            key,
            ca,
            hba,
        )
    }

    /// Like [`PgServer::start_tls`], durable as in production (fsync on),
    /// for measuring what TLS costs.
    pub fn start_tls_durable(port: u16, cert: &Path, key: &Path, hba: &str) -> Self {
        Self::start_tls_with("", port, cert, key, None, hba)
    }

    fn start_tls_with(
        durability: &str,
        port: u16,
        cert: &Path,
        key: &Path,
        ca: Option<&Path>,
        hba: &str,
    ) -> Self {
        let settings = format!(
            "{durability} -c listen_addresses='127.0.0.1' -c ssl=on \
             -c ssl_cert_file=server.crt -c ssl_key_file=server.key{}",
            if ca.is_some() {
                " -c ssl_ca_file=ca.crt"
            } else {
                ""
            }
        );
        Self::start_prepared(&settings, port, &|data, owner| {
            let files = [(cert, "server.crt"), (key, "server.key")];
            for (from, to) in files.into_iter().chain(ca.map(|c| (c, "ca.crt"))) {
                let dest = data.join(to);
                std::fs::copy(from, &dest).expect("copy a TLS file into the data dir");
                crate::certs::private(&dest);
                if let Some((uid, gid)) = owner {
                    std::os::unix::fs::chown(&dest, Some(uid), Some(gid))
                        .expect("chown a TLS file");
                }
            }
            let path = data.join("pg_hba.conf");
            let conf = std::fs::read_to_string(&path).expect("read pg_hba.conf");
            std::fs::write(&path, format!("{hba}\n{conf}")).expect("write pg_hba.conf");
        })
    }

    /// A port on 127.0.0.1 nothing listens on now.
    pub fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("find a free port")
    }

    fn start_on(settings: &str, port: u16, tcp: bool) -> Self {
        Self::start_prepared(settings, port, &|data, _| {
            if tcp {
                let hba = data.join("pg_hba.conf");
                let mut conf = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
                conf.push_str("\nhost all all 0.0.0.0/0 trust\n");
                std::fs::write(&hba, conf).expect("write pg_hba.conf");
            }
        })
    }

    /// Makes the cluster, lets `prepare` change its data dir (given the
    /// server's owner), and starts it.
    fn start_prepared(settings: &str, port: u16, prepare: &dyn Fn(&Path, Option<Ids>)) -> Self {
        let bin = bin_dir();
        let dir = TempDir::new();
        // SAFETY: geteuid has no preconditions.
        let owner = (unsafe { libc::geteuid() } == 0).then(unprivileged);
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid)).expect("chown the temp dir");
        }
        let mut server = Self {
            dir,
            bin,
            owner,
            port,
            options: String::new(),
        };
        let data = server.data();
        server.run_ok(
            "initdb",
            server.command("initdb").arg("-D").arg(&data).args([
                "-U",
                USER,
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ]),
        );
        prepare(&data, owner);
        server.options = format!(
            "-p {port} -k {} -c max_connections=40 -c shared_buffers=16MB {settings}",
            server.dir.path().display()
        );
        server.start_again();
        server
    }

    /// Starts the server again after [`PgServer::stop`], as after an outage.
    pub fn start_again(&self) {
        let data = self.data();
        self.run_ok(
            "pg_ctl start",
            self.command("pg_ctl")
                .arg("-D")
                .arg(&data)
                .arg("-l")
                .arg(self.dir.join("server.log"))
                .args(["-w", "-t", "30", "-o", &self.options, "start"]),
        );
    }

    /// The port it listens on (its socket is `.s.PGSQL.PORT`).
    pub fn port(&self) -> u16 {
        self.port
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// The socket directory (the `host` of a connection string).
    pub fn socket_dir(&self) -> &Path {
        self.dir.path()
    }

    /// A key-value connection string for database `db` (`postgres`
    /// exists from the start; others need [`PgServer::create_database`]).
    pub fn url(&self, db: &str) -> String {
        format!(
            "host={} port={} user={USER} dbname={db}",
            self.socket_dir().display(),
            self.port
        )
    }

    /// A `postgresql://` URL for database `db` (the socket dir as `host`).
    pub fn uri(&self, db: &str) -> String {
        let host: String = self.socket_dir().display().to_string().replace('/', "%2F");
        format!("postgresql://{USER}@{host}:{}/{db}", self.port)
    }

    /// `bin/NAME`, run as the server's owner.
    fn command(&self, name: &str) -> Command {
        let mut cmd = Command::new(self.bin.join(name));
        cmd.stdin(Stdio::null()).env("LC_ALL", "C");
        if let Some((uid, gid)) = self.owner {
            // std drops root's supplementary groups along with the uid.
            cmd.uid(uid).gid(gid);
        }
        cmd
    }

    fn run_ok(&self, what: &str, cmd: &mut Command) -> Output {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
        assert!(
            out.status.success(),
            "{what} failed ({:?}):\n{}{}\nserver log:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default()
        );
        out
    }

    /// Runs `sql` with psql on database `db`; returns its unaligned,
    /// tuples-only output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = self.run_ok(
            "psql",
            self.command("psql")
                .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
                .arg("-h")
                .arg(self.socket_dir())
                .args(["-p", &self.port.to_string()])
                .args(["-U", USER, "-d", db, "-c", sql]),
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Creates an empty database `name`.
    pub fn create_database(&self, name: &str) {
        self.psql("postgres", &format!("CREATE DATABASE \"{name}\""));
    }

    /// Stops the server now (`pg_ctl stop -m fast`), as for an outage.
    pub fn stop(&self) {
        let _ = self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .args(["-m", "fast", "-w", "-t", "30", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        self.stop();
    }
}
