//! `wfhost supervise`: run the supervisor in the foreground until a signal
//! stops it. Signals (DESIGN §8): SIGTERM/SIGINT stop gracefully (drains
//! under budget), SIGHUP reloads the config, SIGUSR1 recycles everything,
//! SIGUSR2 dumps status to the log, SIGQUIT kills every child and exits.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use tokio::sync::{mpsc, watch};
use tracing::{error, info, warn};

use crate::config::{self, Config};
use crate::control::server;
use crate::deployment::spawn::Spawner;
use crate::exit;
use crate::host::Supervisor;
use crate::logging::{self, LogFormat};
use crate::observe::notify::Notifier;
use crate::shared::Shared;
use crate::store::{Backend, guard};

mod reload;
mod serving;
mod store_open;

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

/// The supervisor from start to exit, its start-up in the order its
/// guarantees need (the socket's lock, the store, recovery, the spawns,
/// then the control socket served), read top to bottom in one place.
async fn supervise(config: Config, config_path: &Path) -> anyhow::Result<()> {
    let notifier = Notifier::from_env();
    let settings = &config.supervisor;
    let backend = Backend::of(&settings.state_dir, config.store_url.as_deref());
    // The control socket first: a second supervisor on this state dir must
    // stop here, before it opens the store or touches the first one's
    // children.
    store_open::create_state_dir(&settings.state_dir)?;
    let control = server::Server::bind(settings)?;
    let spawner = Spawner::start(tokio::runtime::Handle::current())
        .context("cannot start the spawner thread")?;
    let fresh = store_open::fresh_state(&backend, &settings.state_dir);
    let store_open::Stores {
        store,
        reader,
        key,
        opening,
        fleet,
    } = store_open::open(&config, &backend, fresh)?;
    let (events, _) = watch::channel(());
    let shared = Arc::new(Shared {
        store,
        reader,
        key: Arc::new(key),
        spawner,
        events,
        event_retention: settings.event_retention.into(),
        backlog: Default::default(),
        started: tokio::sync::Notify::new(),
        fleet: fleet.as_ref().map(|f| f.fleet.clone()),
        sends: Default::default(),
        door: Default::default(),
    });
    let mut sup = Supervisor::new(&shared);
    if let Some(f) = fleet {
        let inbound = crate::host::fleet::Inbound {
            commands: f.commands,
            refusals: f.refusals,
            heard: f.heard,
            answer_forwarded: crate::control::forwarded::answerer(
                f.fleet.clone(),
                shared.clone(),
                sup.registry(),
            ),
        };
        sup.join_fleet(f.leases, inbound);
    }
    let (host_asks, asks) = mpsc::channel(8);
    let metrics = match settings.metrics_listen {
        Some(addr) => Some(crate::observe::metrics::bind(addr).await?),
        None => None,
    };
    let console = match &config.console {
        Some(c) => Some(crate::console::bind(c).await?),
        None => None,
    };
    // A store that did not exist holds no children to clean up after, no
    // kept records and no mail: nothing of it precedes the first spawn.
    if !fresh {
        // Deployments that hold their interrupted items for an operator.
        let hold = config
            .deployments
            .iter()
            .filter(|d| d.hold)
            .map(|d| d.id.clone());
        store_open::recover(&shared, &settings.state_dir, hold.collect()).await?;
    }

    let signals = serving::Signals::watch()?;
    sup.start_all(&config);
    // Only warnings (the config is read again to check every program):
    // beside the first spawns rather than before them.
    let checked = config_path.to_path_buf();
    tokio::task::spawn_blocking(move || warn_missing_programs(&checked));
    info!(socket = %control.path().display(), deployments = config.deployments.len(), "supervising");
    let admission = control.admission();
    // The console answers through the control socket's handlers.
    let console_task = console.map(|bound| {
        let ctx = crate::control::handlers::Context {
            registry: sup.registry(),
            shared: shared.clone(),
            host: host_asks.clone(),
            budget: Default::default(),
        };
        tokio::spawn(crate::console::serve(bound, ctx))
    });
    let control_task = tokio::spawn(control.serve(server::Served {
        registry: sup.registry(),
        shared: shared.clone(),
        host: host_asks,
    }));
    let progress_task = tokio::spawn(crate::observe::drain_log::run(sup.registry()));
    let in_force = in_force(&config, &sup, &shared, metrics, admission);
    let mut serving = serving::Serving {
        sup,
        shared: shared.clone(),
        signals,
        asks,
        ticker: serving::ticker(notifier.as_ref()),
        notifier,
        in_force,
        config_path,
    };
    let (graceful, store_failed) = serving.serve(opening).await;
    serving.wind_down(graceful).await;
    let serving::Serving { in_force, .. } = serving;
    control_task.abort();
    if let Some(task) = console_task {
        task.abort();
    }
    in_force.abort();
    progress_task.abort();
    finish(&shared, &settings.state_dir, store_failed).await
}

/// The background tasks a reload may replace: the policy tick, mail
/// retention and the metrics endpoint.
fn in_force(
    config: &Config,
    sup: &Supervisor,
    shared: &Arc<Shared>,
    metrics: Option<tokio::net::TcpListener>,
    admission: crate::control::admission::Admission,
) -> reload::InForce {
    let settings = &config.supervisor;
    let policy = tokio::spawn(crate::deployment::policy_tick::run(
        sup.watchlist(),
        settings.policy_interval,
    ));
    let retention = tokio::spawn(crate::store::retention::run(
        shared.store.clone(),
        settings.mail_retention,
    ));
    let mut metrics_task = None;
    if let (Some(listener), Some(addr)) = (metrics, settings.metrics_listen) {
        info!(listen = %addr, "serving Prometheus metrics at /metrics");
        metrics_task = Some(tokio::spawn(crate::observe::metrics::serve(
            listener,
            sup.registry(),
            shared.clone(),
        )));
    }
    reload::InForce {
        config: config.clone(),
        policy,
        retention,
        metrics: metrics_task,
        admission,
    }
}

/// The last writes of a stop: queued records and events (one last try
/// for any the store refused), the journal's head logged, and what the
/// store never took kept outside it.
async fn finish(
    shared: &Arc<Shared>,
    state_dir: &Path,
    store_failed: Option<String>,
) -> anyhow::Result<()> {
    shared.retry_backlog();
    let keys = match &shared.fleet {
        Some(f) => crate::fleet::open::all_keys(f, &shared.key).await,
        None => vec![shared.key.verifying_key()],
    };
    let _ = shared
        .store
        .call(move |s| guard::log_head_at_stop_keys(s, &keys))
        .await;
    store_open::keep_unwritten(shared, state_dir)?;
    if let Some(e) = store_failed {
        anyhow::bail!("{e}");
    }
    info!("all children stopped; exiting");
    Ok(())
}

/// Says which programs a child will need but that cannot be found (a
/// typo after `wfhost-child exec --`, a script not where it is looked
/// for): its spawn would fail later and be restarted until it is failed.
fn warn_missing_programs(path: &Path) {
    for m in reload::missing_programs(path) {
        warn!("{m}");
    }
}
