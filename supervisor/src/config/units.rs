//! Human units in the config file: durations (`"90s"`, `"1.5s"`), sizes
//! (`"512MiB"`, `"4096"`) and percentages (`"10%"`), parsed strictly so an
//! ambiguous value is refused with the spelling to use instead.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// Separates a message from its hint inside a serde error string; the
/// config loader splits them again so the hint gets its own line.
pub const HINT_SEP: char = '\u{1f}';

/// The longest duration the config accepts: longer values are typos, and
/// bounding them keeps `Instant + Duration` arithmetic far from overflow.
pub const MAX_DURATION: Duration = Duration::from_secs(365 * 86_400);

/// Why a unit value was refused, and what to write instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitError {
    /// What is wrong with the value.
    pub message: String,
    /// What to write instead.
    pub hint: String,
}

impl UnitError {
    fn new(message: impl Into<String>, hint: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// The message and hint as one serde error string (see [`HINT_SEP`]).
    pub fn to_serde<E: de::Error>(&self) -> E {
        E::custom(format!("{}{HINT_SEP}{}", self.message, self.hint))
    }
}

const DURATION_UNITS: &[(&str, u128)] = &[
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
    ("d", 86_400_000_000_000),
];

const DURATION_HINT: &str = "write a number and a unit without spaces, e.g. \"90s\", \"100ms\", \"1.5s\", \"5m\", \"6h\", \"1d\" (units: ms, s, m, h, d)";

const SIZE_UNITS: &[(&str, u128)] = &[
    ("", 1),
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
];

const SIZE_HINT: &str = "write a whole number of bytes (\"4096\") or use a binary unit: KiB, MiB, GiB, TiB (e.g. \"512MiB\")";

/// A decimal number split into its integer digits and fraction digits.
struct Decimal<'a> {
    int: &'a str,
    frac: &'a str,
}

impl Decimal<'_> {
    /// `self × scale`, truncated to a whole number; `None` on overflow.
    fn scaled(&self, scale: u128) -> Option<u128> {
        let int: u128 = if self.int.is_empty() {
            0
        } else {
            self.int.parse().ok()?
        };
        let mut value = int.checked_mul(scale)?;
        if !self.frac.is_empty() {
            let frac: u128 = self.frac.parse().ok()?;
            let denom = 10u128.checked_pow(u32::try_from(self.frac.len()).ok()?)?;
            value = value.checked_add(frac.checked_mul(scale)? / denom)?;
        }
        Some(value)
    }
}

/// Splits `text` into a decimal number and the unit that follows it.
fn split_number<'a>(
    text: &'a str,
    what: &str,
    hint: &str,
) -> Result<(Decimal<'a>, &'a str), UnitError> {
    if text.is_empty() {
        return Err(UnitError::new(format!("empty {what}"), hint));
    }
    if text.starts_with('-') {
        return Err(UnitError::new(format!("{what} {text:?} is negative"), hint));
    }
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(end);
    if number.is_empty() {
        return Err(UnitError::new(
            format!("{what} {text:?} does not start with a number"),
            hint,
        ));
    }
    let (int, frac) = match number.split_once('.') {
        None => (number, ""),
        Some((int, frac)) => {
            if int.is_empty() || frac.is_empty() || frac.contains('.') {
                return Err(UnitError::new(
                    format!("{what} {text:?} has a malformed number"),
                    hint,
                ));
            }
            if frac.len() > 9 {
                return Err(UnitError::new(
                    format!("{what} {text:?} has more than 9 decimal places"),
                    hint,
                ));
            }
            (int, frac)
        }
    };
    Ok((Decimal { int, frac }, unit))
}

/// Parses a duration such as `"90s"`, `"100ms"`, `"1.5s"`, `"5m"`, `"6h"`
/// or `"1d"`; a bare number is refused because its unit would be a guess.
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let (number, unit) = split_number(text, "duration", DURATION_HINT)?;
    if unit.is_empty() {
        return Err(UnitError::new(
            format!("duration {text:?} has no unit"),
            format!(
                "write \"{text}s\" for seconds or \"{text}ms\" for milliseconds (units: ms, s, m, h, d)"
            ),
        ));
    }
    let Some(&(_, scale)) = DURATION_UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(UnitError::new(
            format!("unknown unit {unit:?} in duration {text:?}"),
            DURATION_HINT,
        ));
    };
    let too_long = || {
        UnitError::new(
            format!("duration {text:?} is too long"),
            "the longest accepted duration is \"365d\"",
        )
    };
    let nanos = number.scaled(scale).ok_or_else(too_long)?;
    if nanos > MAX_DURATION.as_nanos() {
        return Err(too_long());
    }
    let nanos = u64::try_from(nanos).map_err(|_| too_long())?;
    Ok(Duration::from_nanos(nanos))
}

/// Parses a size: plain bytes (`"4096"`) or a binary unit (`"1KiB"`,
/// `"512MiB"`, `"2GiB"`). Decimal-looking units (`"512M"`, `"512mb"`,
/// `"1GB"`) are refused: whether they mean 10^6 or 2^20 is a guess.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let (number, unit) = split_number(text, "size", SIZE_HINT)?;
    let Some(&(_, scale)) = SIZE_UNITS.iter().find(|(name, _)| *name == unit) else {
        return Err(size_unit_error(text, number.int, unit));
    };
    if scale == 1 && !number.frac.is_empty() {
        return Err(UnitError::new(
            format!("size {text:?} is not a whole number of bytes"),
            SIZE_HINT,
        ));
    }
    let too_big = || UnitError::new(format!("size {text:?} is too large"), SIZE_HINT);
    let bytes = number.scaled(scale).ok_or_else(too_big)?;
    u64::try_from(bytes).map_err(|_| too_big())
}

/// The error for a size unit we do not accept, naming the binary spelling
/// when the unit looks like an ambiguous decimal or miscased one.
fn size_unit_error(text: &str, int: &str, unit: &str) -> UnitError {
    let lower = unit.to_ascii_lowercase();
    let binary = match lower.as_str() {
        "k" | "kb" | "kib" => Some("KiB"),
        "m" | "mb" | "mib" => Some("MiB"),
        "g" | "gb" | "gib" => Some("GiB"),
        "t" | "tb" | "tib" => Some("TiB"),
        "b" => Some("B"),
        _ => None,
    };
    match binary {
        Some(good) if lower.ends_with("ib") || lower == "b" => UnitError::new(
            format!("size unit {unit:?} in {text:?} is not spelled as accepted"),
            format!("write \"{int}{good}\" (units are case-sensitive: B, KiB, MiB, GiB, TiB)"),
        ),
        Some(good) => UnitError::new(
            format!("size {text:?} is ambiguous: {unit:?} could mean powers of 1000 or of 1024"),
            format!(
                "write \"{int}{good}\" for the binary unit (1{good} = {} bytes), or the exact number of bytes",
                SIZE_UNITS
                    .iter()
                    .find(|(name, _)| *name == good)
                    .map_or(0, |(_, scale)| *scale)
            ),
        ),
        None => UnitError::new(format!("unknown unit {unit:?} in size {text:?}"), SIZE_HINT),
    }
}

/// Parses a whole percentage such as `"10%"` (0 to 100).
pub fn parse_percent(text: &str) -> Result<u32, UnitError> {
    let hint = "write a whole percentage with a percent sign, e.g. \"10%\"";
    let Some(number) = text.strip_suffix('%') else {
        return Err(UnitError::new(
            format!("percentage {text:?} has no percent sign"),
            hint,
        ));
    };
    match number.parse::<u32>() {
        Ok(n) if n <= 100 && number.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        Ok(_) => Err(UnitError::new(
            format!("percentage {text:?} is above 100%"),
            hint,
        )),
        Err(_) => Err(UnitError::new(
            format!("percentage {text:?} is not a whole number"),
            hint,
        )),
    }
}

pub use wfhost_policy::format_duration;

/// A size as operators write it, for error messages: `"1MiB"` when exact,
/// bytes otherwise.
pub fn format_size(bytes: u64) -> String {
    for (name, scale) in SIZE_UNITS.iter().rev() {
        let scale = *scale as u64;
        if scale > 1 && bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{}{name}", bytes / scale);
        }
    }
    bytes.to_string()
}

/// A config value parsed by `parse` from a string (or, where allowed, a
/// TOML integer), so errors carry the value's line and column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parsed<T, K>(pub T, PhantomData<K>);

impl<T, K> Parsed<T, K> {
    /// The parsed value.
    pub fn get(&self) -> &T {
        &self.0
    }
}

/// How one kind of unit value is read.
pub trait UnitKind {
    /// The parsed type.
    type Value;
    /// What serde reports it expected.
    const EXPECTING: &'static str;
    /// Parses the string form.
    fn parse(text: &str) -> Result<Self::Value, UnitError>;
    /// Reads a bare TOML integer, or explains why one is not accepted.
    fn from_int(n: i64) -> Result<Self::Value, UnitError>;
}

/// Durations: `"90s"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationKind {}

impl UnitKind for DurationKind {
    type Value = Duration;
    const EXPECTING: &'static str = "a duration string such as \"90s\"";
    fn parse(text: &str) -> Result<Duration, UnitError> {
        parse_duration(text)
    }
    fn from_int(n: i64) -> Result<Duration, UnitError> {
        Err(UnitError::new(
            format!("duration {n} is a bare number"),
            format!("write a string with a unit, e.g. \"{n}s\" or \"{n}ms\""),
        ))
    }
}

/// Sizes: `"512MiB"` or plain bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeKind {}

impl UnitKind for SizeKind {
    type Value = u64;
    const EXPECTING: &'static str = "a size such as \"512MiB\" or a number of bytes";
    fn parse(text: &str) -> Result<u64, UnitError> {
        parse_size(text)
    }
    fn from_int(n: i64) -> Result<u64, UnitError> {
        u64::try_from(n).map_err(|_| UnitError::new(format!("size {n} is negative"), SIZE_HINT))
    }
}

/// Percentages: `"10%"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PercentKind {}

impl UnitKind for PercentKind {
    type Value = u32;
    const EXPECTING: &'static str = "a percentage such as \"10%\"";
    fn parse(text: &str) -> Result<u32, UnitError> {
        parse_percent(text)
    }
    fn from_int(n: i64) -> Result<u32, UnitError> {
        Err(UnitError::new(
            format!("percentage {n} has no percent sign"),
            format!("write a string, e.g. \"{n}%\""),
        ))
    }
}

/// A duration in the config file.
pub type DurationValue = Parsed<Duration, DurationKind>;
/// A size in the config file.
pub type SizeValue = Parsed<u64, SizeKind>;
/// A percentage in the config file.
pub type PercentValue = Parsed<u32, PercentKind>;

impl<'de, K: UnitKind> Deserialize<'de> for Parsed<K::Value, K> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V<K>(PhantomData<K>);
        impl<K: UnitKind> Visitor<'_> for V<K> {
            type Value = K::Value;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(K::EXPECTING)
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<K::Value, E> {
                K::parse(v).map_err(|e| e.to_serde())
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<K::Value, E> {
                K::from_int(v).map_err(|e| e.to_serde())
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<K::Value, E> {
                let v = i64::try_from(v).map_err(|_| E::custom("number too large"))?;
                self.visit_i64(v)
            }
        }
        deserializer
            .deserialize_any(V::<K>(PhantomData))
            .map(|v| Parsed(v, PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_every_unit() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("100ms"), Ok(Duration::from_millis(100)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("6h"), Ok(Duration::from_secs(6 * 3600)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("365d"), Ok(MAX_DURATION));
    }

    #[test]
    fn durations_accept_fractions() {
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0.25m"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("2.5ms"), Ok(Duration::from_micros(2500)));
        assert_eq!(parse_duration("0.000000001s"), Ok(Duration::from_nanos(1)));
    }

    #[test]
    fn durations_refuse_bad_forms_with_a_hint() {
        for bad in [
            "",
            "90",
            "s",
            "-5s",
            "5 s",
            "5x",
            "5S",
            "5min",
            "1h30m",
            "1.",
            ".5s",
            "1..5s",
            "1.2.3s",
            "366d",
            "99999999999999999999999d",
            "0.0000000001s",
            " 5s",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert!(!err.hint.is_empty(), "{bad}: {err:?}");
        }
        let err = parse_duration("90").unwrap_err();
        assert!(err.message.contains("no unit"), "{err:?}");
        assert!(err.hint.contains("\"90s\""), "{err:?}");
        let err = parse_duration("400d").unwrap_err();
        assert!(err.message.contains("too long"), "{err:?}");
    }

    #[test]
    fn sizes_parse_bytes_and_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("10B"), Ok(10));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("1TiB"), Ok(1 << 40));
        assert_eq!(parse_size("1.5KiB"), Ok(1536));
        assert_eq!(parse_size("16777215TiB"), Ok(16_777_215 << 40));
        assert!(parse_size("16777216TiB").is_err());
    }

    #[test]
    fn sizes_refuse_ambiguous_decimal_units() {
        for bad in [
            "512M", "512mb", "512MB", "1G", "1gb", "4k", "4K", "4KB", "1T",
        ] {
            let err = parse_size(bad).expect_err(bad);
            assert!(err.message.contains("ambiguous"), "{bad}: {err:?}");
            assert!(err.hint.contains("iB\""), "{bad}: {err:?}");
        }
        let err = parse_size("512M").unwrap_err();
        assert!(err.hint.contains("\"512MiB\""), "{err:?}");
        assert!(err.hint.contains("1048576"), "{err:?}");
    }

    #[test]
    fn sizes_refuse_miscased_and_unknown_units_and_fraction_bytes() {
        let err = parse_size("512mib").unwrap_err();
        assert!(err.hint.contains("\"512MiB\""), "{err:?}");
        for bad in [
            "",
            "MiB",
            "-1",
            "1.5",
            "1.5B",
            "12 MiB",
            "3PiB",
            "x",
            "99999999999TiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn percentages_parse_whole_numbers_only() {
        assert_eq!(parse_percent("10%"), Ok(10));
        assert_eq!(parse_percent("0%"), Ok(0));
        assert_eq!(parse_percent("100%"), Ok(100));
        for bad in ["10", "101%", "-1%", "2.5%", "%", "+5%", " 5%"] {
            assert!(parse_percent(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_round_trip_for_messages() {
        for text in [
            "90s", "100ms", "5m", "6h", "1d", "1.500s", "2.5ms", "0.001ms",
        ] {
            let d = parse_duration(text).unwrap();
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1.500s");
        assert_eq!(format_duration(Duration::from_micros(2500)), "2.5ms");
        assert_eq!(format_size(1 << 20), "1MiB");
        assert_eq!(format_size(256 << 10), "256KiB");
        assert_eq!(format_size(1000), "1000");
    }
}
