//! Where the supervisor keeps its state: the state dir, the store (and
//! its signing key) opened as the config says, and the records a stop
//! could not write, kept outside the store and written by the next start.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::oneshot;
use tracing::{error, info};

use crate::config::{Config, SupervisorSettings};
use crate::shared::Shared;
use crate::signing_key;
use crate::store::handle::StoreHandle;
use crate::store::unwritten;
use crate::store::{Backend, Store, guard};

/// The store's two threads, the signing key, and (for a new store) its
/// opening under way, or (in a fleet) the host's lease loop to join.
pub(super) struct Stores {
    pub store: StoreHandle,
    pub reader: StoreHandle,
    pub key: ed25519_dalek::SigningKey,
    pub opening: Option<Opening>,
    pub fleet: Option<crate::fleet::open::Started>,
}

/// Opens the store as the config says: a fleet's PostgreSQL with the
/// host joined, a new SQLite store beside the first spawns, or an
/// existing one before them.
pub(super) fn open(config: &Config, backend: &Backend, fresh: bool) -> anyhow::Result<Stores> {
    let settings = &config.supervisor;
    let ((store, reader), key, opening, fleet) = match (&config.fleet, backend) {
        (Some(f), Backend::Postgres(url)) => {
            let (store, reader, key, started) =
                crate::fleet::open::start(url, f, settings, &config.deployments)?;
            (store_threads(store, reader)?, key, None, Some(started))
        }
        _ if fresh => {
            let (store, reader, key, opening) = open_behind(backend, settings)?;
            ((store, reader), key, opening, None)
        }
        _ => {
            let (store, reader, key) = open_store(backend, settings)?;
            (store_threads(store, reader)?, key, None, None)
        }
    };
    Ok(Stores {
        store,
        reader,
        key,
        opening,
        fleet,
    })
}

/// The state dir, created owner-only if it is not there: the control
/// socket that locks it lives in it.
pub(super) fn create_state_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| {
            format!(
                "cannot create the state directory {}; create it, or make its parent writable by this user",
                dir.display()
            )
        })
}

/// The store's writer and reader, each on a thread of its own.
fn store_threads(
    store: Box<dyn crate::store::Store>,
    reader: Box<dyn crate::store::Store>,
) -> anyhow::Result<(StoreHandle, StoreHandle)> {
    let store =
        StoreHandle::start("wfhost-store", store).context("cannot start the store thread")?;
    let reader = StoreHandle::start("wfhost-store-read", reader)
        .context("cannot start the store reader thread")?;
    Ok((store, reader))
}

/// Whether this start creates its store: SQLite with no database file yet
/// and no records a previous supervisor kept outside it. Then nothing
/// the store could hold has to be read before the first spawn.
pub(super) fn fresh_state(backend: &Backend, state_dir: &Path) -> bool {
    match backend {
        Backend::Sqlite(_) => {
            !Path::new(&backend.describe()).exists() && unwritten::found(state_dir).is_empty()
        }
        Backend::Postgres(_) => false,
    }
}

/// Both store threads opening, for [`open_behind`].
pub(super) struct Opening {
    store: oneshot::Receiver<Result<(), String>>,
    reader: oneshot::Receiver<Result<(), String>>,
}

impl Opening {
    /// Both opened, or why not.
    pub(super) async fn wait(self) -> Result<(), String> {
        let gone = |_| "the store thread stopped while opening".to_owned();
        self.store.await.map_err(gone)??;
        self.reader.await.map_err(gone)?
    }
}

/// A new store opened on its own threads while the children start: the
/// key is found or generated here (children get its public half at
/// spawn); the store thread creates the schema, writes a new key and
/// checks the (empty) journal before it runs anything queued, so no
/// record is stored, and no cancel sent, before the key that signs it is
/// on disk; the reader opens once the database exists.
fn open_behind(
    backend: &Backend,
    settings: &SupervisorSettings,
) -> anyhow::Result<(
    StoreHandle,
    StoreHandle,
    ed25519_dalek::SigningKey,
    Option<Opening>,
)> {
    let found = signing_key::find_or_generate(settings)?;
    let key = found.key().clone();
    let verifying = key.verifying_key();
    let (created, wait_created) = std::sync::mpsc::channel::<()>();
    let (store_tx, store_rx) = oneshot::channel();
    let b = backend.clone();
    let store = StoreHandle::start_opening(
        "wfhost-store",
        move || {
            let at = b.describe();
            let mut store = b
                .open()
                .with_context(|| format!("cannot open the store {at}"))?;
            found.persist()?;
            info!(key = %found.path().display(), key_id = %wfhost_ipc::KeyId::of(&verifying), "signing key loaded");
            guard::check_at_start(&mut *store, &verifying)
                .with_context(|| format!("refusing to start on the store {at}"))?;
            let _ = created.send(());
            Ok(store)
        },
        Some(store_tx),
    )
    .context("cannot start the store thread")?;
    let (reader_tx, reader_rx) = oneshot::channel();
    let b = backend.clone();
    let reader = StoreHandle::start_opening(
        "wfhost-store-read",
        move || {
            wait_created
                .recv()
                .map_err(|_| anyhow::anyhow!("the store was not created"))?;
            let at = b.describe();
            b.open_existing()
                .with_context(|| format!("cannot open a read connection to the store {at}"))
        },
        Some(reader_tx),
    )
    .context("cannot start the store reader thread")?;
    let opening = Opening {
        store: store_rx,
        reader: reader_rx,
    };
    Ok((store, reader, key, Some(opening)))
}

/// What the store never took is kept outside it for the next start, and
/// the exit says so: a stop that lost records in silence would leave a
/// gap `journal verify` cannot see.
pub(super) fn keep_unwritten(shared: &Shared, state_dir: &Path) -> anyhow::Result<()> {
    let left = shared.take_unwritten();
    if left.is_empty() {
        return Ok(());
    }
    let what = left.describe();
    match unwritten::keep(state_dir, &left, crate::clock::unix_ms()) {
        Ok(file) => {
            error!(file = %file.display(), "the store did not take {what}; they are kept in this file and written by the next start");
            anyhow::bail!(
                "the store did not take {what}: kept in {}, written by the next start",
                file.display()
            )
        }
        Err(e) => {
            error!(error = %e, "the store did not take {what}, and no file could keep them; here they are in full");
            for r in left.journal.iter().chain(&left.events) {
                error!(at_ms = r.at_ms, kind = %r.kind, deployment = r.deployment.as_deref().unwrap_or("-"), body = %r.body, "unwritten record");
            }
            for a in &left.acks {
                error!(deployment = %a.deployment, mail = a.id, outcome = %a.outcome, "unwritten mail acknowledgement");
            }
            anyhow::bail!("the store did not take {what}, and they could not be kept: see the log")
        }
    }
}

/// What a previous supervisor left: its children killed, the records it
/// kept outside the store written, and the mail it had in processing
/// returned to the inbox, in that order, before anything is spawned.
pub(super) async fn recover(
    shared: &Arc<Shared>,
    state_dir: &Path,
    hold: Vec<String>,
) -> anyhow::Result<()> {
    crate::host::kill_orphans(shared)
        .await
        .context("cannot read the children table")?;
    recover_unwritten(shared, state_dir).await;
    let at = crate::clock::unix_ms();
    let replayed = shared
        .store
        .call(move |s| s.replay_all_mail_holding(at, &hold))
        .await??;
    if replayed > 0 {
        info!(
            items = replayed,
            "mail left in processing by a previous supervisor returned to the inbox"
        );
    }
    Ok(())
}

/// Writes what a previous supervisor of this state dir could not (its
/// kept files), before mail in processing is replayed, and says so.
async fn recover_unwritten(shared: &Arc<Shared>, state_dir: &Path) {
    for file in unwritten::found(state_dir) {
        let key = shared.key.clone();
        let path = file.clone();
        let recovered = shared
            .store
            .call(move |s| unwritten::recover(s, &key, &path))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r);
        match recovered {
            Ok(left) => {
                info!(file = %file.display(), "recovered {} the previous supervisor could not write", left.describe())
            }
            Err(e) => error!(file = %file.display(), error = %e,
                "cannot write what the previous supervisor kept; the file stays for the next start"),
        }
    }
}

/// The store, its read connection and the signing key.
type Opened = (Box<dyn Store>, Box<dyn Store>, ed25519_dalek::SigningKey);

/// The store, a second connection for reads, and the signing key, once
/// the journal verified (nothing is appended to one that does not). Done
/// on a thread of its own: the PostgreSQL client blocks on a runtime of
/// its own, which cannot run on this runtime's thread.
fn open_store(backend: &Backend, settings: &SupervisorSettings) -> anyhow::Result<Opened> {
    let open = || -> anyhow::Result<_> {
        let at = backend.describe();
        let mut store = backend
            .open()
            .with_context(|| format!("cannot open the store {at}"))?;
        let (key, key_path) = signing_key::load_or_create(settings)?;
        info!(key = %key_path.display(), key_id = %wfhost_ipc::KeyId::of(&key.verifying_key()), "signing key loaded");
        guard::check_at_start(&mut *store, &key.verifying_key())
            .with_context(|| format!("refusing to start on the store {at}"))?;
        let reader = backend
            .open_existing()
            .with_context(|| format!("cannot open a read connection to the store {at}"))?;
        Ok((store, reader, key))
    };
    crate::store::handle::open_off_runtime(open)
}
