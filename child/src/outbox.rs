//! The one path by which events reach the supervisor: a queue drained by a
//! single writer task, so frames from the reader task (Pong) and from the
//! application never interleave, and a failed send is reported, not lost.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, oneshot};
use wfhost_ipc::{Event, FrameWriter};

use crate::error::RuntimeError;

type Reply = oneshot::Sender<Result<(), RuntimeError>>;

enum Outgoing {
    /// Send an event; tell `reply` when it is written (or why not).
    Event(Event, Option<Reply>),
    /// Tell `reply` once everything queued before it is written.
    Flush(Reply),
    /// Flush, then close the sending direction.
    Close(Reply),
}

/// A cloneable handle that queues events for the writer task.
#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    tx: mpsc::UnboundedSender<Outgoing>,
    failure: Arc<Mutex<Option<String>>>,
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Event(e, _) => write!(f, "Event({})", e.name()),
            Self::Flush(_) => f.write_str("Flush"),
            Self::Close(_) => f.write_str("Close"),
        }
    }
}

impl Outbox {
    /// Starts the writer task over `writer`; `max_frame_bytes` is the
    /// supervisor's limit, checked before sending so an oversized event is
    /// refused here instead of ending the wiring there.
    pub(crate) fn spawn(writer: FrameWriter<Event>, max_frame_bytes: u32) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let failure = Arc::new(Mutex::new(None));
        tokio::spawn(write_loop(writer, rx, max_frame_bytes, failure.clone()));
        Self { tx, failure }
    }

    /// Queues `event` without waiting (for the reader task and for sends
    /// made under a lock, which must keep their order).
    pub(crate) fn post(&self, event: Event) {
        let _ = self.tx.send(Outgoing::Event(event, None));
    }

    /// Queues `event` and returns a receiver that reports when it is written.
    pub(crate) fn post_tracked(&self, event: Event) -> Pending {
        let (reply, rx) = oneshot::channel();
        let queued = self.tx.send(Outgoing::Event(event, Some(reply))).is_ok();
        Pending {
            rx: queued.then_some(rx),
            outbox: self.clone(),
        }
    }

    /// Sends `event` and waits until it is written.
    pub(crate) async fn send(&self, event: Event) -> Result<(), RuntimeError> {
        self.post_tracked(event).wait().await
    }

    /// Waits until everything queued so far is written.
    pub(crate) async fn flush(&self) -> Result<(), RuntimeError> {
        let (reply, rx) = oneshot::channel();
        self.request(Outgoing::Flush(reply), rx).await
    }

    /// Flushes, then closes the sending direction so the supervisor reads
    /// end of stream.
    pub(crate) async fn close(&self) -> Result<(), RuntimeError> {
        let (reply, rx) = oneshot::channel();
        self.request(Outgoing::Close(reply), rx).await
    }

    async fn request(
        &self,
        msg: Outgoing,
        rx: oneshot::Receiver<Result<(), RuntimeError>>,
    ) -> Result<(), RuntimeError> {
        if self.tx.send(msg).is_err() {
            return Err(self.closed_error());
        }
        rx.await.unwrap_or_else(|_| Err(self.closed_error()))
    }

    fn closed_error(&self) -> RuntimeError {
        let reason = self
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .unwrap_or_else(|| "the writer stopped".to_owned());
        RuntimeError::Closed(reason)
    }
}

/// An event queued with [`Outbox::post_tracked`], not yet known written.
#[derive(Debug)]
pub(crate) struct Pending {
    rx: Option<oneshot::Receiver<Result<(), RuntimeError>>>,
    outbox: Outbox,
}

impl Pending {
    /// Waits until the event is written, or says why it was not.
    pub(crate) async fn wait(self) -> Result<(), RuntimeError> {
        match self.rx {
            Some(rx) => rx.await.unwrap_or_else(|_| Err(self.outbox.closed_error())),
            None => Err(self.outbox.closed_error()),
        }
    }
}

/// Most bytes queued before a flush: a burst is written in writes of about
/// this size rather than one write per frame.
const BATCH_BYTES: usize = 64 * 1024;

/// Drains the queue: every message already waiting is encoded, then the
/// lot is written at once, then each waiter is told. One write per burst
/// instead of one per frame is what lets small events flow at a million a
/// second.
async fn write_loop(
    mut writer: FrameWriter<Event>,
    mut rx: mpsc::UnboundedReceiver<Outgoing>,
    max_frame_bytes: u32,
    failure: Arc<Mutex<Option<String>>>,
) {
    writer.set_max_frame_bytes(max_frame_bytes);
    let mut failed: Option<String> = None;
    let mut closed = false;
    // Waiters whose events are queued but not yet written.
    let mut waiting: Vec<Reply> = Vec::new();
    while let Some(first) = rx.recv().await {
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Outgoing::Event(event, reply) => {
                    let result = match &failed {
                        Some(reason) => Err(RuntimeError::Closed(reason.clone())),
                        None if closed => Err(RuntimeError::Closed(
                            "this child closed the control channel".to_owned(),
                        )),
                        None => {
                            let name = event.name();
                            writer.queue(event).map_err(|e| RuntimeError::TooLarge {
                                event: name,
                                reason: e.to_string(),
                            })
                        }
                    };
                    match (result, reply) {
                        (Ok(()), Some(reply)) => waiting.push(reply),
                        (Ok(()), None) => {}
                        (Err(e), Some(reply)) => {
                            let _ = reply.send(Err(e));
                        }
                        (Err(_), None) => {}
                    }
                }
                Outgoing::Flush(reply) => {
                    flush(&mut writer, &mut waiting, &mut failed, &failure).await;
                    let _ = reply.send(
                        failed
                            .clone()
                            .map_or(Ok(()), |r| Err(RuntimeError::Closed(r))),
                    );
                }
                Outgoing::Close(reply) => {
                    flush(&mut writer, &mut waiting, &mut failed, &failure).await;
                    if failed.is_none() && !closed {
                        closed = true;
                        if let Err(e) = writer.close().await {
                            fail(
                                &mut failed,
                                &failure,
                                format!("closing the control channel failed: {e}"),
                            );
                        }
                    }
                    let _ = reply.send(
                        failed
                            .clone()
                            .map_or(Ok(()), |r| Err(RuntimeError::Closed(r))),
                    );
                }
            }
            if writer.queued_bytes() < BATCH_BYTES {
                next = rx.try_recv().ok();
            }
        }
        flush(&mut writer, &mut waiting, &mut failed, &failure).await;
    }
}

/// Writes what is queued and tells the waiters how it went.
async fn flush(
    writer: &mut FrameWriter<Event>,
    waiting: &mut Vec<Reply>,
    failed: &mut Option<String>,
    failure: &Mutex<Option<String>>,
) {
    if failed.is_none()
        && let Err(e) = writer.flush().await
    {
        fail(
            failed,
            failure,
            format!("writing to the supervisor failed: {e}"),
        );
    }
    for reply in waiting.drain(..) {
        let _ = reply.send(
            failed
                .clone()
                .map_or(Ok(()), |r| Err(RuntimeError::Closed(r))),
        );
    }
}

/// Records the first failure for every later send to report.
fn fail(failed: &mut Option<String>, failure: &Mutex<Option<String>>, reason: String) {
    *failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
    *failed = Some(reason);
}
