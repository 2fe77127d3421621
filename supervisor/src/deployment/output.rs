//! A child's stdout and stderr: copied line by line into the supervisor's
//! log (`orders[17297] stdout: …`) and into the deployment's bounded
//! buffer of recent output, which `wfhost logs` reads.
//!
//! Each child may have [`LINE_BURST`] lines logged at once and
//! [`LINES_PER_SECOND`] sustained, across both its streams; lines past
//! that are read and counted, not logged or kept, and the count is said
//! once the rate allows again (`N lines of output suppressed`), in the log
//! and in the recent output. A child writing without pause thus costs the
//! supervisor a read and a scan per line, never a log write, and its
//! output tasks yield to everyone else's (tokio's cooperative budget):
//! neighbours are not stalled and memory stays where it was.

mod recent;

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tracing::info;

pub use recent::{Line, MAX_LINES, recent};

use super::throttle::{Throttle, Verdict};

/// Longest child output line kept; the rest is cut.
const MAX_LOG_LINE: usize = 16 * 1024;

/// Read buffer of each output stream. tokio's `BufReader` default is
/// 8 KiB, zero-filled up front: two streams a child made it 1.6 MiB of an
/// idle 100-child supervisor (DESIGN §10). Lines longer than this are
/// gathered over several reads; each line costs a log write anyway.
const LOG_READ_BYTES: usize = 1024;

/// Lines of one child logged at once before the rate applies.
pub const LINE_BURST: u32 = 2_000;

/// Lines of one child logged each second, sustained.
pub const LINES_PER_SECOND: u32 = 500;

/// The bound both streams of one child share.
type Shared = Arc<Mutex<Throttle>>;

/// Copies a child's stdout and stderr (those it has) into the log and the
/// deployment's recent output, each on a task of its own, under one rate
/// bound for the child.
pub fn spawn<O, E>(stdout: Option<O>, stderr: Option<E>, deployment: &str, pid: u32)
where
    O: AsyncRead + Unpin + Send + 'static,
    E: AsyncRead + Unpin + Send + 'static,
{
    let throttle: Shared = Arc::new(Mutex::new(Throttle::with_rate(
        Instant::now(),
        LINE_BURST,
        LINES_PER_SECOND,
    )));
    if let Some(out) = stdout {
        let copy = Copy::new(deployment, pid, "stdout", throttle.clone());
        tokio::spawn(copy.run(out));
    }
    if let Some(err) = stderr {
        tokio::spawn(Copy::new(deployment, pid, "stderr", throttle).run(err));
    }
}

/// One stream's copying.
struct Copy {
    deployment: String,
    pid: u32,
    which: &'static str,
    throttle: Shared,
    buffer: Arc<recent::Recent>,
}

impl Copy {
    fn new(deployment: &str, pid: u32, which: &'static str, throttle: Shared) -> Self {
        Self {
            deployment: deployment.to_owned(),
            pid,
            which,
            throttle,
            buffer: recent(deployment),
        }
    }

    fn throttle(&self) -> std::sync::MutexGuard<'_, Throttle> {
        self.throttle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Says that `n` lines were left out.
    fn suppressed(&self, n: u64) {
        info!(deployment = %self.deployment, pid = self.pid, suppressed = n,
            "{n} lines of output suppressed: more than {LINE_BURST} at once or {LINES_PER_SECOND} a second");
        self.buffer.push_suppressed(self.pid, self.which, n);
    }

    /// Logs one complete line, if the rate allows.
    fn line(&self, line: &[u8], cut: bool) {
        match self.throttle().admit(Instant::now()) {
            Verdict::Drop => return,
            Verdict::Publish => {}
            Verdict::PublishAfterDropped(n) => self.suppressed(n),
        }
        let text = String::from_utf8_lossy(line);
        let text = text.trim_end_matches(['\n', '\r']);
        let (deployment, pid, which) = (&self.deployment, self.pid, self.which);
        if cut {
            info!(deployment = %deployment, pid, stream = which, cut_at = MAX_LOG_LINE, "{text}");
        } else {
            info!(deployment = %deployment, pid, stream = which, "{text}");
        }
        self.buffer.push(pid, which, text, cut);
    }

    /// Copies line by line until the stream ends, cutting lines longer
    /// than [`MAX_LOG_LINE`]; while it waits, a count of suppressed lines
    /// that became due is said.
    async fn run(self, stream: impl AsyncRead + Unpin) {
        let mut reader = BufReader::with_capacity(LOG_READ_BYTES, stream);
        let mut line = Vec::with_capacity(256);
        let mut cut = false;
        loop {
            let due = self.throttle().report_at();
            let filled = match due {
                Some(at) => match tokio::time::timeout_at(at.into(), reader.fill_buf()).await {
                    Ok(filled) => filled,
                    Err(_) => {
                        let n = self.throttle().report_due(Instant::now());
                        if let Some(n) = n {
                            self.suppressed(n);
                        }
                        continue;
                    }
                },
                None => reader.fill_buf().await,
            };
            let available = match filled {
                Ok(b) if !b.is_empty() => b,
                // The end, or a broken pipe: the last line, and what was
                // left out.
                _ => break,
            };
            let (take, done) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (i + 1, true),
                None => (available.len(), false),
            };
            let room = MAX_LOG_LINE.saturating_sub(line.len());
            line.extend_from_slice(&available[..take.min(room)]);
            cut |= take > room;
            reader.consume(take);
            if done {
                self.line(&line, cut);
                line.clear();
                cut = false;
            }
        }
        if !line.is_empty() {
            self.line(&line, cut);
        }
        let n = self.throttle().take_dropped();
        if n > 0 {
            self.suppressed(n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_past_the_burst_is_counted_and_the_count_kept() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        let input: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let throttle = Arc::new(Mutex::new(Throttle::with_rate(Instant::now(), 100, 1)));
        let copy = Copy::new("flood-test", 7, "stdout", throttle);
        rt.block_on(copy.run(input.as_bytes()));
        let kept = recent("flood-test").last(usize::MAX);
        assert_eq!(kept.len(), 101, "the burst, then the note");
        assert_eq!(kept[99].text, "line 99");
        let note = &kept[100];
        assert_eq!((note.suppressed, note.text.as_str()), (4900, ""));
        let json = serde_json::to_value(&kept[0]).expect("json");
        assert!(
            json.get("suppressed").is_none(),
            "only notes carry it: {json}"
        );
    }
}
