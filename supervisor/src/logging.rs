//! Log output: plain text for people (default) or JSON lines for machines,
//! on stderr, filtered by `RUST_LOG` (default `info`).

use std::io::IsTerminal;

use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::prelude::*;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event.
    #[default]
    Text,
    /// One JSON object per event.
    Json,
}

/// Installs the global subscriber. A bad `RUST_LOG` falls back to `info`
/// with a warning rather than silencing the supervisor.
pub fn init(format: LogFormat) {
    let (filter, bad) = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => match spec.parse::<Targets>() {
            Ok(t) => (t, None),
            Err(e) => (
                Targets::new().with_default(LevelFilter::INFO),
                Some((spec, e.to_string())),
            ),
        },
        _ => (Targets::new().with_default(LevelFilter::INFO), None),
    };
    let registry = tracing_subscriber::registry().with(filter);
    let result = match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_target(false)
                    // Colour only for a person at a terminal: in files and
                    // journald escape codes would split the key=value fields.
                    .with_ansi(std::io::stderr().is_terminal()),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .with_writer(std::io::stderr)
                    .with_target(false)
                    .with_ansi(false),
            )
            .try_init(),
    };
    if result.is_ok()
        && let Some((spec, e)) = bad
    {
        tracing::warn!(rust_log = %spec, error = %e, "ignoring unparsable RUST_LOG; logging at info");
    }
}
