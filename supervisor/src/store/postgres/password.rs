//! The database password, kept out of the config: read at each connect
//! (so a rotated file is picked up) from `[store] password_file`, else
//! `PGPASSWORD`, else libpq's password file (`passfile`, `PGPASSFILE`, or
//! `~/.pgpass`). A password written in the url itself still wins, as in
//! libpq. A secret file anyone but its owner may read is refused: the
//! password would already be out.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use postgres::config::Host;

use crate::config::conninfo::Conninfo;

/// The most a password file may hold (a password, not a dump).
const MAX_BYTES: u64 = 64 * 1024;

/// Sets `config`'s password from the sources `info` names, unless the
/// url gave one; what is wrong with a source that is set.
pub fn resolve(info: &Conninfo, config: &mut postgres::Config) -> Result<(), String> {
    if config.get_password().is_some() {
        return Ok(());
    }
    if let Some(path) = &info.password_file {
        let text = read_private(path, "password_file")?;
        let password = text.trim_end_matches(['\n', '\r']);
        if password.is_empty() {
            return Err(format!(
                "password_file {} is empty\n  help: write the password into it (one line)",
                path.display()
            ));
        }
        config.password(password);
        return Ok(());
    }
    if let Some(password) = std::env::var_os("PGPASSWORD").filter(|p| !p.is_empty()) {
        config.password(password.as_encoded_bytes());
        return Ok(());
    }
    let (path, named) = match info
        .passfile
        .clone()
        .or_else(|| std::env::var_os("PGPASSFILE").map(PathBuf::from))
    {
        Some(p) => (p, true),
        None => match std::env::var_os("HOME") {
            Some(home) => (PathBuf::from(home).join(".pgpass"), false),
            None => return Ok(()),
        },
    };
    if !named && !path.exists() {
        return Ok(());
    }
    let text = read_private(&path, "the password file (PGPASSFILE)")?;
    if let Some(password) = pgpass_match(&text, config) {
        config.password(password);
    }
    Ok(())
}

/// Refuses `path` (a secret, named by `setting`) if group or others may
/// read or write it, naming the file and the fix.
pub fn private_file(path: &Path, setting: &str) -> Result<(), String> {
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {setting} {}: {e}", path.display()))?;
    if !meta.is_file() {
        return Err(format!(
            "{setting} {} is not a regular file",
            path.display()
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{setting} {} may be read by others (mode {mode:04o}): refusing a secret others can read\n  help: chmod 600 {}",
            path.display(),
            path.display()
        ));
    }
    Ok(())
}

/// The text of secret file `path`, checked private and small.
fn read_private(path: &Path, setting: &str) -> Result<String, String> {
    private_file(path, setting)?;
    let meta = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {setting} {}: {e}", path.display()))?;
    if meta.len() > MAX_BYTES {
        return Err(format!(
            "{setting} {} is larger than {MAX_BYTES} bytes: it should hold a password",
            path.display()
        ));
    }
    std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {setting} {}: {e}", path.display()))
}

/// The password of the first `.pgpass` line matching `config`
/// (`host:port:database:user:password`, `*` matching anything, `\`
/// escaping `:` and `\`).
fn pgpass_match(text: &str, config: &postgres::Config) -> Option<String> {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(name)) => name.clone(),
        // libpq matches a socket directory as "localhost".
        Some(Host::Unix(_)) | None => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let db = config.get_dbname().unwrap_or_default();
    let user = config.get_user().unwrap_or_default();
    let wanted = [host.as_str(), port.as_str(), db, user];
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .map(fields)
        .find(|f| {
            f.len() == 5
                && f.iter()
                    .zip(wanted)
                    .all(|(field, want)| field == "*" || field == want)
        })
        .map(|f| f[4].clone())
}

/// The `:`-separated fields of a `.pgpass` line.
fn fields(line: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let (Some(next), Some(last)) = (chars.next(), out.last_mut()) {
                    last.push(next);
                }
            }
            ':' if out.len() < 5 => out.push(String::new()),
            c => {
                if let Some(last) = out.last_mut() {
                    last.push(c);
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::str::FromStr;

    #[test]
    fn pgpass_lines_match_by_host_port_database_and_user() {
        let config = postgres::Config::from_str("host=db port=6543 dbname=w user=app").unwrap();
        let text = "# comment\nother:*:*:*:no\ndb:6543:w:app:it\\:s\n*:*:*:*:fallback\n";
        assert_eq!(pgpass_match(text, &config).as_deref(), Some("it:s"));
        let config = postgres::Config::from_str("host=x dbname=w user=app").unwrap();
        assert_eq!(pgpass_match(text, &config).as_deref(), Some("fallback"));
    }

    #[test]
    fn a_password_file_others_can_read_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pw");
        std::fs::write(&path, "s3cret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let info = Conninfo::parse(&format!(
            "host=db dbname=w password_file={}",
            path.display()
        ))
        .unwrap();
        let mut config = info.config.clone();
        let err = resolve(&info, &mut config).unwrap_err();
        assert!(
            err.contains("mode 0644") && err.contains("chmod 600"),
            "{err}"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        resolve(&info, &mut config).unwrap();
        assert_eq!(config.get_password(), Some(&b"s3cret"[..]));
    }
}
