//! What a command that waits shows while it waits (`recycle`, `drain
//! --wait`, `resume`, `stop --wait`): on a terminal one line on stderr,
//! rewritten in place, with the drain budget used and left, the steps in
//! flight and their behaviour, and the stage of a recycle; elsewhere plain
//! lines, one per stage and at most one every [`PLAIN_EVERY`] within a
//! stage. The command's result still goes to stdout on its own.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::control::client::{CallError, Target};
use crate::control::protocol::Request;
use crate::exit;
use crate::human;

/// How often the supervisor is asked while waiting.
pub const POLL: Duration = Duration::from_millis(200);

/// The most often a plain (not terminal) line repeats a stage.
const PLAIN_EVERY: Duration = Duration::from_secs(2);

/// The line being shown.
pub struct Progress {
    tty: bool,
    width: usize,
    shown: bool,
    stage: String,
    printed_at: Option<Instant>,
    started: Instant,
}

impl Progress {
    /// Progress on stderr, in place when it is a terminal.
    pub fn new() -> Self {
        let tty = std::io::stderr().is_terminal();
        Self {
            tty,
            width: if tty { terminal_width() } else { usize::MAX },
            shown: false,
            stage: String::new(),
            printed_at: None,
            started: Instant::now(),
        }
    }

    /// How long the command has waited.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Shows `text`, which belongs to `stage` (a new stage is always
    /// printed; on a terminal every change is).
    pub fn show(&mut self, stage: &str, text: &str) {
        let line = format!(
            "[{:>5}] {text}",
            human::ms(self.elapsed().as_millis() as u64)
        );
        let mut err = std::io::stderr().lock();
        if self.tty {
            let kept: String = line.chars().take(self.width.saturating_sub(1)).collect();
            let _ = write!(err, "\r\x1b[2K{kept}");
            let _ = err.flush();
            self.shown = true;
        } else if stage != self.stage || self.printed_at.is_none_or(|t| t.elapsed() >= PLAIN_EVERY)
        {
            let _ = writeln!(err, "{line}");
            self.printed_at = Some(Instant::now());
        }
        self.stage = stage.to_owned();
    }

    /// Takes the line off a terminal, before the result is printed.
    pub fn clear(&mut self) {
        if self.tty && self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[2K");
            let _ = err.flush();
            self.shown = false;
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.clear();
    }
}

/// The terminal's columns (stderr's), or 100.
fn terminal_width() -> usize {
    // SAFETY: TIOCGWINSZ fills a winsize we own; a failure leaves it zero.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    if ok && size.ws_col > 0 {
        usize::from(size.ws_col)
    } else {
        100
    }
}

/// Follows deployment `id` until `done` says what to print and which exit
/// code to return, showing its stage meanwhile; a supervisor that stops
/// answering or forgets the deployment ends the wait with the reason.
pub fn follow(
    target: &Target,
    id: &str,
    mut done: impl FnMut(&Value, &Progress) -> Option<(String, u8)>,
) -> u8 {
    let mut progress = Progress::new();
    loop {
        let d = match status_of(target, id) {
            Ok(Some(d)) => d,
            Ok(None) => {
                progress.clear();
                eprintln!("wfhost: {id} is no longer configured (a reload removed it)");
                return exit::FAILED;
            }
            Err(e) => {
                progress.clear();
                eprintln!("wfhost: {}", e.message);
                return e.code;
            }
        };
        if let Some((said, code)) = done(&d, &progress) {
            progress.clear();
            if code == exit::OK {
                println!("{said}");
            } else {
                eprintln!("wfhost: {said}");
            }
            return code;
        }
        let (stage, words) = stage_of(&d);
        progress.show(&stage, &format!("{id}: {words}"));
        std::thread::sleep(POLL);
    }
}

/// Every deployment's status, or why the supervisor did not answer.
pub fn statuses(target: &Target) -> Result<Vec<Value>, CallError> {
    let data = target.call(Request::Status)?;
    Ok(data["deployments"].as_array().cloned().unwrap_or_default())
}

/// One deployment's status.
pub fn status_of(target: &Target, id: &str) -> Result<Option<Value>, CallError> {
    Ok(statuses(target)?.into_iter().find(|d| d["id"] == id))
}

/// The drain under way in words: budget used and left, whether it
/// ticks, and the steps it waits for with their behaviour.
pub fn drain_words(d: &Value) -> String {
    let drain = &d["drain"];
    let used = drain["used_ms"].as_u64().unwrap_or(0);
    let left = drain["budget_ms"]
        .as_u64()
        .unwrap_or(0)
        .saturating_sub(used);
    let ticking = match drain["budget"].as_str() {
        Some("paused") => "paused",
        Some("escalated") => "spent, cancel sent",
        Some("running") => "running",
        _ => "stopped",
    };
    let empty = Vec::new();
    let listed = d["steps"].as_array().unwrap_or(&empty);
    let mut steps: Vec<String> = listed
        .iter()
        .take(3)
        .map(|s| {
            format!(
                "{} ({})",
                s["step"].as_str().unwrap_or("?"),
                s["drain"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let n = d["steps_in_flight"].as_u64().unwrap_or(0) as usize;
    if n > steps.len() {
        steps.push(format!("+{}", n - steps.len()));
    }
    let waits = if steps.is_empty() {
        "no steps, waiting for Drained".to_owned()
    } else {
        format!("steps: {}", steps.join(", "))
    };
    format!(
        "budget {} used, {} left, {ticking}; {waits}",
        human::ms(used),
        human::ms(left)
    )
}

/// A deployment's stage and the words for it.
pub fn stage_of(d: &Value) -> (String, String) {
    let state = d["state"].as_str().unwrap_or("?");
    let pid = d["pid"]
        .as_u64()
        .map_or_else(|| "-".to_owned(), |p| p.to_string());
    let next = d["next_in_ms"].as_u64().map(human::ms);
    let words = match state {
        "draining" => format!("draining: {}", drain_words(d)),
        "stopping" => match next {
            Some(n) => format!("stopping pid {pid}: SIGTERM sent, SIGKILL in {n}"),
            None => format!("stopping pid {pid}: waiting for it to exit"),
        },
        "starting" if d["pid"].is_u64() => format!("starting pid {pid}: waiting for its Ready"),
        "starting" => "spawning a child".to_owned(),
        "ready" => format!("ready, pid {pid}"),
        "backoff" => format!(
            "restarting in {} after: {}",
            next.unwrap_or_else(|| "a moment".into()),
            d["last_exit_brief"].as_str().unwrap_or("?")
        ),
        other => other.to_owned(),
    };
    (state.to_owned(), words)
}
