//! Where log lines go: stderr, written by a thread of its own, so a
//! reader of stderr that stalls (journald under pressure, a terminal
//! paused with Ctrl-S, a pipe nobody drains) never blocks the task that
//! logged, and with it every deployment and the control socket. Lines
//! wait in a bounded queue; when it is full a line is counted instead,
//! and the count is written as one line of its own once stderr takes
//! lines again. At exit the queue is written out within a bound.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing_subscriber::fmt::MakeWriter;

/// Lines that may wait for stderr (a few hundred KiB at most).
const QUEUE: usize = 4096;

enum Item {
    Line(Vec<u8>),
    /// Answered once everything queued before it is written.
    Flush(mpsc::Sender<()>),
}

/// The writer half: what `tracing` writes each event to.
#[derive(Clone)]
pub struct Sink {
    queue: SyncSender<Item>,
    dropped: Arc<AtomicU64>,
}

static INSTALLED: OnceLock<Sink> = OnceLock::new();

impl Sink {
    /// The sink, starting its writer thread the first time; `None` (write
    /// straight to stderr) if the thread cannot be started.
    pub fn get() -> Option<Sink> {
        if let Some(s) = INSTALLED.get() {
            return Some(s.clone());
        }
        let (queue, lines) = mpsc::sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("wfhost-log".into())
            .spawn(move || write_out(lines, &mut std::io::stderr()))
            .ok()?;
        let dropped = Arc::new(AtomicU64::new(0));
        Some(INSTALLED.get_or_init(|| Sink { queue, dropped }).clone())
    }

    /// Queues one line; the lines left out since the last one queued are
    /// counted on a line of their own before it, where the gap is.
    fn send(&self, line: Vec<u8>) {
        let left_out = self.dropped.swap(0, Ordering::Relaxed);
        let line = if left_out > 0 {
            let mut with_note = format!(
                "wfhost: {left_out} log lines left out here: stderr was not being read fast enough\n"
            )
            .into_bytes();
            with_note.extend_from_slice(&line);
            with_note
        } else {
            line
        };
        match self.queue.try_send(Item::Line(line)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(left_out + 1, Ordering::Relaxed);
            }
            // The writer is gone (it cannot be, short of a panic): write
            // the line ourselves rather than lose it.
            Err(TrySendError::Disconnected(Item::Line(line))) => {
                let _ = std::io::stderr().write_all(&line);
            }
            Err(TrySendError::Disconnected(Item::Flush(_))) => {}
        }
    }
}

/// Writes everything queued before this call, waiting at most `within`
/// (stderr may be the very thing that is stuck). A no-op when no sink
/// was installed.
pub fn flush(within: Duration) {
    let Some(sink) = INSTALLED.get() else {
        return;
    };
    let deadline = Instant::now() + within;
    let (done, wait) = mpsc::channel();
    let mut item = Item::Flush(done);
    loop {
        match sink.queue.try_send(item) {
            Ok(()) => break,
            Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                item = back;
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => return,
        }
    }
    let _ = wait.recv_timeout(deadline.saturating_duration_since(Instant::now()));
}

/// The writer thread: each line in order.
fn write_out(lines: Receiver<Item>, out: &mut impl Write) {
    for item in lines {
        match item {
            Item::Line(line) => {
                let _ = out.write_all(&line);
            }
            Item::Flush(done) => {
                let _ = out.flush();
                let _ = done.send(());
            }
        }
    }
}

/// One event's bytes, sent as one line when `tracing` is done with it.
pub struct Event {
    sink: Sink,
    line: Vec<u8>,
}

impl Write for Event {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        if !self.line.is_empty() {
            self.sink.send(std::mem::take(&mut self.line));
        }
    }
}

impl<'a> MakeWriter<'a> for Sink {
    type Writer = Event;

    fn make_writer(&'a self) -> Self::Writer {
        Event {
            sink: self.clone(),
            line: Vec::with_capacity(160),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_left_out_are_counted_where_they_were_left_out() {
        let (queue, lines) = mpsc::sync_channel(2);
        let sink = Sink {
            queue,
            dropped: Arc::new(AtomicU64::new(0)),
        };
        let log = |text: &str| {
            let mut e = sink.make_writer();
            e.write_all(text.as_bytes()).expect("write");
        };
        log("one\n");
        log("two\n");
        // The queue holds two: these are counted.
        log("three\n");
        log("four\n");
        let mut out = Vec::new();
        let first: Vec<Item> = lines.try_iter().collect();
        assert_eq!(first.len(), 2);
        log("five\n");
        drop(sink);
        let (again, rest) = mpsc::sync_channel(4);
        for item in first.into_iter().chain(lines.try_iter()) {
            again.send(item).expect("requeue");
        }
        drop(again);
        write_out(rest, &mut out);
        assert_eq!(
            String::from_utf8_lossy(&out),
            "one\ntwo\nwfhost: 2 log lines left out here: stderr was not being read fast enough\nfive\n"
        );
    }
}
