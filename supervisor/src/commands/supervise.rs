//! `wfhost supervise`: run the supervisor in the foreground until a signal
//! stops it.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info};

use crate::config;
use crate::control_server;
use crate::exit;
use crate::logging::{self, LogFormat};
use crate::shared::Shared;
use crate::signing_key;
use crate::spawn::{self, Spawner};
use crate::store::SqliteStore;
use crate::supervisor::{self, Supervisor};

/// Arguments of `wfhost supervise`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The config file (TOML).
    #[arg(long, short, value_name = "PATH")]
    config: PathBuf,
    /// Log line format on stderr.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

/// Runs the supervisor; returns the process exit code.
pub fn run(args: Args) -> u8 {
    logging::init(args.log_format);
    let config = match config::load(&args.config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return exit::USAGE;
        }
    };
    match spawn::raise_nofile_limit() {
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
    match runtime.block_on(supervise(config)) {
        Ok(()) => exit::OK,
        Err(e) => {
            error!("{e:#}");
            eprintln!("wfhost supervise: {e:#}");
            exit::FAILED
        }
    }
}

async fn supervise(config: config::Config) -> anyhow::Result<()> {
    let settings = &config.supervisor;
    let store = SqliteStore::open(&settings.state_dir)
        .with_context(|| format!("cannot open the store in {}", settings.state_dir.display()))?;
    let (key, key_path) = signing_key::load_or_create(settings)?;
    info!(key = %key_path.display(), key_id = %wfhost_ipc::KeyId::of(&key.verifying_key()), "signing key loaded");
    let spawner = Spawner::start(tokio::runtime::Handle::current())
        .context("cannot start the spawner thread")?;
    let shared = Arc::new(Shared {
        store: Mutex::new(store),
        key,
        spawner,
    });
    supervisor::kill_orphans(&shared).context("cannot read the children table")?;

    let mut sup = Supervisor::start(&config, &shared);
    let control = control_server::Server::bind(settings, sup.registry())?;
    info!(socket = %control.path().display(), deployments = config.deployments.len(), "supervising");
    let control_task = tokio::spawn(control.serve());

    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    let mut quit = signal(SignalKind::quit()).context("cannot watch SIGQUIT")?;
    let graceful = tokio::select! {
        _ = term.recv() => { info!("SIGTERM: stopping every child"); true }
        _ = int.recv() => { info!("SIGINT: stopping every child"); true }
        _ = quit.recv() => { info!("SIGQUIT: killing every child now"); false }
    };
    if graceful {
        tokio::select! {
            _ = sup.stop_all() => {}
            _ = quit.recv() => {
                info!("SIGQUIT during stop: killing every child now");
                sup.kill_all().await;
            }
        }
    } else {
        sup.kill_all().await;
    }
    control_task.abort();
    info!("all children stopped; exiting");
    Ok(())
}
