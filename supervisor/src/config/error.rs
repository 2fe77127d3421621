//! Why a config was refused: the error, and the problem behind it with
//! where it is (file, line, column), what is wrong and what to do.

use std::ops::Range;
use std::path::{Path, PathBuf};

use super::units::HINT_SEP;
use super::*;

use thiserror::Error;

/// Why a config was refused.
#[derive(Debug, Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error(
        "{}: cannot read the config file: {source}\n  help: check the path and that this user may read the file",
        path.display()
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No config was named and there is none at the default location.
    #[error(
        "no config file: --config is not given, {} is not set, and {} does not exist\n  help: name the \
         supervisor's config with --config PATH (or its socket with --socket PATH), or set {}",
        CONFIG_ENV,
        DEFAULT_CONFIG,
        CONFIG_ENV
    )]
    NotFound,
    /// The path names a FIFO, a device, a directory: nothing to read a
    /// config from (and a FIFO or terminal could block the reader).
    #[error(
        "{}: is {what}, not a regular file, so it is not read as a config\n  help: point at the config file \
         itself (a symbolic link to one is fine)",
        path.display()
    )]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },
    /// The file is too big to be a config.
    #[error(
        "{}: the file is larger than {} bytes, too large for a config\n  help: check that this is the right file",
        path.display(), MAX_CONFIG_BYTES
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The file has a syntax error, an unknown key, or a value out of bounds.
    #[error("{}:{line}:{column}: {message}\n  help: {hint}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line of the offending text.
        line: usize,
        /// 1-based column (in characters) of the offending text.
        column: usize,
        /// What is wrong.
        message: String,
        /// What to do about it.
        hint: String,
    },
}

/// A refused value: where it is, what is wrong, what to do.
#[derive(Debug)]
pub(super) struct Problem {
    span: Range<usize>,
    message: String,
    hint: String,
}

impl Problem {
    pub(super) fn new(
        span: Range<usize>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> Self {
        Self {
            span,
            message: message.into(),
            hint: hint.into(),
        }
    }

    /// A problem from a TOML or serde message: our own values carry their
    /// hint after [`HINT_SEP`]; toml's own messages get one by their kind.
    pub(super) fn from_message(span: Range<usize>, message: &str) -> Self {
        if let Some((message, hint)) = message.split_once(HINT_SEP) {
            return Self::new(span, message, hint);
        }
        let message = message.trim_end();
        if let Some((unknown, hint)) = unknown_field(message) {
            return Self::new(span, unknown, hint);
        }
        let hint = if message.starts_with("unknown field") {
            "remove the key or fix its spelling: unknown keys are refused so a typo never goes unnoticed"
        } else if message.starts_with("missing field") {
            "add the key (see examples/wfhost.toml for a complete config)"
        } else if message.starts_with("invalid type") {
            "give the value the type shown in examples/wfhost.toml (durations and sizes are quoted strings such as \"90s\" and \"512MiB\"; command is a list of strings)"
        } else if message.starts_with("duplicate key") {
            "each key may appear once per table: remove one"
        } else {
            "fix the TOML syntax here (strings need double quotes; tables are [supervisor], [defaults] and [[deployment]])"
        };
        Self::new(span, message, hint)
    }

    pub(super) fn failure(span: Range<usize>, (message, hint): resolve::Failure) -> Self {
        Self::new(span, message, hint)
    }

    pub(super) fn into_error(self, text: &str, path: &Path) -> ConfigError {
        let (line, column) = line_column(text, self.span.start);
        ConfigError::Invalid {
            path: path.to_path_buf(),
            line,
            column,
            message: self.message,
            hint: self.hint,
        }
    }
}

/// serde's "unknown field `drian_timeout`, expected one of `id`, …" as
/// the key alone, with the nearest known key as the hint ("did you mean
/// drain_timeout?"), or the known keys when none is near.
fn unknown_field(message: &str) -> Option<(String, String)> {
    let rest = message.strip_prefix("unknown field `")?;
    let (name, expected) = rest.split_once('`')?;
    let known: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let unknown = format!("unknown field `{name}`");
    let nearest = known
        .iter()
        .map(|k| (edit_distance(name, k), *k))
        .filter(|(d, k)| *d <= (k.len() / 3).max(2))
        .min();
    let hint = match nearest {
        Some((_, k)) => format!("did you mean `{k}`? Fix its spelling: unknown keys are refused so a typo never goes unnoticed"),
        None if known.is_empty() => {
            "remove the key or fix its spelling: unknown keys are refused so a typo never goes unnoticed".to_owned()
        }
        None => format!("remove it or fix its spelling; this table's keys are {}", known.join(", ")),
    };
    Some((unknown, hint))
}

/// Levenshtein distance by characters (keys are short).
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
pub(super) fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_names_the_nearest_known_one() {
        let message = "unknown field `drian_timeout`, expected one of `id`, `command`, `drain_timeout`, `kill_timeout`";
        let (unknown, hint) = unknown_field(message).unwrap();
        assert_eq!(unknown, "unknown field `drian_timeout`");
        assert!(hint.starts_with("did you mean `drain_timeout`?"), "{hint}");
        let (_, far) = unknown_field("unknown field `colour`, expected `id` or `command`").unwrap();
        assert_eq!(
            far,
            "remove it or fix its spelling; this table's keys are id, command"
        );
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
