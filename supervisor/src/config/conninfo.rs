//! The PostgreSQL connection string: `[store] url` with the other
//! `[store]` keys folded in, so one string carries everything each
//! connection needs (pool, listener, fleet). The Rust client knows
//! neither libpq's TLS words (`sslmode=verify-full`, `sslrootcert`,
//! `sslcert`, `sslkey`) nor `passfile`, nor wfhost's `password_file`:
//! they are taken out here before the client parses the rest.

use std::path::PathBuf;
use std::str::FromStr;

/// libpq's `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    /// Plaintext only.
    Disable,
    /// TLS if the server offers it, unverified; else plaintext.
    Prefer,
    /// TLS, unverified (verified as `verify-ca` when `sslrootcert` is set).
    Require,
    /// TLS, the chain checked against `sslrootcert`, any host name.
    VerifyCa,
    /// TLS, the chain and the host name checked.
    VerifyFull,
}

impl SslMode {
    /// libpq's word for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyCa => "verify-ca",
            Self::VerifyFull => "verify-full",
        }
    }

    fn parse(word: &str) -> Result<Self, String> {
        Ok(match word {
            "disable" => Self::Disable,
            "prefer" => Self::Prefer,
            "require" => Self::Require,
            "verify-ca" => Self::VerifyCa,
            "verify-full" => Self::VerifyFull,
            "allow" => Self::Prefer,
            other => {
                return Err(format!(
                    "sslmode {other:?} is not one of disable, prefer, require, verify-ca, verify-full"
                ));
            }
        })
    }
}

/// The keys taken out of the string before the client parses it.
pub const EXTRAS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
    "passfile",
    "password_file",
];

/// A parsed connection string.
#[derive(Debug, Clone)]
pub struct Conninfo {
    /// Everything the client understands (TLS mode not yet set).
    pub config: postgres::Config,
    /// `sslmode`, if given (the default depends on the host: `store::postgres::tls`).
    pub sslmode: Option<SslMode>,
    /// `sslrootcert`: the CA certificates (PEM), or `system`.
    pub sslrootcert: Option<PathBuf>,
    /// `sslcert`: this client's certificate (PEM).
    pub sslcert: Option<PathBuf>,
    /// `sslkey`: its private key (PEM).
    pub sslkey: Option<PathBuf>,
    /// `password_file`: a file holding only the password.
    pub password_file: Option<PathBuf>,
    /// libpq's `passfile` (a `.pgpass` file).
    pub passfile: Option<PathBuf>,
}

impl Conninfo {
    /// Parses `text` (a `postgresql://` URL or `key=value` pairs).
    pub fn parse(text: &str) -> Result<Self, String> {
        let (rest, extras) = split(text)?;
        let config = postgres::Config::from_str(&rest).map_err(|e| e.to_string())?;
        let mut info = Self {
            config,
            sslmode: None,
            sslrootcert: None,
            sslcert: None,
            sslkey: None,
            password_file: None,
            passfile: None,
        };
        for (key, value) in extras {
            let path = || Some(PathBuf::from(&value));
            match key.as_str() {
                "sslmode" => info.sslmode = Some(SslMode::parse(&value)?),
                "sslrootcert" => info.sslrootcert = path(),
                "sslcert" => info.sslcert = path(),
                "sslkey" => info.sslkey = path(),
                "passfile" => info.passfile = path(),
                _ => info.password_file = path(),
            }
        }
        Ok(info)
    }
}

/// `text` with `key = value` added (a `[store]` key folded into the url);
/// a key the url already names is left as the url says.
pub fn with(text: &str, key: &str, value: &str) -> String {
    if is_url(text) {
        let sep = if text.contains('?') { '&' } else { '?' };
        format!("{text}{sep}{key}={}", encode(value))
    } else {
        format!("{text} {key}={}", quote(value))
    }
}

/// Whether `text` is a URL rather than `key=value` pairs.
fn is_url(text: &str) -> bool {
    text.starts_with("postgresql://") || text.starts_with("postgres://")
}

/// `text` without the [`EXTRAS`], and those (first one of each key wins,
/// as the url comes before the folded `[store]` keys).
fn split(text: &str) -> Result<(String, Vec<(String, String)>), String> {
    let mut extras: Vec<(String, String)> = Vec::new();
    let mut take = |key: &str, value: String| {
        if !extras.iter().any(|(k, _)| k == key) {
            extras.push((key.to_owned(), value));
        }
    };
    if is_url(text) {
        let Some((base, query)) = text.split_once('?') else {
            return Ok((text.to_owned(), extras));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if EXTRAS.contains(&key) {
                take(key, decode(value)?);
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_owned()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, extras));
    }
    let mut kept = Vec::new();
    for (key, value) in pairs(text)? {
        if EXTRAS.contains(&key.as_str()) {
            take(&key, value);
        } else {
            kept.push(format!("{key}={}", quote(&value)));
        }
    }
    Ok((kept.join(" "), extras))
}

/// The `key=value` pairs of libpq's keyword form (values quoted with `'`,
/// `\` escaping the next character).
fn pairs(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("`{key}` has no value (write {key}=VALUE)"));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("the quoted value of `{key}` is not closed")),
                    Some('\'') => break,
                    Some('\\') => value.extend(chars.next()),
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    value.extend(chars.next());
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

/// `value` quoted for the keyword form.
fn quote(value: &str) -> String {
    let mut out = String::from("'");
    for c in value.chars() {
        if c == '\'' || c == '\\' {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('\'');
    out
}

/// `value` percent-encoded for a URL's query.
fn encode(value: &str) -> String {
    let mut out = String::new();
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A URL query value percent-decoded.
fn decode(value: &str) -> Result<String, String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "a URL parameter has a bad %-escape".to_owned())?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a URL parameter is not UTF-8".to_owned())
}

/// `text` with every password in it (a URL's `user:PASSWORD@`, a
/// `password=` pair or query parameter) replaced by `***`: for anything
/// that might echo a connection string.
pub fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    // URL user info: scheme://user:secret@host
    while let Some(at) = rest.find("://") {
        let (head, tail) = rest.split_at(at + 3);
        out.push_str(head);
        let end = tail
            .find(|c: char| c == '/' || c == '?' || c.is_whitespace() || c == '"')
            .unwrap_or(tail.len());
        let authority = &tail[..end];
        match (authority.rfind('@'), authority.find(':')) {
            (Some(at), Some(colon)) if colon < at => {
                out.push_str(&authority[..colon]);
                out.push_str(":***");
                out.push_str(&authority[at..]);
            }
            _ => out.push_str(authority),
        }
        rest = &tail[end..];
    }
    out.push_str(rest);
    redact_pairs(&out)
}

/// `password=VALUE` (keyword form or query) as `password=***`.
fn redact_pairs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find("password=") {
        let before = rest[..at].chars().last();
        // `password_file=` and `sslpassword=` are not secrets.
        let whole = before.is_none_or(|c| c.is_whitespace() || c == '?' || c == '&');
        out.push_str(&rest[..at + 9]);
        rest = &rest[at + 9..];
        if !whole {
            continue;
        }
        let end = if rest.starts_with('\'') {
            let mut escaped = false;
            rest.char_indices()
                .skip(1)
                .find(|(_, c)| {
                    let close = *c == '\'' && !escaped;
                    escaped = *c == '\\' && !escaped;
                    close
                })
                .map_or(rest.len(), |(i, _)| i + 1)
        } else {
            rest.find(|c: char| c.is_whitespace() || c == '&' || c == '"')
                .unwrap_or(rest.len())
        };
        out.push_str("***");
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extras_come_out_of_urls_and_pairs() {
        let c = Conninfo::parse(
            "postgresql://app@db.example:6543/w?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(c.sslmode, Some(SslMode::VerifyFull));
        assert_eq!(c.sslrootcert, Some(PathBuf::from("/etc/ca.pem")));
        assert_eq!(c.config.get_dbname(), Some("w"));
        assert_eq!(c.config.get_application_name(), Some("x"));
        let c = Conninfo::parse(
            "host=db.example dbname=w sslmode=verify-ca sslcert='/a b/c.pem' password_file=/p",
        )
        .unwrap();
        assert_eq!(c.sslmode, Some(SslMode::VerifyCa));
        assert_eq!(c.sslcert, Some(PathBuf::from("/a b/c.pem")));
        assert_eq!(c.password_file, Some(PathBuf::from("/p")));
        assert!(Conninfo::parse("host=h dbname=w sslmode=sometimes").is_err());
    }

    #[test]
    fn folded_keys_round_trip_and_the_url_wins() {
        let url = with("postgresql://h/w?sslmode=require", "sslmode", "verify-full");
        let url = with(&url, "sslrootcert", "/x y/ca.pem");
        let c = Conninfo::parse(&url).unwrap();
        assert_eq!(c.sslmode, Some(SslMode::Require));
        assert_eq!(c.sslrootcert, Some(PathBuf::from("/x y/ca.pem")));
        let kv = with("host=h dbname=w", "sslkey", "/it's/k.pem");
        let c = Conninfo::parse(&kv).unwrap();
        assert_eq!(c.sslkey, Some(PathBuf::from("/it's/k.pem")));
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgresql://app:s3cret@db:5432/w?password_file=/p"),
            "postgresql://app:***@db:5432/w?password_file=/p"
        );
        assert_eq!(
            redact("host=h password='a b\\'c' dbname=w"),
            "host=h password=*** dbname=w"
        );
        assert_eq!(redact("x?password=p&y=1"), "x?password=***&y=1");
        assert_eq!(redact("postgresql://app@db/w"), "postgresql://app@db/w");
    }
}
