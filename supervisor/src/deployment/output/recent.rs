//! Each deployment's recent child output, kept in memory for `wfhost
//! logs`: the last [`MAX_LINES`] lines, at most [`MAX_BYTES`] of text,
//! across its children (a recycle does not clear it), numbered so a
//! follower knows what it has seen and what it missed.
//!
//! The buffers live in one process-wide table by deployment id: the
//! output tasks that fill them are spawned with the child and outlive its
//! wiring, and only the id ties them to the deployment. A deployment that
//! never prints costs nothing; one removed by a reload keeps its lines
//! until the supervisor exits (bounded like any other).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use serde::Serialize;
use tokio::sync::watch;

use crate::clock::unix_ms;

/// Most lines kept per deployment.
pub const MAX_LINES: usize = 1000;

/// Most bytes of text kept per deployment.
pub const MAX_BYTES: usize = 128 << 10;

/// Longest line of a child's stderr that status shows beside its exit.
pub const TAIL_CHARS: usize = 300;

/// `text` cut at `max` characters, with `…` where it was cut, and each
/// control character (a terminal escape a child wrote) shown as `�`, so
/// that printing it to an operator's terminal does nothing but print.
fn cut_chars(text: &str, max: usize) -> String {
    let mut out: String = text
        .chars()
        .take(max)
        .map(|c| if c.is_control() { '\u{fffd}' } else { c })
        .collect();
    if text.chars().nth(max).is_some() {
        out.push('…');
    }
    out
}

/// One line of a child's output.
#[derive(Debug, Clone, Serialize)]
pub struct Line {
    /// Its number in the deployment's output, from 1.
    pub seq: u64,
    /// Unix time in milliseconds when it was read.
    pub at_ms: u64,
    /// The child that wrote it.
    pub pid: u32,
    /// `stdout` or `stderr`.
    pub stream: &'static str,
    /// The text, without its newline.
    pub text: String,
    /// The line was longer than the log keeps and was cut.
    pub cut: bool,
    /// Not a line but a note: this many lines were left out here, past
    /// the child's rate (`text` is empty).
    #[serde(skip_serializing_if = "is_zero")]
    pub suppressed: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The recent output of one deployment.
#[derive(Debug)]
pub struct Recent {
    ring: Mutex<Ring>,
    /// The seq of the newest line, for followers.
    newest: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct Ring {
    lines: VecDeque<Line>,
    bytes: usize,
    next: u64,
}

impl Recent {
    fn new() -> Self {
        Self {
            ring: Mutex::new(Ring {
                next: 1,
                ..Ring::default()
            }),
            newest: watch::channel(0).0,
        }
    }

    /// Keeps a line, dropping the oldest past the bounds.
    pub fn push(&self, pid: u32, stream: &'static str, text: &str, cut: bool) {
        self.keep(pid, stream, text, cut, 0);
    }

    /// Keeps the note that `n` lines were left out.
    pub fn push_suppressed(&self, pid: u32, stream: &'static str, n: u64) {
        self.keep(pid, stream, "", false, n);
    }

    fn keep(&self, pid: u32, stream: &'static str, text: &str, cut: bool, suppressed: u64) {
        let seq = {
            let mut ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
            let seq = ring.next;
            ring.next += 1;
            ring.bytes += text.len();
            ring.lines.push_back(Line {
                seq,
                at_ms: unix_ms(),
                pid,
                stream,
                text: text.to_owned(),
                cut,
                suppressed,
            });
            while ring.lines.len() > MAX_LINES || ring.bytes > MAX_BYTES && ring.lines.len() > 1 {
                if let Some(old) = ring.lines.pop_front() {
                    ring.bytes -= old.text.len();
                }
            }
            seq
        };
        self.newest.send_replace(seq);
    }

    /// The last `n` lines kept.
    pub fn last(&self, n: usize) -> Vec<Line> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let skip = ring.lines.len().saturating_sub(n);
        ring.lines.iter().skip(skip).cloned().collect()
    }

    /// The last `n` lines child `pid` wrote to stderr, oldest first, each
    /// cut at [`TAIL_CHARS`] characters: what a crash left behind (an
    /// exception, a missing file), for status beside its exit.
    pub fn stderr_tail(&self, pid: u32, n: usize) -> Vec<String> {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let mut tail: Vec<String> = ring
            .lines
            .iter()
            .rev()
            .filter(|l| l.pid == pid && l.stream == "stderr" && l.suppressed == 0)
            .filter(|l| !l.text.trim().is_empty())
            .take(n)
            .map(|l| cut_chars(&l.text, TAIL_CHARS))
            .collect();
        tail.reverse();
        tail
    }

    /// The lines after seq `after`, and how many of those were already
    /// dropped from the buffer.
    pub fn after(&self, after: u64) -> (Vec<Line>, u64) {
        let ring = self.ring.lock().unwrap_or_else(|p| p.into_inner());
        let oldest = ring.lines.front().map_or(ring.next, |l| l.seq);
        let missed = oldest.saturating_sub(after + 1);
        let lines = ring
            .lines
            .iter()
            .filter(|l| l.seq > after)
            .cloned()
            .collect();
        (lines, missed)
    }

    /// Wakes when a line arrives.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.newest.subscribe()
    }
}

/// Every deployment's buffer.
static RECENT: OnceLock<Mutex<HashMap<String, Arc<Recent>>>> = OnceLock::new();

/// The buffer of `deployment`, made empty on first use.
pub fn recent(deployment: &str) -> Arc<Recent> {
    let table = RECENT.get_or_init(Default::default);
    let mut table = table.lock().unwrap_or_else(|p| p.into_inner());
    table
        .entry(deployment.to_owned())
        .or_insert_with(|| Arc::new(Recent::new()))
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_lines_are_kept_within_both_bounds() {
        let r = Recent::new();
        for i in 0..(MAX_LINES + 10) {
            r.push(7, "stdout", &format!("line {i}"), false);
        }
        let all = r.last(usize::MAX);
        assert_eq!(all.len(), MAX_LINES);
        assert_eq!(all.last().map(|l| l.text.as_str()), Some("line 1009"));
        assert_eq!(
            r.last(2).iter().map(|l| l.seq).collect::<Vec<_>>(),
            [1009, 1010]
        );
        let (lines, missed) = r.after(5);
        assert_eq!(missed, 5, "seqs 6 to 10 are gone");
        assert_eq!(lines.first().map(|l| l.seq), Some(11));
        let (none, missed) = r.after(1010);
        assert!(none.is_empty() && missed == 0, "a follower at the head");

        let big = Recent::new();
        let text = "x".repeat(MAX_BYTES / 4 + 1);
        for _ in 0..8 {
            big.push(7, "stderr", &text, false);
        }
        assert_eq!(big.last(usize::MAX).len(), 3, "bounded by bytes too");
        let huge = "y".repeat(MAX_BYTES * 2);
        big.push(7, "stderr", &huge, true);
        assert_eq!(
            big.last(usize::MAX).len(),
            1,
            "the newest line stays, however long"
        );
    }

    #[test]
    fn the_stderr_tail_is_one_childs_last_lines_cut_short() {
        let r = Recent::new();
        r.push(
            7,
            "stderr",
            "Traceback (most recent call last):\x1b[2J",
            false,
        );
        r.push(7, "stdout", "an ordinary line", false);
        r.push(8, "stderr", "another child's line", false);
        r.push(7, "stderr", "  ", false);
        r.push(
            7,
            "stderr",
            &format!("ValueError: {}", "é".repeat(400)),
            false,
        );
        let tail = r.stderr_tail(7, 5);
        assert_eq!(tail.len(), 2, "{tail:?}");
        assert_eq!(tail[0], "Traceback (most recent call last):\u{fffd}[2J");
        assert_eq!(tail[1].chars().count(), TAIL_CHARS + 1, "cut, with a mark");
        assert!(tail[1].ends_with('…'));
        assert_eq!(r.stderr_tail(7, 1).len(), 1);
        assert!(r.stderr_tail(9, 5).is_empty());
    }

    #[test]
    fn a_follower_is_woken_by_each_line() {
        let r = recent("follow-test");
        let mut rx = r.subscribe();
        assert!(!rx.has_changed().unwrap_or(true));
        r.push(1, "stdout", "hello", false);
        assert!(rx.has_changed().unwrap_or(false));
        assert_eq!(*rx.borrow_and_update(), 1);
        assert!(
            Arc::ptr_eq(&r, &recent("follow-test")),
            "one buffer per deployment"
        );
    }
}
