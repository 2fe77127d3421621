//! `wfhost supervise`: run the supervisor in the foreground until a signal
//! stops it. Signals (DESIGN §8): SIGTERM/SIGINT stop gracefully (drains
//! under budget), SIGHUP reloads the config, SIGUSR1 recycles everything,
//! SIGUSR2 dumps status to the log, SIGQUIT kills every child and exits.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{error, info, warn};

use crate::config::SupervisorSettings;
use crate::config::{self, Config};
use crate::control::host::{HostAsk, Stopping};
use crate::control::server;
use crate::deployment::spawn::Spawner;
use crate::exit;
use crate::host::{self, Supervisor};
use crate::logging::{self, LogFormat};
use crate::observe::notify::Notifier;
use crate::shared::Shared;
use crate::signing_key;
use crate::store::{Backend, Store, guard};
use crate::store_handle::StoreHandle;
use crate::unwritten;

mod reload;

/// Arguments of `wfhost supervise`.
#[derive(Debug, clap::Args)]
#[command(after_help = config::FINDING)]
pub struct Args {
    /// The config file (TOML).
    #[arg(long, short, value_name = "PATH")]
    config: Option<PathBuf>,
    /// Log line format on stderr [default: the config's log_format, else text].
    #[arg(long, value_enum)]
    log_format: Option<LogFormat>,
}

/// How often the control loop wakes when nothing else happens: it then
/// feeds the systemd watchdog (if its interval is shorter it wakes at that).
const TICK: Duration = Duration::from_secs(1);

/// How long after every deployment is up the start-up's leftovers are
/// given back ([`trim_resident`]): time for the first pings and mail.
const TRIM_AFTER_START: Duration = Duration::from_secs(3);

/// Gives back what start-up left resident and idling does not use (free
/// heap, code run once): DESIGN §10, idle RSS.
fn trim_resident() {
    match wfhost_process::trim() {
        Ok(t) => tracing::debug!(
            before_kib = t.before_kib,
            after_kib = t.after_kib,
            "gave back start-up memory"
        ),
        Err(e) => {
            warn!(error = %e, "cannot give back start-up memory; the supervisor only stays larger")
        }
    }
}

/// Runs the supervisor; returns the process exit code.
pub fn run(args: Args) -> u8 {
    // Before any thread exists (DESIGN §10: idle RSS).
    wfhost_process::one_arena();
    let loaded = config::find(args.config.as_deref())
        .and_then(|path| config::load(&path).map(|c| (c, path)));
    let (config, path) = match loaded {
        Ok(loaded) => loaded,
        Err(e) => {
            logging::init(args.log_format.unwrap_or_default());
            eprintln!("{e}");
            return exit::USAGE;
        }
    };
    logging::init(args.log_format.unwrap_or(config.log_format));
    match wfhost_process::raise_nofile_limit() {
        Ok(n) => info!(nofile = n, "raised the open-file limit"),
        Err(e) => {
            error!(error = %e, "cannot raise the open-file limit; many children may exhaust fds")
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            error!(error = %e, "cannot start the async runtime");
            return exit::FAILED;
        }
    };
    match runtime.block_on(supervise(config, &path)) {
        Ok(()) => exit::OK,
        Err(e) => {
            error!("{e:#}");
            eprintln!("wfhost supervise: {e:#}");
            exit::FAILED
        }
    }
}

/// Every signal the supervisor answers.
struct Signals {
    term: Signal,
    int: Signal,
    quit: Signal,
    hup: Signal,
    usr1: Signal,
    usr2: Signal,
}

impl Signals {
    fn watch() -> anyhow::Result<Self> {
        let watch = |kind: SignalKind, name: &str| {
            signal(kind).with_context(|| format!("cannot watch {name}"))
        };
        Ok(Self {
            term: watch(SignalKind::terminate(), "SIGTERM")?,
            int: watch(SignalKind::interrupt(), "SIGINT")?,
            quit: watch(SignalKind::quit(), "SIGQUIT")?,
            hup: watch(SignalKind::hangup(), "SIGHUP")?,
            usr1: watch(SignalKind::user_defined1(), "SIGUSR1")?,
            usr2: watch(SignalKind::user_defined2(), "SIGUSR2")?,
        })
    }
}

/// Sends one notification to systemd, logging (not failing) on error.
fn notify(
    notifier: Option<&Notifier>,
    what: &str,
    f: impl FnOnce(&Notifier) -> std::io::Result<()>,
) {
    if let Some(n) = notifier
        && let Err(e) = f(n)
    {
        warn!(error = %e, what, "cannot notify systemd");
    }
}

async fn supervise(config: Config, config_path: &Path) -> anyhow::Result<()> {
    let notifier = Notifier::from_env();
    let settings = &config.supervisor;
    let backend = Backend::of(&settings.state_dir, config.store_url.as_deref());
    // The control socket first: a second supervisor on this state dir must
    // stop here, before it opens the store or touches the first one's
    // children.
    create_state_dir(&settings.state_dir)?;
    let control = server::Server::bind(settings)?;
    let spawner = Spawner::start(tokio::runtime::Handle::current())
        .context("cannot start the spawner thread")?;
    let fresh = fresh_state(&backend, &settings.state_dir);
    let (store, reader, key, opening, fleet) = match (&config.fleet, &backend) {
        (Some(f), Backend::Postgres(url)) => {
            let (store, reader, key, started) =
                crate::fleet::open::start(url, f, settings, &config.deployments)?;
            let (store, reader) = store_threads(store, reader)?;
            (store, reader, key, None, Some(started))
        }
        _ if fresh => {
            let (store, reader, key, opening) = open_behind(&backend, settings)?;
            (store, reader, key, opening, None)
        }
        _ => {
            let (store, reader, key) = open_store(&backend, settings)?;
            let (store, reader) = store_threads(store, reader)?;
            (store, reader, key, None, None)
        }
    };
    let (events, _) = watch::channel(());
    let shared = Arc::new(Shared {
        store,
        reader,
        key: Arc::new(key),
        spawner,
        events,
        event_retention: settings.event_retention.into(),
        backlog: Default::default(),
        watchlist: Default::default(),
        started: tokio::sync::Notify::new(),
        fleet: fleet.as_ref().map(|f| f.fleet.clone()),
        sends: Default::default(),
    });
    let mut sup = Supervisor::new(&shared);
    if let Some(f) = fleet {
        sup.join_fleet(f.leases, f.commands, f.refusals, f.heard);
    }
    let (host_asks, mut asks) = mpsc::channel(8);
    let metrics = match settings.metrics_listen {
        Some(addr) => Some(crate::observe::metrics::bind(addr).await?),
        None => None,
    };
    // A store that did not exist holds no children to clean up after, no
    // kept records and no mail: nothing of it precedes the first spawn.
    if !fresh {
        host::kill_orphans(&shared)
            .await
            .context("cannot read the children table")?;
        recover_unwritten(&shared, &settings.state_dir).await;
        let at = crate::shared::unix_ms();
        let replayed = shared.store.call(move |s| s.replay_all_mail(at)).await??;
        if replayed > 0 {
            info!(
                items = replayed,
                "mail left in processing by a previous supervisor returned to the inbox"
            );
        }
    }

    let mut signals = Signals::watch()?;
    sup.start_all(&config);
    // Only warnings (the config is read again to check every program):
    // beside the first spawns rather than before them.
    let checked = config_path.to_path_buf();
    tokio::task::spawn_blocking(move || warn_missing_programs(&checked));
    info!(socket = %control.path().display(), deployments = config.deployments.len(), "supervising");
    let admission = control.admission();
    let control_task = tokio::spawn(control.serve(server::Served {
        registry: sup.registry(),
        shared: shared.clone(),
        host: host_asks,
    }));
    let policy_task = tokio::spawn(crate::host::policy_tick::run(
        shared.watchlist.clone(),
        settings.policy_interval,
    ));
    let retention_task = tokio::spawn(crate::mail_retention::run(
        shared.clone(),
        settings.mail_retention,
    ));
    let progress_task = tokio::spawn(crate::observe::drain_log::run(sup.registry()));
    let mut metrics_task = None;
    if let (Some(listener), Some(addr)) = (metrics, settings.metrics_listen) {
        info!(listen = %addr, "serving Prometheus metrics at /metrics");
        metrics_task = Some(tokio::spawn(crate::observe::metrics::serve(
            listener,
            sup.registry(),
            shared.clone(),
        )));
    }
    let mut in_force = reload::InForce {
        config: config.clone(),
        policy: policy_task,
        retention: retention_task,
        metrics: metrics_task,
        admission,
    };

    // Only when systemd asked for a watchdog, and asked us (WATCHDOG_PID).
    let watchdog = notifier
        .as_ref()
        .filter(|n| n.watchdog_interval().is_some());
    let tick = notifier
        .as_ref()
        .and_then(Notifier::watchdog_interval)
        .map_or(TICK, |w| w.min(TICK));
    let mut ticker = tokio::time::interval(tick);
    let mut ready_sent = false;
    let mut trim_at: Option<Instant> = None;
    let mut last_status = String::new();
    // Resolves once a store created beside the first spawns is open (at
    // once fails the start: every child is killed).
    let opened = async move {
        match opening {
            Some(opening) => opening.wait().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(opened);
    let mut store_failed = None;
    let graceful = loop {
        tokio::select! {
            result = &mut opened, if store_failed.is_none() => match result {
                Ok(()) => store_failed = Some(None),
                Err(e) => {
                    error!(error = %e, "the new store could not be opened; killing every child and exiting");
                    store_failed = Some(Some(e));
                    break false;
                }
            },
            _ = signals.term.recv() => { info!("SIGTERM: draining and stopping every child"); break true }
            _ = signals.int.recv() => { info!("SIGINT: draining and stopping every child"); break true }
            _ = signals.quit.recv() => { info!("SIGQUIT: killing every child now"); break false }
            _ = signals.hup.recv() => {
                info!("SIGHUP: reloading the config");
                notify(notifier.as_ref(), "reloading", Notifier::reloading);
                let _ = reload::reload(&mut sup, config_path, &shared, &mut in_force).await;
                notify(notifier.as_ref(), "ready", Notifier::ready);
            }
            Some(ask) = asks.recv() => match ask {
                HostAsk::Reload(tx) => {
                    info!("reload asked over the control socket");
                    notify(notifier.as_ref(), "reloading", Notifier::reloading);
                    let _ = tx.send(reload::reload(&mut sup, config_path, &shared, &mut in_force).await);
                    notify(notifier.as_ref(), "ready", Notifier::ready);
                }
                HostAsk::Stop(tx) => {
                    info!("stop asked over the control socket: draining and stopping every child");
                    let _ = tx.send(Ok(Stopping {
                        pid: std::process::id(),
                        deployments: sup.handles().len(),
                    }));
                    break true;
                }
            },
            _ = signals.usr1.recv() => {
                info!("SIGUSR1: recycling every deployment");
                sup.recycle_all("SIGUSR1").await;
            }
            _ = signals.usr2.recv() => dump_status(&sup),
            _ = shared.started.notified(), if !ready_sent => {
                if sup.all_started() {
                    ready_sent = true;
                    trim_at = Some(Instant::now() + TRIM_AFTER_START);
                    let line = sup.summary();
                    info!(status = %line, "every deployment is up");
                    notify(notifier.as_ref(), "ready", |n| n.ready_with_status(&line));
                    last_status = line;
                }
            }
            _ = ticker.tick() => {
                shared.retry_backlog();
                // The watchdog is fed from the control loop itself, so a
                // wedged loop starves it.
                notify(watchdog, "watchdog", Notifier::watchdog);
                if trim_at.is_some_and(|at| Instant::now() >= at) {
                    trim_at = None;
                    trim_resident();
                }
                if !ready_sent && sup.all_started() {
                    ready_sent = true;
                    trim_at = Some(Instant::now() + TRIM_AFTER_START);
                    let line = sup.summary();
                    info!(status = %line, "every deployment is up");
                    notify(notifier.as_ref(), "ready", |n| n.ready_with_status(&line));
                    last_status = line;
                } else if ready_sent && notifier.is_some() {
                    // Only systemd reads the summary between changes.
                    let line = sup.summary();
                    if line != last_status {
                        notify(notifier.as_ref(), "status", |n| n.status(&line));
                        last_status = line;
                    }
                }
            }
        }
    };
    notify(notifier.as_ref(), "stopping", Notifier::stopping);
    let registry = sup.registry();
    if graceful {
        sup.request_stop().await;
    } else {
        Supervisor::request_kill(&registry).await;
    }
    let join = sup.join_all();
    tokio::pin!(join);
    loop {
        tokio::select! {
            _ = &mut join => break,
            _ = signals.quit.recv() => {
                info!("SIGQUIT during the stop: killing every child now");
                Supervisor::request_kill(&registry).await;
            }
            // A second SIGTERM does not skip the budget: SIGQUIT does.
            _ = signals.term.recv() => info!("SIGTERM again: still draining; send SIGQUIT to kill now"),
            _ = signals.int.recv() => info!("SIGINT again: still draining; send SIGQUIT to kill now"),
            Some(ask) = asks.recv() => ask.refuse("the supervisor is already stopping; it takes no reload or second stop"),
            _ = ticker.tick() => {
                shared.retry_backlog();
                notify(watchdog, "watchdog", Notifier::watchdog);
                if let Some(needed) = Supervisor::drain_time_needed(&registry) {
                    // Re-sent every tick: each one extends from now.
                    let extra = needed + Duration::from_secs(5);
                    notify(notifier.as_ref(), "extend timeout", |n| n.extend_timeout(extra));
                }
            }
        }
    }
    control_task.abort();
    in_force.abort();
    progress_task.abort();
    // Let queued journal records and events reach the disk before exiting
    // (one last try for any the store refused).
    shared.retry_backlog();
    let keys = match &shared.fleet {
        Some(f) => crate::fleet::open::all_keys(f, &shared.key).await,
        None => vec![shared.key.verifying_key()],
    };
    let _ = shared
        .store
        .call(move |s| guard::log_head_at_stop_keys(s, &keys))
        .await;
    keep_unwritten(&shared, &settings.state_dir)?;
    if let Some(Some(e)) = store_failed {
        anyhow::bail!("{e}");
    }
    info!("all children stopped; exiting");
    Ok(())
}

/// The state dir, created owner-only if it is not there: the control
/// socket that locks it lives in it.
fn create_state_dir(dir: &Path) -> anyhow::Result<()> {
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

/// Whether this start creates its store: SQLite with no database file yet
/// and no records a previous supervisor kept outside it. Then nothing
/// the store could hold has to be read before the first spawn.
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

fn fresh_state(backend: &Backend, state_dir: &Path) -> bool {
    match backend {
        Backend::Sqlite(_) => {
            !Path::new(&backend.describe()).exists() && unwritten::found(state_dir).is_empty()
        }
        Backend::Postgres(_) => false,
    }
}

/// Both store threads opening, for [`open_behind`].
struct Opening {
    store: oneshot::Receiver<Result<(), String>>,
    reader: oneshot::Receiver<Result<(), String>>,
}

impl Opening {
    /// Both opened, or why not.
    async fn wait(self) -> Result<(), String> {
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
        store_tx,
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
        reader_tx,
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
fn keep_unwritten(shared: &Shared, state_dir: &Path) -> anyhow::Result<()> {
    let left = shared.take_unwritten();
    if left.is_empty() {
        return Ok(());
    }
    let what = left.describe();
    match unwritten::keep(state_dir, &left, crate::shared::unix_ms()) {
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
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("wfhost-store-open".into())
            .spawn_scoped(scope, open)
            .context("cannot start a thread to open the store")?
            .join()
            .map_err(|_| anyhow::anyhow!("opening the store panicked"))?
    })
}

/// Says which programs a child will need but that cannot be found (a
/// typo after `wfhost-child exec --`, a script not where it is looked
/// for): its spawn would fail later and be restarted until it is failed.
fn warn_missing_programs(path: &Path) {
    for m in reload::missing_programs(path) {
        warn!("{m}");
    }
}

/// SIGUSR2: one log line per deployment.
fn dump_status(sup: &Supervisor) {
    let now = Instant::now();
    info!(summary = %sup.summary(), "SIGUSR2: status dump");
    for h in sup.handles() {
        let s = h.snapshot();
        let pid = s.pid.map_or_else(|| "-".to_owned(), |p| p.to_string());
        let uptime_ms = s
            .started_at
            .map_or(0, |t| now.saturating_duration_since(t).as_millis() as u64);
        let rss_bytes = s
            .rss_bytes()
            .map_or_else(|| "-".to_owned(), |b| b.to_string());
        info!(deployment = %s.id, state = s.state.as_str(), pid = %pid, restarts = s.restarts,
            uptime_ms, rss_bytes = %rss_bytes, drain_active = s.drain.active, drain_used_ms = s.drain.used_ms(now),
            steps = s.steps_in_flight, last_exit = %s.last_exit.as_deref().unwrap_or("-"), "status");
    }
}
