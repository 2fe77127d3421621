//! The systemd notification protocol (`sd_notify(3)`) without libsystemd.
//!
//! systemd passes `NOTIFY_SOCKET` (a filesystem path, or an abstract socket
//! name written with a leading `@`) and, when `WatchdogSec=` is set,
//! `WATCHDOG_USEC` and `WATCHDOG_PID`. Each notification is one datagram of
//! newline-separated `KEY=VALUE` assignments sent to that socket.
//!
//! The variables are deliberately *not* removed from our environment:
//! `std::env::remove_var` is unsound once other threads run, and every child
//! is spawned with a cleared environment (`spawn.rs` calls `env_clear`, and
//! the config refuses these names in a deployment's `env`), so no child can
//! notify in the supervisor's name.
//!
//! Every send is non-blocking and returns its `io::Error` to the caller, which
//! logs it; a lost notification never stops the supervisor.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

/// A handle on systemd's notification socket, so the supervisor can report
/// readiness, status, reloads, stops, timeout extensions and watchdog pings.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// Builds a notifier from `NOTIFY_SOCKET`/`WATCHDOG_*`; `None` outside systemd notify.
    pub fn from_env() -> Option<Notifier> {
        let raw = std::env::var_os("NOTIFY_SOCKET")?;
        let addr = match parse_socket_addr(&raw) {
            Ok(addr) => addr,
            Err(err) => {
                tracing::warn!(notify_socket = ?raw, error = %err, "ignoring NOTIFY_SOCKET");
                return None;
            }
        };
        let usec = std::env::var("WATCHDOG_USEC").ok();
        let pid = std::env::var("WATCHDOG_PID").ok();
        let watchdog = parse_watchdog(usec.as_deref(), pid.as_deref(), std::process::id());
        match Notifier::connect(addr, watchdog) {
            Ok(notifier) => Some(notifier),
            Err(err) => {
                tracing::warn!(error = %err, "cannot create the systemd notification socket");
                None
            }
        }
    }

    /// Builds a notifier sending to `addr`; `watchdog` is the full `WATCHDOG_USEC` timeout.
    pub fn connect(addr: SocketAddr, watchdog: Option<Duration>) -> io::Result<Notifier> {
        // std creates the socket with SOCK_CLOEXEC, so children never inherit it.
        let socket = UnixDatagram::unbound()?;
        // Never block the control loop on a full systemd queue: fail and log instead.
        socket.set_nonblocking(true)?;
        Ok(Notifier {
            socket,
            addr,
            watchdog,
        })
    }

    /// Sends one raw datagram of `KEY=VALUE` lines, for messages without a dedicated method.
    pub fn send(&self, message: &str) -> io::Result<()> {
        let sent = self.socket.send_to_addr(message.as_bytes(), &self.addr)?;
        if sent != message.len() {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "short notification datagram: {sent} of {} bytes",
                    message.len()
                ),
            ));
        }
        Ok(())
    }

    /// Tells systemd start-up is complete (`READY=1`), ending the start timeout.
    pub fn ready(&self) -> io::Result<()> {
        self.send("READY=1")
    }

    /// Tells systemd start-up is complete and sets the status line, in one datagram.
    pub fn ready_with_status(&self, text: &str) -> io::Result<()> {
        self.send(&format!("READY=1\nSTATUS={}", one_line(text)))
    }

    /// Sets the one-line status `systemctl status` shows (`STATUS=`); newlines become spaces.
    pub fn status(&self, text: &str) -> io::Result<()> {
        self.send(&format!("STATUS={}", one_line(text)))
    }

    /// Announces a reload (`RELOADING=1` + `MONOTONIC_USEC`); call `ready()` when it is done.
    pub fn reloading(&self) -> io::Result<()> {
        let now = monotonic_usec()?;
        self.send(&format!("RELOADING=1\nMONOTONIC_USEC={now}"))
    }

    /// Announces a graceful stop has begun (`STOPPING=1`).
    pub fn stopping(&self) -> io::Result<()> {
        self.send("STOPPING=1")
    }

    /// Gives the running start/stop timeout `extra` more time from now; re-send before it ends.
    pub fn extend_timeout(&self, extra: Duration) -> io::Result<()> {
        self.send(&format!("EXTEND_TIMEOUT_USEC={}", extra.as_micros()))
    }

    /// Pings the watchdog (`WATCHDOG=1`); call it from the control loop so it proves liveness.
    pub fn watchdog(&self) -> io::Result<()> {
        self.send("WATCHDOG=1")
    }

    /// How often to ping the watchdog (half of `WATCHDOG_USEC`); `None` when the watchdog is off.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog.map(|timeout| timeout / 2)
    }
}

/// Parses a `NOTIFY_SOCKET` value: an absolute path, or `@name` for an abstract socket.
fn parse_socket_addr(raw: &OsStr) -> io::Result<SocketAddr> {
    let bytes = raw.as_bytes();
    match bytes.first() {
        Some(b'@') => SocketAddr::from_abstract_name(&bytes[1..]),
        Some(b'/') => SocketAddr::from_pathname(raw),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "NOTIFY_SOCKET is neither an absolute path nor an @abstract name",
        )),
    }
}

/// Parses `WATCHDOG_USEC`; honoured only if positive and `WATCHDOG_PID` is unset or ours.
fn parse_watchdog(usec: Option<&str>, pid: Option<&str>, my_pid: u32) -> Option<Duration> {
    if let Some(pid) = pid {
        let pid: u32 = pid.trim().parse().ok()?;
        if pid != my_pid {
            return None;
        }
    }
    let usec: u64 = usec?.trim().parse().ok()?;
    (usec > 0).then(|| Duration::from_micros(usec))
}

/// Keeps text on one `KEY=VALUE` line: newlines, carriage returns and NULs become spaces.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| {
            if matches!(c, '\n' | '\r' | '\0') {
                ' '
            } else {
                c
            }
        })
        .collect()
}

/// Reads `CLOCK_MONOTONIC` in microseconds, the clock systemd expects in `MONOTONIC_USEC`.
fn monotonic_usec() -> io::Result<u64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    if unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let secs = u64::try_from(ts.tv_sec).map_err(io::Error::other)?;
    let nanos = u64::try_from(ts.tv_nsec).map_err(io::Error::other)?;
    Ok(secs * 1_000_000 + nanos / 1_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bound receiver in a short temp dir (socket paths must stay under 107 bytes).
    fn receiver() -> (tempfile::TempDir, UnixDatagram, std::path::PathBuf) {
        let dir = tempfile::Builder::new()
            .prefix("wfh-notify-")
            .tempdir_in("/tmp")
            .unwrap();
        let path = dir.path().join("notify.sock");
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        (dir, rx, path)
    }

    fn recv(rx: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = rx.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    fn notifier_for(path: &std::path::Path) -> Notifier {
        let addr = parse_socket_addr(path.as_os_str()).unwrap();
        Notifier::connect(addr, None).unwrap()
    }

    #[test]
    fn sends_exact_datagrams_to_a_path_socket() {
        let (_dir, rx, path) = receiver();
        let n = notifier_for(&path);

        n.ready().unwrap();
        assert_eq!(recv(&rx), "READY=1");
        n.status("3 deployments, 3 ready").unwrap();
        assert_eq!(recv(&rx), "STATUS=3 deployments, 3 ready");
        n.stopping().unwrap();
        assert_eq!(recv(&rx), "STOPPING=1");
        n.watchdog().unwrap();
        assert_eq!(recv(&rx), "WATCHDOG=1");
        n.extend_timeout(Duration::from_millis(1500)).unwrap();
        assert_eq!(recv(&rx), "EXTEND_TIMEOUT_USEC=1500000");
        n.ready_with_status("up").unwrap();
        assert_eq!(recv(&rx), "READY=1\nSTATUS=up");
        n.send("FDSTORE=0").unwrap();
        assert_eq!(recv(&rx), "FDSTORE=0");
    }

    #[test]
    fn status_is_kept_on_one_line() {
        let (_dir, rx, path) = receiver();
        let n = notifier_for(&path);
        n.status("a\nb\r\nc\0d").unwrap();
        assert_eq!(recv(&rx), "STATUS=a b  c d");
        n.ready_with_status("x\ny").unwrap();
        assert_eq!(recv(&rx), "READY=1\nSTATUS=x y");
    }

    #[test]
    fn reloading_carries_the_monotonic_clock() {
        let (_dir, rx, path) = receiver();
        let n = notifier_for(&path);
        let before = monotonic_usec().unwrap();
        n.reloading().unwrap();
        let after = monotonic_usec().unwrap();
        let msg = recv(&rx);
        let value = msg
            .strip_prefix("RELOADING=1\nMONOTONIC_USEC=")
            .unwrap_or_else(|| panic!("unexpected datagram {msg:?}"));
        let usec: u64 = value.parse().unwrap();
        assert!(
            before <= usec && usec <= after,
            "{before} <= {usec} <= {after}"
        );
    }

    #[test]
    fn abstract_socket_with_at_prefix() {
        let name = format!(
            "wfh-notify-test-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        );
        let rx = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap())
            .unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();

        let addr = parse_socket_addr(OsStr::new(&format!("@{name}"))).unwrap();
        assert_eq!(addr.as_abstract_name(), Some(name.as_bytes()));
        assert!(addr.as_pathname().is_none());
        let n = Notifier::connect(addr, None).unwrap();
        n.ready().unwrap();
        assert_eq!(recv(&rx), "READY=1");
    }

    #[test]
    fn socket_address_parsing() {
        let addr = parse_socket_addr(OsStr::new("/run/systemd/notify")).unwrap();
        assert_eq!(
            addr.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        assert!(parse_socket_addr(OsStr::new("")).is_err());
        assert!(parse_socket_addr(OsStr::new("relative/path")).is_err());
        assert!(parse_socket_addr(OsStr::new("vsock:2:1234")).is_err());
        // Longer than sun_path allows.
        let long = format!("/{}", "x".repeat(200));
        assert!(parse_socket_addr(OsStr::new(&long)).is_err());
    }

    #[test]
    fn send_to_a_missing_socket_is_an_error_not_a_panic() {
        let (dir, _rx, _path) = receiver();
        let n = notifier_for(&dir.path().join("absent.sock"));
        assert!(n.ready().is_err());
    }

    #[test]
    fn watchdog_parsing() {
        let s = Duration::from_secs;
        assert_eq!(parse_watchdog(Some("30000000"), None, 42), Some(s(30)));
        assert_eq!(
            parse_watchdog(Some("30000000"), Some("42"), 42),
            Some(s(30))
        );
        assert_eq!(parse_watchdog(Some("30000000"), Some("43"), 42), None);
        assert_eq!(parse_watchdog(Some("30000000"), Some("junk"), 42), None);
        assert_eq!(parse_watchdog(None, Some("42"), 42), None);
        assert_eq!(parse_watchdog(None, None, 42), None);
        assert_eq!(parse_watchdog(Some("0"), None, 42), None);
        assert_eq!(parse_watchdog(Some("-5"), None, 42), None);
        assert_eq!(parse_watchdog(Some("abc"), None, 42), None);
    }

    #[test]
    fn watchdog_interval_is_half_the_timeout() {
        let (_dir, _rx, path) = receiver();
        let addr = parse_socket_addr(path.as_os_str()).unwrap();
        let n = Notifier::connect(addr, Some(Duration::from_secs(30))).unwrap();
        assert_eq!(n.watchdog_interval(), Some(Duration::from_secs(15)));
        assert_eq!(notifier_for(&path).watchdog_interval(), None);
    }
}
