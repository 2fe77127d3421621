//! The store runs on its own thread: store calls block (a SQLite commit
//! with `synchronous=FULL`, a lock held by another process, a round trip
//! to PostgreSQL, whose client blocks on a runtime of its own and so must
//! not run on the supervisor's), and the async loop that answers pings and
//! drives drains must never wait on them. Calls are queued in order, so
//! journal records keep the order they were made in.

use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::store::Store;

/// One call queued for the thread that owns an `S`.
type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

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

impl<S: ?Sized + Send + 'static> OnThread<S> {
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
                    for job in rx {
                        job(&mut owned);
                    }
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
        let _ = self.jobs.send(Box::new(f));
    }

    /// Runs `f` on the thread and awaits its result.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> T + Send + 'static,
    ) -> Result<T, StoreGone> {
        let (tx, rx) = oneshot::channel();
        self.jobs
            .send(Box::new(move |s| {
                let _ = tx.send(f(s));
            }))
            .map_err(|_| StoreGone)?;
        rx.await.map_err(|_| StoreGone)
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
