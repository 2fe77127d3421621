//! The store runs on its own thread: store calls block (a SQLite commit
//! with `synchronous=FULL`, a lock held by another process, a round trip
//! to PostgreSQL, whose client blocks on a runtime of its own and so must
//! not run on the supervisor's), and the async loop that answers pings and
//! drives drains must never wait on them. Calls are queued in order, so
//! journal records keep the order they were made in.
//!
//! Group commit: the writes of the mail path ([`OnThread::call_grouped`],
//! [`OnThread::submit_grouped`]) that wait in the queue together run in
//! one transaction and share one durable commit, and none of them is
//! answered before that commit returns. While one commit is in flight the
//! next group gathers, so a slow disk widens groups instead of stalling
//! the writers behind it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::store::{Grouping, Store, StoreError};

/// What a grouped write does once its group's commit is known: `Ok` it
/// landed, `Err` it did not (or may not have).
pub type Settled = Box<dyn FnOnce(Result<(), &StoreError>) + Send>;

/// A write that runs in a group; settled once the group's commit is known.
type GroupJob<S> = Box<dyn FnOnce(&mut S) -> Settled + Send>;

/// One call queued for the thread that owns an `S`.
enum Job<S: ?Sized> {
    /// Runs alone, in a transaction of its own.
    Alone(Box<dyn FnOnce(&mut S) + Send>),
    /// Runs in a group.
    Grouped(GroupJob<S>),
}

/// Most writes in one group: bounds how long the first one waits.
const MAX_GROUP: usize = 256;

/// Group commits and the grouped writes they carried, since start (for
/// metrics: their ratio is how many writes share one commit). Process-wide:
/// only the store's writer groups.
static GROUP_COMMITS: AtomicU64 = AtomicU64::new(0);
static GROUPED_WRITES: AtomicU64 = AtomicU64::new(0);

/// (group commits, grouped writes) since start.
pub fn grouping() -> (u64, u64) {
    (
        GROUP_COMMITS.load(Ordering::Relaxed),
        GROUPED_WRITES.load(Ordering::Relaxed),
    )
}

/// A cheap handle on a thread that owns an `S` and runs the calls queued
/// for it, in order. The store's two connections are [`StoreHandle`]s;
/// a fleet's own PostgreSQL connections are the same on the concrete
/// store (`fleet::db`).
pub struct OnThread<S: ?Sized + 'static> {
    jobs: mpsc::Sender<Job<S>>,
}

impl<S: ?Sized> Clone for OnThread<S> {
    fn clone(&self) -> Self {
        Self {
            jobs: self.jobs.clone(),
        }
    }
}

/// A handle on the store thread.
pub type StoreHandle = OnThread<dyn Store>;

/// The store thread is gone (the supervisor is shutting down).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the store thread has stopped")]
pub struct StoreGone;

impl<S: ?Sized + Grouping + Send + 'static> OnThread<S> {
    /// Moves `owned` onto a new thread named `name`.
    pub fn start(name: &str, owned: Box<S>) -> std::io::Result<Self> {
        Self::start_opening(name, move || Ok(owned), None)
    }

    /// A thread named `name` that first runs `open`, then the jobs queued
    /// meanwhile and later, in order. `opened`, if given, hears how the
    /// open went; after a failure every job is dropped (its caller sees
    /// [`StoreGone`]). For a start-up that spawns children while a new
    /// store is created: nothing reaches the store before it is ready.
    pub fn start_opening(
        name: &str,
        open: impl FnOnce() -> anyhow::Result<Box<S>> + Send + 'static,
        opened: Option<oneshot::Sender<Result<(), String>>>,
    ) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job<S>>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || match open() {
                Ok(mut owned) => {
                    if let Some(opened) = opened {
                        let _ = opened.send(Ok(()));
                    }
                    serve(&mut *owned, &rx);
                }
                Err(e) => {
                    if let Some(opened) = opened {
                        let _ = opened.send(Err(format!("{e:#}")));
                    }
                }
            })?;
        Ok(Self { jobs })
    }

    /// Queues `f` without waiting for it (records that only describe what
    /// already happened).
    pub fn submit(&self, f: impl FnOnce(&mut S) + Send + 'static) {
        let _ = self.jobs.send(Job::Alone(Box::new(f)));
    }

    /// Queues `f` to run in the next group; its [`Settled`] hears whether
    /// the group's commit landed.
    pub fn submit_grouped(&self, f: impl FnOnce(&mut S) -> Settled + Send + 'static) {
        let _ = self.jobs.send(Job::Grouped(Box::new(f)));
    }

    /// Runs `f` in the next group and awaits its result, given only once
    /// the group's commit returned: a commit that failed turns an `Ok`
    /// into the commit's error (it may or may not have landed).
    pub async fn call_grouped<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<Result<T, StoreError>, StoreGone> {
        let (tx, rx) = oneshot::channel();
        self.submit_grouped(move |s| {
            let result = f(s);
            Box::new(move |commit: Result<(), &StoreError>| {
                let result = match (result, commit) {
                    (Ok(_), Err(e)) => Err(e.for_group()),
                    (result, _) => result,
                };
                let _ = tx.send(result);
            })
        });
        rx.await.map_err(|_| StoreGone)
    }

    /// Runs `f` on the thread and awaits its result.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> T + Send + 'static,
    ) -> Result<T, StoreGone> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Job::Alone(Box::new(move |s| {
                let _ = tx.send(f(s));
            })))
            .map_err(|_| StoreGone)?;
        rx.await.map_err(|_| StoreGone)
    }
}

/// Runs the jobs queued for `owned` in order until every handle is gone:
/// each run of grouped jobs waiting together is one group.
fn serve<S: ?Sized + Grouping>(owned: &mut S, rx: &mpsc::Receiver<Job<S>>) {
    let mut next = rx.recv().ok();
    while let Some(job) = next.take() {
        match job {
            Job::Alone(f) => f(owned),
            Job::Grouped(f) => {
                let mut group = vec![f];
                while group.len() < MAX_GROUP {
                    match rx.try_recv() {
                        Ok(Job::Grouped(f)) => group.push(f),
                        // Runs after the group: the order holds.
                        Ok(alone) => {
                            next = Some(alone);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                run_group(owned, group);
            }
        }
        if next.is_none() {
            next = rx.recv().ok();
        }
    }
}

/// Runs `jobs` in one transaction and settles each once its commit is
/// known. When the database drops the transaction mid-way (after an
/// error), the jobs before are settled as failed and the rest go on in a
/// new group; a backend that cannot group runs each in its own.
fn run_group<S: ?Sized + Grouping>(owned: &mut S, jobs: Vec<GroupJob<S>>) {
    let mut open = open_group(owned);
    let mut waiting: Vec<Settled> = Vec::with_capacity(jobs.len());
    for job in jobs {
        let settled = job(owned);
        if !open {
            settled(Ok(()));
            continue;
        }
        waiting.push(settled);
        if let Some(cause) = owned.group_lost() {
            fail(std::mem::take(&mut waiting), &cause);
            open = open_group(owned);
        }
    }
    if open {
        GROUP_COMMITS.fetch_add(1, Ordering::Relaxed);
        GROUPED_WRITES.fetch_add(waiting.len() as u64, Ordering::Relaxed);
        match owned.end_group() {
            Ok(()) => waiting.into_iter().for_each(|settled| settled(Ok(()))),
            Err(e) => fail(waiting, &e),
        }
    }
}

/// Settles writes whose commit failed, the last first: each puts what it
/// keeps back at the head of its queue, so the queue keeps its order.
fn fail(waiting: Vec<Settled>, e: &StoreError) {
    for settled in waiting.into_iter().rev() {
        settled(Err(e));
    }
}

/// Opens a group, or says why each job runs alone.
fn open_group<S: ?Sized + Grouping>(owned: &mut S) -> bool {
    match owned.begin_group() {
        Ok(open) => open,
        Err(e) => {
            tracing::debug!(error = %e, "cannot open a group; each write commits on its own");
            false
        }
    }
}

/// Runs `open` on a thread of its own and waits for it: opening a store
/// blocks, and the PostgreSQL client blocks on a runtime of its own,
/// which cannot run on the supervisor's thread.
pub fn open_off_runtime<T: Send>(
    open: impl FnOnce() -> anyhow::Result<T> + Send,
) -> anyhow::Result<T> {
    use anyhow::Context;
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("wfhost-store-open".into())
            .spawn_scoped(scope, open)
            .context("cannot start a thread to open the store")?
            .join()
            .map_err(|_| anyhow::anyhow!("opening the store panicked"))?
    })
}
