//! `[fleet]`: this host's name and its lease timing, checked. A fleet is
//! several hosts sharing one PostgreSQL store (`[store] url`), so a
//! `[fleet]` without one is refused where it is written.

use std::time::Duration;

use toml::Spanned;

use super::error::Problem;
use super::format_duration;
use super::raw::{PATH_MAX, RawFleet, Text};
use super::types::FleetSettings;

/// `lease_ttl` by default.
pub const LEASE_TTL: Duration = Duration::from_secs(15);
/// `lease_renew` by default.
pub const LEASE_RENEW: Duration = Duration::from_secs(5);
/// The shortest `lease_renew`: renewals are database round trips.
const MIN_RENEW: Duration = Duration::from_millis(100);
/// The bounds of `lease_ttl`.
const MIN_TTL: Duration = Duration::from_secs(1);
const MAX_TTL: Duration = Duration::from_secs(3600);

/// The machine's hostname, if it has a usable one.
pub fn hostname() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is passed.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = std::str::from_utf8(&buf[..end]).ok()?.to_owned();
    valid_host_id(&name).then_some(name)
}

/// A host id: 1 to 64 of `A-Z a-z 0-9 _ . -`, like a deployment id (it
/// names the host in status, metrics and the journal).
fn valid_host_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// The checked `[fleet]` settings, if the file has the table; `has_store`
/// says whether it also names `[store] url`.
pub(super) fn settings(
    raw: Option<Spanned<RawFleet>>,
    has_store: bool,
    hostname: &dyn Fn() -> Option<String>,
) -> Result<Option<FleetSettings>, Problem> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let table = raw.span();
    let raw = raw.into_inner();
    if !has_store {
        return Err(Problem::new(
            table,
            "[fleet] needs [store] url: the hosts of a fleet share one PostgreSQL database",
            "add [store] url = \"postgresql://…\" naming the same database on every host, or remove [fleet] to run this host on its own",
        ));
    }
    let host_id = match raw.host_id {
        Some(s) => {
            let id = s.get_ref().0.clone();
            if !valid_host_id(&id) {
                let shown: String = id.chars().take(80).collect();
                return Err(Problem::new(
                    s.span(),
                    format!("invalid host_id {shown:?}"),
                    "use 1 to 64 characters from A-Z, a-z, 0-9, '_', '.' and '-', unique in the fleet, e.g. \"web-1\"",
                ));
            }
            id
        }
        None => hostname().ok_or_else(|| {
            Problem::new(
                table.clone(),
                "[fleet] has no host_id and the hostname cannot serve as one",
                "set host_id = \"NAME\" (1 to 64 of A-Z, a-z, 0-9, '_', '.', '-'), unique in the fleet",
            )
        })?,
    };
    let ttl = match &raw.lease_ttl {
        Some(s) => {
            let d = *s.get_ref().get();
            if !(MIN_TTL..=MAX_TTL).contains(&d) {
                return Err(Problem::new(
                    s.span(),
                    format!("lease_ttl {} is out of range", format_duration(d)),
                    "choose between \"1s\" and \"1h\" (the default is \"15s\")",
                ));
            }
            d
        }
        None => LEASE_TTL,
    };
    let renew = match &raw.lease_renew {
        Some(s) => {
            let d = *s.get_ref().get();
            if d < MIN_RENEW || d * 3 > ttl {
                return Err(Problem::new(
                    s.span(),
                    format!(
                        "lease_renew {} does not fit lease_ttl {}",
                        format_duration(d),
                        format_duration(ttl)
                    ),
                    format!(
                        "choose at least \"100ms\" and at most a third of lease_ttl ({}): a host renews several times before its lease can run out",
                        format_duration(ttl / 3)
                    ),
                ));
            }
            d
        }
        // The default, shortened to fit a short TTL.
        None => LEASE_RENEW.min(ttl / 3),
    };
    let capacity = match &raw.capacity {
        Some(s) => {
            let c = *s.get_ref();
            if !(1..=MAX_CAPACITY).contains(&c) {
                return Err(Problem::new(
                    s.span(),
                    format!("capacity {c} is out of range"),
                    "choose 1 to 1000: this host's weight in the fair share (2 takes twice a capacity-1 host's share)",
                ));
            }
            c
        }
        None => 1,
    };
    Ok(Some(FleetSettings {
        host_id,
        lease_ttl: ttl,
        lease_renew: renew,
        capacity,
    }))
}

/// The largest `capacity`.
const MAX_CAPACITY: u32 = 1000;

/// A deployment's `hosts` (its own, else `[defaults]`'s), each a valid
/// host id, none twice; empty when unset (any host).
pub(super) fn hosts(
    own: Option<Spanned<Vec<Spanned<Text<PATH_MAX>>>>>,
    defaults: &Option<Spanned<Vec<Spanned<Text<PATH_MAX>>>>>,
) -> Result<Vec<String>, Problem> {
    let Some(list) = own.or_else(|| defaults.clone()) else {
        return Ok(Vec::new());
    };
    if list.get_ref().is_empty() {
        return Err(Problem::new(
            list.span(),
            "hosts is empty: the deployment could run nowhere",
            "name at least one host_id, or remove hosts to let any host run it",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for h in list.get_ref() {
        let id = h.get_ref().0.clone();
        if !valid_host_id(&id) {
            let shown: String = id.chars().take(80).collect();
            return Err(Problem::new(
                h.span(),
                format!("invalid host id {shown:?} in hosts"),
                "use the hosts' [fleet] host_id: 1 to 64 of A-Z, a-z, 0-9, '_', '.', '-'",
            ));
        }
        if out.contains(&id) {
            return Err(Problem::new(
                h.span(),
                format!("hosts names {id} twice"),
                "name each host once",
            ));
        }
        out.push(id);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::{ConfigError, parse};

    const STORE: &str = "[store]\nurl = \"host=/run/postgresql dbname=wfhost\"\n";

    fn load(text: &str) -> Result<crate::config::Config, ConfigError> {
        parse(text, Path::new("/etc/wfhost/wfhost.toml"))
    }

    fn refused(text: &str) -> (usize, usize, String, String) {
        match load(text) {
            Err(ConfigError::Invalid {
                line,
                column,
                message,
                hint,
                ..
            }) => (line, column, message, hint),
            other => panic!("expected Invalid, got {other:?}"),
        }
    }

    #[test]
    fn hosts_and_capacity_are_checked_and_hosts_needs_a_fleet() {
        let dep = "[[deployment]]\nid = \"d\"\ncommand = [\"/bin/sh\"]\n";
        let c = load(&format!(
            "{STORE}[fleet]\nhost_id = \"a\"\ncapacity = 3\n{dep}hosts = [\"a\", \"b\"]\n"
        ))
        .expect("loads");
        assert_eq!(c.fleet.expect("a fleet").capacity, 3);
        assert_eq!(c.deployments[0].hosts, ["a", "b"]);
        let (_, _, message, hint) = refused(&format!("{STORE}{dep}hosts = [\"a\"]\n"));
        assert!(
            message.contains("no [fleet]") && hint.contains("remove hosts"),
            "{message}"
        );
        let fleet = format!("{STORE}[fleet]\nhost_id = \"a\"\n");
        let (_, _, message, _) = refused(&format!("{fleet}{dep}hosts = []\n"));
        assert!(message.contains("hosts is empty"), "{message}");
        let (_, _, message, _) = refused(&format!("{fleet}{dep}hosts = [\"a\", \"a\"]\n"));
        assert!(message.contains("twice"), "{message}");
        let (_, _, message, _) = refused(&format!("{fleet}{dep}hosts = [\"a b\"]\n"));
        assert!(message.contains("invalid host id"), "{message}");
        let (_, _, message, _) = refused(&format!("{STORE}[fleet]\ncapacity = 0\n"));
        assert!(message.contains("capacity 0 is out of range"), "{message}");
    }

    #[test]
    fn defaults_are_the_hostname_15s_and_5s() {
        let c = load(&format!("{STORE}[fleet]\n")).expect("loads");
        let f = c.fleet.expect("a fleet");
        assert_eq!(Some(f.host_id), hostname());
        assert_eq!((f.lease_ttl, f.lease_renew), (LEASE_TTL, LEASE_RENEW));
        assert_eq!(
            load(STORE).expect("loads").fleet,
            None,
            "no table, no fleet"
        );
    }

    #[test]
    fn settings_are_taken_and_a_short_ttl_shortens_the_default_renewal() {
        let c = load(&format!(
            "{STORE}[fleet]\nhost_id = \"web-1\"\nlease_ttl = \"3s\"\n"
        ))
        .expect("loads");
        let f = c.fleet.expect("fleet");
        assert_eq!(f.host_id, "web-1");
        assert_eq!(f.lease_ttl, Duration::from_secs(3));
        assert_eq!(f.lease_renew, Duration::from_secs(1));
        let c = load(&format!(
            "{STORE}[fleet]\nlease_ttl = \"2s\"\nlease_renew = \"500ms\"\n"
        ))
        .expect("loads");
        assert_eq!(
            c.fleet.map(|f| f.lease_renew),
            Some(Duration::from_millis(500))
        );
    }

    #[test]
    fn a_fleet_without_a_store_url_is_refused_at_its_table() {
        let (line, column, message, hint) = refused("[fleet]\nhost_id = \"a\"\n");
        assert_eq!((line, column), (1, 1));
        assert!(message.contains("[fleet] needs [store] url"), "{message}");
        assert!(hint.contains("remove [fleet]"), "{hint}");
    }

    #[test]
    fn bad_values_are_named_at_their_line_and_column() {
        let cases = [
            (
                "host_id = \"web 1\"",
                "invalid host_id \"web 1\"",
                "unique in the fleet",
            ),
            ("host_id = \"\"", "invalid host_id \"\"", "1 to 64"),
            (
                "lease_ttl = \"500ms\"",
                "lease_ttl 500ms is out of range",
                "\"1s\"",
            ),
            (
                "lease_ttl = \"2h\"",
                "lease_ttl 2h is out of range",
                "\"1h\"",
            ),
            (
                "lease_renew = \"6s\"",
                "lease_renew 6s does not fit lease_ttl 15s",
                "a third of lease_ttl (5s)",
            ),
            (
                "lease_renew = \"50ms\"",
                "lease_renew 50ms does not fit",
                "at least \"100ms\"",
            ),
        ];
        for (line_text, want, help) in cases {
            let (line, column, message, hint) = refused(&format!("{STORE}[fleet]\n{line_text}\n"));
            assert_eq!(line, 4, "{line_text}: {message}");
            assert!(column > 1, "{line_text}: column {column}");
            assert!(message.starts_with(want), "{line_text}: {message}");
            assert!(hint.contains(help), "{line_text}: {hint}");
        }
        let (_, _, message, _) = refused(&format!("{STORE}[fleet]\nlease = \"1s\"\n"));
        assert!(message.starts_with("unknown field `lease`"), "{message}");
    }

    #[test]
    fn no_usable_hostname_asks_for_a_host_id() {
        let raw: RawFleet = toml::from_str("").expect("empty table");
        let span = 0..7;
        let err = settings(Some(Spanned::new(span, raw)), true, &|| None).expect_err("refused");
        let text = format!("{err:?}");
        assert!(text.contains("no host_id"), "{text}");
    }
}
