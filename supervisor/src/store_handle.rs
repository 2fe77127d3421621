//! The store runs on its own thread: store calls block (a SQLite commit
//! with `synchronous=FULL`, a lock held by another process, a round trip
//! to PostgreSQL, whose client blocks on a runtime of its own and so must
//! not run on the supervisor's), and the async loop that answers pings and
//! drives drains must never wait on them. Calls are queued in order, so
//! journal records keep the order they were made in.

use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::store::Store;

type Job = Box<dyn FnOnce(&mut dyn Store) + Send>;

/// A cheap handle on the store thread.
#[derive(Clone)]
pub struct StoreHandle {
    jobs: mpsc::Sender<Job>,
}

/// The store thread is gone (the supervisor is shutting down).
#[derive(Debug, Clone, thiserror::Error)]
#[error("the store thread has stopped")]
pub struct StoreGone;

impl StoreHandle {
    /// Moves `store` onto a new thread named `name`.
    pub fn start(name: &str, mut store: Box<dyn Store>) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                for job in rx {
                    job(store.as_mut());
                }
            })?;
        Ok(Self { jobs })
    }

    /// A store thread named `name` that first runs `open`, then the jobs
    /// queued meanwhile and later, in order. `opened` hears how the open
    /// went; after a failure every job is dropped (its caller sees
    /// [`StoreGone`]). For a start-up that spawns children while a new
    /// store is created: nothing reaches the store before it is ready.
    pub fn start_opening(
        name: &str,
        open: impl FnOnce() -> anyhow::Result<Box<dyn Store>> + Send + 'static,
        opened: oneshot::Sender<Result<(), String>>,
    ) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || match open() {
                Ok(mut store) => {
                    let _ = opened.send(Ok(()));
                    for job in rx {
                        job(store.as_mut());
                    }
                }
                Err(e) => {
                    let _ = opened.send(Err(format!("{e:#}")));
                }
            })?;
        Ok(Self { jobs })
    }

    /// Queues `f` without waiting for it (records that only describe what
    /// already happened).
    pub fn submit(&self, f: impl FnOnce(&mut dyn Store) + Send + 'static) {
        let _ = self.jobs.send(Box::new(f));
    }

    /// Runs `f` on the store thread and awaits its result.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut dyn Store) -> T + Send + 'static,
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
