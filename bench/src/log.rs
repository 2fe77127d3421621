//! Reading the supervisor's JSON log (`--log-format json`): one object per
//! line, `{"timestamp": "…Z" (µs), "level", "message", …fields}`.

use std::fs::File;
use std::io::Read;
use std::path::Path;

/// One parsed log line.
#[derive(Debug, Clone)]
pub struct Line {
    /// Unix time in microseconds (CLOCK_REALTIME, as logged).
    pub ts_us: i64,
    /// `INFO`, `DEBUG`, `WARN`, …
    pub level: String,
    /// The message.
    pub msg: String,
    /// Every field, the message included.
    pub fields: serde_json::Map<String, serde_json::Value>,
}

impl Line {
    /// The `deployment` field.
    pub fn deployment(&self) -> Option<&str> {
        self.fields.get("deployment").and_then(|v| v.as_str())
    }

    /// The `pid` field.
    pub fn pid(&self) -> Option<u64> {
        self.fields.get("pid").and_then(|v| v.as_u64())
    }

    /// A string field.
    pub fn str_field(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(|v| v.as_str())
    }

    /// Whether this is `msg` about `deployment`.
    pub fn is(&self, msg: &str, deployment: &str) -> bool {
        self.msg == msg && self.deployment() == Some(deployment)
    }

    fn parse(text: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        let ts_us = parse_rfc3339_us(v.get("timestamp")?.as_str()?)?;
        let level = v.get("level")?.as_str()?.to_owned();
        // Fields sit at the top level beside `timestamp` and `level`
        // (flattened), or in a `fields` object (tracing's default).
        let fields = match v.get("fields").and_then(|f| f.as_object()) {
            Some(f) => f.clone(),
            None => {
                let mut f = v.as_object()?.clone();
                f.remove("timestamp");
                f.remove("level");
                f
            }
        };
        let msg = fields.get("message")?.as_str()?.to_owned();
        Some(Self {
            ts_us,
            level,
            msg,
            fields,
        })
    }
}

/// A log file read incrementally as it grows.
#[derive(Debug)]
pub struct LogTail {
    file: File,
    partial: Vec<u8>,
    /// Every complete line read so far, in order.
    pub lines: Vec<Line>,
    /// Lines that were not JSON log objects (e.g. panics, eprintln).
    pub other: Vec<String>,
}

impl LogTail {
    /// Opens `path` for tailing from its start.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(Self {
            file: File::open(path)?,
            partial: Vec::new(),
            lines: Vec::new(),
            other: Vec::new(),
        })
    }

    /// Reads whatever was appended; returns how many new lines parsed.
    pub fn poll(&mut self) -> usize {
        let mut buf = Vec::new();
        if self.file.read_to_end(&mut buf).is_err() || buf.is_empty() {
            return 0;
        }
        self.partial.extend_from_slice(&buf);
        let before = self.lines.len();
        let mut start = 0;
        while let Some(nl) = self.partial[start..].iter().position(|&b| b == b'\n') {
            let text = String::from_utf8_lossy(&self.partial[start..start + nl]).into_owned();
            start += nl + 1;
            match Line::parse(&text) {
                Some(line) => self.lines.push(line),
                None if !text.trim().is_empty() => self.other.push(text),
                None => {}
            }
        }
        self.partial.drain(..start);
        self.lines.len() - before
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
/// `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `2026-11-29T12:26:19.061083Z` (UTC, any number of fraction
/// digits) to Unix microseconds.
pub fn parse_rfc3339_us(s: &str) -> Option<i64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, ""));
    let mut t = hms.splitn(3, ':').map(|p| p.parse::<i64>().ok());
    let (h, mi, se) = (t.next()??, t.next()??, t.next()??);
    let mut micros = 0i64;
    for (i, c) in frac.chars().take(6).enumerate() {
        micros += i64::from(c.to_digit(10)?) * 10i64.pow(5 - i as u32);
    }
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se;
    Some(secs * 1_000_000 + micros)
}

/// Unix microseconds as `2026-11-29 12:26:19`.
pub fn format_unix_us(us: i64) -> String {
    let secs = us.div_euclid(1_000_000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // civil_from_days (Hinnant).
    let z = days + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tracing_timestamps() {
        assert_eq!(parse_rfc3339_us("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            parse_rfc3339_us("1970-01-02T00:00:01.5Z"),
            Some(86_401_500_000)
        );
        let us = parse_rfc3339_us("2026-11-29T12:26:19.061083Z").expect("parses");
        assert_eq!(us % 1_000_000, 61_083);
        assert_eq!(format_unix_us(us), "2026-11-29 12:26:19");
    }
}
