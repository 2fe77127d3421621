//! What every deployment task shares: the store, the signing key and the
//! spawner, and the queues that make journal records and events durable
//! without ever dropping one: a record the store refuses (a lock held by
//! another process, a full disk) stays queued, in order, and is retried on
//! every tick of the control loop until it is written. [`health`] keeps
//! what the store refuses, for status and metrics at the top.

pub mod health;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use ed25519_dalek::SigningKey;
use tokio::sync::watch;
use tracing::{error, info};

use crate::clock::unix_ms;
use crate::journal::NewJournalEntry;
use crate::procfs;
use crate::store::handle::{Settled, StoreHandle};
use crate::store::unwritten::{AckRecord, Record, Unwritten};
use crate::store::{ChildRecord, NewEvent, Store, StoreError};
use wfhost_policy::Fact;
use wfhost_process::Spawner;

/// State shared by the supervisor's tasks.
pub struct Shared {
    /// The durable store, on its own thread: every write goes here.
    pub store: StoreHandle,
    /// A second connection on its own thread for reads that must answer
    /// while a write waits on a lock (status, events, metrics; WAL lets
    /// readers run beside a writer).
    pub reader: StoreHandle,
    /// The key that signs journal records and cancels.
    pub key: Arc<SigningKey>,
    /// The one thread that forks children.
    pub spawner: Spawner,
    /// Ticks whenever events were committed: followers (`wfhost events
    /// --follow`) then read the durable log from their cursor, so what they
    /// print is exactly what the log holds, with no gap and no duplicate.
    pub events: watch::Sender<()>,
    /// How many events the store keeps (a reload may change it).
    pub event_retention: AtomicU64,
    /// Journal records and events not yet written.
    pub backlog: Arc<Backlog>,
    /// Signalled when a deployment first gets a ready child or fails, so
    /// systemd hears `READY=1` without waiting for the next tick.
    pub started: tokio::sync::Notify,
    /// The fleet this host is one of (`[fleet]`), if any.
    pub fleet: Option<Arc<crate::fleet::Fleet>>,
    /// Mail offered by senders, each in the next group commit.
    pub sends: Arc<crate::store::offers::Offers>,
    /// The console's logins (`console token` mints them), and its address.
    pub door: crate::login::Door,
}

/// Records waiting for the store, oldest first.
#[derive(Debug, Default)]
pub struct Backlog {
    journal: Mutex<VecDeque<NewJournalEntry>>,
    events: Mutex<Vec<NewEvent>>,
    /// Mail acknowledgements stopped deployments still owed the store.
    acks: Mutex<Vec<AckRecord>>,
    /// What the store refuses: logged once per streak, and once on
    /// recovery; shown in status and metrics.
    pub health: health::StoreHealth,
}

/// What [`health`] calls journal writes.
const JOURNAL: &str = "journal records";

/// What [`health`] calls event writes.
const EVENTS: &str = "events";

/// Events between two prunings of the event table.
const PRUNE_EVERY: u64 = 1024;

fn entry(deployment: Option<&str>, fact: &Fact) -> NewJournalEntry {
    NewJournalEntry {
        at_ms: unix_ms(),
        kind: fact.kind().to_owned(),
        deployment: deployment.map(str::to_owned),
        body: fact.body(),
    }
}

impl Backlog {
    /// Notes a failed write of `what`, loudly the first time.
    fn failed(&self, what: &str, e: &StoreError) {
        if self.health.refused(what, &e.to_string()) {
            error!(error = %e, "cannot write {what} to the store; they stay queued and are retried every second");
        }
    }

    /// Notes a write of `what` that went through, said after failures.
    fn recovered(&self, what: &str) {
        if self.health.accepted(what) {
            info!("the store accepts writes again; queued {what} are written");
        }
    }

    /// Journal records and events waiting for the store.
    fn waiting(&self) -> (usize, usize) {
        let journal = self.journal.lock().unwrap_or_else(|p| p.into_inner()).len();
        let events = self.events.lock().unwrap_or_else(|p| p.into_inner()).len();
        (journal, events)
    }

    /// Writes queued journal records in order; stops at the first refusal
    /// and leaves it (and everything after it) queued.
    fn flush_journal(&self, s: &mut dyn Store, key: &SigningKey) -> Result<(), StoreError> {
        loop {
            let Some(next) = self
                .journal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .front()
                .cloned()
            else {
                return Ok(());
            };
            match s.append_journal(key, next) {
                Ok(_) => {}
                // A fleet host that lost the deployment's lease writes
                // nothing more for it; the record is not retried.
                Err(e) if e.is_fenced() => {
                    tracing::debug!(error = %e, "journal record of a lease no longer held dropped")
                }
                Err(e) => return Err(e),
            }
            self.journal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop_front();
        }
    }

    /// Writes queued events in the next group commit and, once it landed,
    /// tells followers; a refused batch goes back to the head of the queue.
    fn flush_events(
        self: Arc<Self>,
        s: &mut dyn Store,
        feed: watch::Sender<()>,
        retention: u64,
    ) -> Settled {
        let batch = std::mem::take(&mut *self.events.lock().unwrap_or_else(|p| p.into_inner()));
        if batch.is_empty() {
            return Box::new(|_| {});
        }
        match s.append_events(&batch) {
            Ok(seqs) => {
                // Pruning is cheap but not free: once per PRUNE_EVERY events.
                if seqs.iter().any(|seq| seq % PRUNE_EVERY == 0)
                    && let Err(e) = s.prune_events(retention)
                {
                    error!(error = %e, "cannot prune the event log");
                }
                Box::new(move |commit| match commit {
                    Ok(()) => {
                        self.recovered(EVENTS);
                        feed.send_replace(());
                    }
                    Err(e) => self.requeue_events(batch, e),
                })
            }
            Err(e) => {
                self.requeue_events(batch, &e);
                Box::new(|_| {})
            }
        }
    }

    /// Puts a refused batch of events back at the head of the queue.
    fn requeue_events(&self, batch: Vec<NewEvent>, e: &StoreError) {
        self.failed(EVENTS, e);
        let mut queue = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let newer = std::mem::replace(&mut *queue, batch);
        queue.extend(newer);
    }
}

impl Shared {
    /// Records a fact that already happened: a signed journal record when
    /// it is a decision ([`Fact::journaled`]), and an event either way.
    /// Journal records are written in order; one the store refuses stays
    /// queued and is retried, never dropped.
    pub fn record(&self, deployment: Option<&str>, fact: &Fact) {
        if fact.journaled() {
            self.backlog
                .journal
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_back(entry(deployment, fact));
            self.flush_journal();
        }
        self.publish(deployment, fact);
    }

    /// Queues a write of every journal record waiting, in order.
    fn flush_journal(&self) {
        let (backlog, key) = (self.backlog.clone(), self.key.clone());
        self.store
            .submit(move |s| match backlog.flush_journal(s, &key) {
                Ok(()) => backlog.recovered(JOURNAL),
                Err(e) => backlog.failed(JOURNAL, &e),
            });
    }

    /// Journals a fact and waits until it is durable: for records that
    /// gate what happens next (a cancel is sent only once committed).
    /// Every queued record is written first, so the journal keeps the
    /// order things happened in. Returns the record's sequence number, or
    /// why the store refused (the caller retries). Nothing is published:
    /// the caller publishes once it knows the sequence number.
    pub async fn record_durably(&self, deployment: &str, fact: &Fact) -> Result<u64, String> {
        let entry = entry(Some(deployment), fact);
        let (backlog, key) = (self.backlog.clone(), self.key.clone());
        self.store
            .call(move |s| {
                let written = backlog
                    .flush_journal(s, &key)
                    .and_then(|()| s.append_journal(&key, entry));
                match written {
                    Ok(record) => {
                        backlog.recovered(JOURNAL);
                        Ok(record.seq)
                    }
                    Err(e) => {
                        backlog.failed(JOURNAL, &e);
                        Err(e.to_string())
                    }
                }
            })
            .await
            .map_err(|e| e.to_string())?
    }

    /// Appends a fact to the durable event log only, then hands it to live
    /// followers. Events are queued and written in batches, one commit per
    /// batch (group commit), so a burst of step events costs one fsync, not
    /// one each; the log is kept within `event_retention`.
    pub fn publish(&self, deployment: Option<&str>, fact: &Fact) {
        let event = NewEvent {
            at_ms: unix_ms(),
            deployment: deployment.map(str::to_owned),
            kind: fact.kind().to_owned(),
            body: fact.body(),
        };
        let first = {
            let mut queue = self
                .backlog
                .events
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            queue.push(event);
            queue.len() == 1
        };
        if first {
            self.flush_events();
        }
        // Otherwise a flush is already queued and takes this one too.
    }

    /// Tells followers that events were committed by a write that carried
    /// its own (mail acceptance and completion).
    pub fn events_written(&self) {
        self.events.send_replace(());
    }

    /// Keeps `n` events from the next pruning on (a reload).
    pub fn set_event_retention(&self, n: u64) {
        self.event_retention.store(n, Ordering::Relaxed);
    }

    fn flush_events(&self) {
        let (backlog, feed, retention) = (
            self.backlog.clone(),
            self.events.clone(),
            self.event_retention.load(Ordering::Relaxed),
        );
        self.store
            .submit_grouped(move |s| backlog.flush_events(s, feed, retention));
    }

    /// Retries whatever the store refused earlier (called every tick of the
    /// control loop).
    pub fn retry_backlog(&self) {
        let journal_waits = !self
            .backlog
            .journal
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty();
        if journal_waits {
            self.flush_journal();
        }
        if !self
            .backlog
            .events
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
        {
            self.flush_events();
        }
    }

    /// Whether the store takes writes, and what waits for it; `acks` are
    /// the running deployments' acknowledgements owed (each keeps its own).
    pub fn store_view(&self, acks: usize) -> health::StoreView {
        let (journal_records, events) = self.backlog.waiting();
        let stopped = self
            .backlog
            .acks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len();
        health::StoreView::new(
            self.backlog.health.refusals(),
            health::Waiting {
                acks: acks.saturating_add(stopped),
                journal_records,
                events,
            },
        )
    }

    /// Keeps the acknowledgements a stopped deployment still owed the
    /// store, for [`Self::take_unwritten`].
    pub fn unwritten_acks(&self, acks: impl IntoIterator<Item = AckRecord>) {
        let mut kept = self.backlog.acks.lock().unwrap_or_else(|p| p.into_inner());
        kept.extend(acks);
    }

    /// Everything the store has not taken, emptied out (the supervisor is
    /// about to exit).
    pub fn take_unwritten(&self) -> Unwritten {
        fn take<T: Default>(m: &Mutex<T>) -> T {
            std::mem::take(&mut *m.lock().unwrap_or_else(|p| p.into_inner()))
        }
        let journal = take(&self.backlog.journal);
        let events = take(&self.backlog.events);
        Unwritten {
            journal: journal.iter().map(Record::from).collect(),
            events: events.iter().map(Record::from).collect(),
            acks: take(&self.backlog.acks),
        }
    }

    /// Records a live child so a supervisor restarted after a crash can
    /// find and kill it.
    pub fn remember_child(&self, deployment: &str, pid: u32, channel_id: &str) {
        let start_time = match procfs::start_time(pid) {
            Ok(t) => t,
            Err(e) => {
                error!(deployment, pid, error = %e, "cannot read the child's start time; it will not be tracked");
                return;
            }
        };
        let record = ChildRecord {
            deployment: deployment.to_owned(),
            pid,
            start_time,
            channel_id: channel_id.to_owned(),
            spawned_at_ms: unix_ms(),
        };
        self.store.submit(move |s| {
            if let Err(e) = s.record_child(&record) {
                error!(deployment = %record.deployment, pid, error = %e, "cannot record the child in the store");
            }
        });
    }

    /// Forgets a child that has been reaped.
    pub fn forget_child(&self, deployment: &str, pid: u32) {
        let deployment = deployment.to_owned();
        self.store.submit(move |s| {
            if let Err(e) = s.forget_child(&deployment, pid) {
                error!(deployment, pid, error = %e, "cannot remove the child from the store");
            }
        });
    }
}
