//! A connection of the fleet's own on a thread of its own, like the
//! store's (`store_handle.rs`), but holding the PostgreSQL store itself so
//! the fleet's statements (`store::postgres::lease`) can be called: the
//! lease loop has one, so a renewal never queues behind mail writes or a
//! slow status read, and the control socket's fleet requests another.

use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::store::PostgresStore;
use crate::store_handle::StoreGone;

type Job = Box<dyn FnOnce(&mut PostgresStore) + Send>;

/// A cheap handle on one fleet connection's thread.
#[derive(Clone)]
pub struct Db {
    jobs: mpsc::Sender<Job>,
}

impl Db {
    /// Moves `store` onto a new thread named `name`.
    pub fn start(name: &str, mut store: PostgresStore) -> std::io::Result<Self> {
        let (jobs, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(move || {
                for job in rx {
                    job(&mut store);
                }
            })?;
        Ok(Self { jobs })
    }

    /// Runs `f` on the connection's thread and awaits its result.
    pub async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut PostgresStore) -> T + Send + 'static,
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
