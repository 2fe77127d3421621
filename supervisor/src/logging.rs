//! Log output on stderr, filtered by `RUST_LOG` (default `info`): plain
//! text for people (default) or JSON lines for journald and collectors
//! (`log_format = "json"`, or `supervise --log-format json`).
//!
//! A text line puts what it is about first, so a person scanning the log
//! finds a deployment's lines by their start:
//!
//! ```text
//! 2026-11-29T12:52:39.581234Z  INFO orders[17297] stdout: mail 1: fetch done
//! 2026-11-29T12:52:40.002117Z  INFO orders[17297]: draining purpose=stop budget=10s
//! 2026-11-29T12:52:41.118004Z  INFO supervising socket=/var/lib/wfhost/wfhost.sock deployments=3
//! ```
//!
//! The `deployment`, `pid` and `stream` fields become that subject; the
//! other fields follow the message as `key=value`, quoted when the value
//! holds a space. A JSON line has the same fields at its top level.
//! Lines reach stderr through [`sink`], which never blocks the logger.

mod sink;

pub use sink::flush;

use std::fmt::{self, Write as _};
use std::io::IsTerminal;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::prelude::*;
use tracing_subscriber::registry::LookupSpan;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One readable line per event, the deployment first.
    #[default]
    Text,
    /// One JSON object per event, every field at the top level.
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
    let writer = || match sink::Sink::get() {
        Some(sink) => BoxMakeWriter::new(sink),
        None => BoxMakeWriter::new(std::io::stderr),
    };
    let result = match format {
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(writer())
                    // Colour only for a person at a terminal: in files and
                    // journald escape codes would split the fields.
                    .event_format(Text {
                        ansi: std::io::stderr().is_terminal(),
                    }),
            )
            .try_init(),
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_writer(writer())
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

/// The text line: time, level, subject, message, the other fields.
struct Text {
    ansi: bool,
}

impl<S, N> FormatEvent<S, N> for Text
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let level = *event.metadata().level();
        if self.ansi {
            writer.write_str("\x1b[2m")?;
        }
        SystemTime.format_time(&mut writer)?;
        if self.ansi {
            write!(writer, "\x1b[0m {}{level:>5}\x1b[0m ", colour(level))?;
        } else {
            write!(writer, " {level:>5} ")?;
        }
        writeln!(writer, "{}", fields.line())
    }
}

fn colour(level: Level) -> &'static str {
    match level {
        Level::ERROR => "\x1b[31m",
        Level::WARN => "\x1b[33m",
        Level::INFO => "\x1b[32m",
        Level::DEBUG => "\x1b[34m",
        Level::TRACE => "\x1b[35m",
    }
}

/// One event's fields, the subject ones set apart.
#[derive(Debug, Default)]
struct Fields {
    message: String,
    deployment: Option<String>,
    pid: Option<String>,
    stream: Option<String>,
    rest: Vec<(&'static str, String)>,
}

impl Fields {
    /// `orders[17297] stdout: text`, `orders[17297]: message k=v` or
    /// `message k=v`.
    fn line(&self) -> String {
        let mut line = String::with_capacity(self.message.len() + 64);
        if let Some(d) = &self.deployment {
            line.push_str(d);
            if let Some(pid) = self.pid.as_deref().filter(|p| p.parse::<u32>().is_ok()) {
                let _ = write!(line, "[{pid}]");
            }
            match &self.stream {
                Some(stream) => {
                    let _ = write!(line, " {stream}: ");
                }
                None => line.push_str(": "),
            }
        }
        line.push_str(&self.message);
        // A pid of no deployment (a refused client's) stays a field.
        let pid = self.pid.as_deref().filter(|_| self.deployment.is_none());
        for (key, value) in pid.map(|p| ("pid", p.to_owned())).iter().chain(&self.rest) {
            let _ = write!(line, " {}", Pair(key, value));
        }
        line
    }

    fn put(&mut self, field: &Field, value: String) {
        match field.name() {
            "message" => self.message = value,
            "deployment" => self.deployment = Some(value),
            "pid" => self.pid = Some(value),
            "stream" => self.stream = Some(value),
            name => self.rest.push((name, value)),
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%x` fields and the message arrive here and print as Display.
        self.put(field, format!("{value:?}"));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.to_string());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.to_string());
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.to_string());
    }
}

/// `key=value`, the value quoted (with escapes) when it is empty or holds
/// a space, a quote or an `=`, so lines split on spaces unambiguously.
struct Pair<'a>(&'a str, &'a str);

impl fmt::Display for Pair<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Pair(key, value) = *self;
        if value.is_empty() || value.contains([' ', '"', '=', '\n', '\t']) {
            write!(f, "{key}={value:?}")
        } else {
            write!(f, "{key}={value}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(
        message: &str,
        deployment: Option<&str>,
        pid: Option<&str>,
        stream: Option<&str>,
        rest: &[(&'static str, &str)],
    ) -> Fields {
        Fields {
            message: message.into(),
            deployment: deployment.map(Into::into),
            pid: pid.map(Into::into),
            stream: stream.map(Into::into),
            rest: rest.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        }
    }

    #[test]
    fn the_deployment_comes_first() {
        let child = fields(
            "mail 1: fetch done",
            Some("orders"),
            Some("17297"),
            Some("stdout"),
            &[],
        );
        assert_eq!(child.line(), "orders[17297] stdout: mail 1: fetch done");
        let fact = fields(
            "draining",
            Some("orders"),
            Some("17297"),
            None,
            &[("purpose", "stop"), ("budget", "10s")],
        );
        assert_eq!(
            fact.line(),
            "orders[17297]: draining purpose=stop budget=10s"
        );
        let no_child = fields("restarting", Some("orders"), Some("-"), None, &[]);
        assert_eq!(no_child.line(), "orders: restarting");
        let host = fields("supervising", None, None, None, &[("deployments", "3")]);
        assert_eq!(host.line(), "supervising deployments=3");
        let client = fields("refused", None, Some("42"), None, &[("uid", "65534")]);
        assert_eq!(client.line(), "refused pid=42 uid=65534");
    }

    #[test]
    fn values_with_spaces_are_quoted() {
        let f = fields(
            "stopped",
            Some("a"),
            None,
            None,
            &[("reason", "stopped: exit status 1"), ("empty", "")],
        );
        assert_eq!(
            f.line(),
            "a: stopped reason=\"stopped: exit status 1\" empty=\"\""
        );
    }
}
