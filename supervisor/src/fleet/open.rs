//! Joining a fleet at start-up, before anything runs: the fenced store
//! (every write concerning a deployment conditioned on this host's
//! lease), a reader, the fleet's own two connections (the lease loop's
//! and one for queries), the host's row and its journal key registered,
//! and the keys of every host that has signed the journal, so the
//! start-up check verifies each record against its signer's key.

use std::sync::Arc;
use std::time::Duration;

use ed25519_dalek::{SigningKey, VerifyingKey};
use tokio::sync::mpsc;

use crate::config::FleetSettings;
use crate::store::fence::Fence;
use crate::store::{PostgresStore, Store, StoreError};

/// The channels a fleet host listens on (its lease loop hears each).
pub const CHANNELS: &[&str] = &[
    "wfhost_mail",
    "wfhost_events",
    "wfhost_lease",
    "wfhost_request",
    "wfhost_answer",
];

/// What a fleet host opens.
pub struct Joined {
    /// The fenced writer.
    pub store: Box<dyn Store>,
    /// Reads beside it (status, events, metrics).
    pub reader: Box<dyn Store>,
    /// The lease loop's connection.
    pub leases: PostgresStore,
    /// The connection for queries (status, forwarding).
    pub query: PostgresStore,
    /// The leases this host holds (none yet).
    pub fence: Arc<Fence>,
    /// Where the fence reports refused writes.
    pub refusals: mpsc::UnboundedReceiver<String>,
    /// Every host key that may have signed the journal.
    pub keys: Vec<VerifyingKey>,
}

/// Connection settings of a fleet host: a lost server or a partition is
/// noticed within a lease (connecting, unacknowledged writes, an idle
/// connection), not after the kernel's minutes.
///
/// The server is told the same of its side: a transaction of a host cut
/// off in its middle would otherwise hold its locks (the event log's, a
/// lease row's) for the server's keepalive hours, stalling every other
/// host; so a session idle inside a transaction, or whose peer stopped
/// acknowledging, is ended within about a renewal.
pub fn tune(settings: &FleetSettings) -> impl Fn(&mut postgres::Config) + Send + Clone + 'static {
    let connect = settings.lease_renew.max(Duration::from_secs(1));
    let dead = settings.lease_ttl;
    let idle = settings.lease_renew.max(Duration::from_secs(1));
    let server = format!(
        "-c idle_in_transaction_session_timeout={} -c tcp_user_timeout={} -c tcp_keepalives_idle={} -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3",
        idle.as_millis(),
        dead.as_millis(),
        idle.as_secs().max(1)
    );
    move |c: &mut postgres::Config| {
        c.connect_timeout(connect);
        c.tcp_user_timeout(dead);
        c.keepalives(true);
        c.keepalives_idle(idle);
        c.keepalives_interval(Duration::from_secs(1));
        c.keepalives_retries(3);
        let options = match c.get_options() {
            Some(own) if !own.is_empty() => format!("{own} {server}"),
            _ => server.clone(),
        };
        c.options(&options);
    }
}

/// Opens everything a fleet host needs on the database `url`, registers
/// it and its key, and returns the keys to verify the journal with. Call
/// off any tokio runtime thread (the client blocks).
pub fn join(url: &str, settings: &FleetSettings, key: &SigningKey) -> Result<Joined, StoreError> {
    let tune = tune(settings);
    let (fence, refusals) = Fence::new(&settings.host_id);
    let fence = Arc::new(fence);
    let mut leases = PostgresStore::open_fleet(url, &tune, None)?;
    leases.fleet_join(&settings.host_id, &key.verifying_key(), settings.capacity)?;
    let keys = keys(&mut leases, key)?;
    let store = PostgresStore::open_fleet(url, &tune, Some(fence.clone()))?;
    let reader = PostgresStore::open_fleet(url, &tune, None)?;
    let query = PostgresStore::open_fleet(url, &tune, None)?;
    Ok(Joined {
        store: Box::new(store),
        reader: Box::new(reader),
        leases,
        query,
        fence,
        refusals,
        keys,
    })
}

/// This host's key and every key registered in the fleet.
pub fn keys(store: &mut PostgresStore, key: &SigningKey) -> Result<Vec<VerifyingKey>, StoreError> {
    let mut keys = vec![key.verifying_key()];
    for k in store.fleet_keys()? {
        if !keys.contains(&k.key) {
            keys.push(k.key);
        }
    }
    Ok(keys)
}

/// A fleet host's parts once joined, for the supervisor to wire up.
pub struct Started {
    /// What every part shares.
    pub fleet: Arc<super::Fleet>,
    /// The lease loop's connection.
    pub leases: super::db::Db,
    /// Commands for the lease loop.
    pub commands: mpsc::UnboundedReceiver<super::Command>,
    /// Writes the fence refused.
    pub refusals: mpsc::UnboundedReceiver<String>,
    /// What the listener hears.
    pub heard: mpsc::UnboundedReceiver<crate::store::postgres::listen::Heard>,
}

/// The store, its reader, the signing key and the fleet's parts.
pub type Opened = (Box<dyn Store>, Box<dyn Store>, SigningKey, Started);

/// What `wfhost supervise` opens on a fleet host: the store, a reader
/// and the signing key (as on a single host, the journal verified at
/// start against every host's key), and the fleet's parts. Done on a
/// thread of its own: the PostgreSQL client blocks.
pub fn start(
    url: &str,
    fleet: &FleetSettings,
    settings: &crate::config::SupervisorSettings,
    deployments: &[crate::config::DeploymentConfig],
) -> anyhow::Result<Opened> {
    use anyhow::Context;
    let at = crate::store::Backend::Postgres(url.to_owned()).describe();
    let open = || -> anyhow::Result<_> {
        let (key, key_path) = crate::signing_key::load_or_create(settings)?;
        tracing::info!(key = %key_path.display(), key_id = %wfhost_ipc::KeyId::of(&key.verifying_key()), host = %fleet.host_id, "signing key loaded");
        let mut joined =
            join(url, fleet, &key).with_context(|| format!("cannot join the fleet on {at}"))?;
        crate::store::guard::check_at_start_keys(&mut *joined.store, &joined.keys)
            .with_context(|| format!("refusing to start on the store {at}"))?;
        Ok((joined, key))
    };
    let (joined, key) = crate::store::handle::open_off_runtime(open)?;
    let leases = super::db::Db::start("wfhost-fleet", Box::new(joined.leases))
        .context("cannot start the fleet's lease thread")?;
    let query = super::db::Db::start("wfhost-fleet-query", Box::new(joined.query))
        .context("cannot start the fleet's query thread")?;
    let (heard_tx, heard) = mpsc::unbounded_channel();
    crate::store::postgres::listen::spawn(url, Box::new(tune(fleet)), CHANNELS, heard_tx)
        .context("cannot start the fleet's listener thread")?;
    let (fleet, commands) = super::Fleet::new(fleet.clone(), joined.fence, query, deployments);
    let started = Started {
        fleet: Arc::new(fleet),
        leases,
        commands,
        refusals: joined.refusals,
        heard,
    };
    Ok((joined.store, joined.reader, key, started))
}

/// Every key that may have signed the journal now (hosts join while this
/// one runs), for the check at stop; this host's own if the database
/// cannot say.
pub async fn all_keys(fleet: &super::Fleet, key: &SigningKey) -> Vec<VerifyingKey> {
    let own = key.clone();
    match fleet.query.call(move |s| keys(s, &own)).await {
        Ok(Ok(keys)) => keys,
        _ => vec![key.verifying_key()],
    }
}

/// The host keys registered in the store `backend` names (none for
/// SQLite, or a PostgreSQL store no fleet has used), for `journal verify`.
pub fn registered_keys(
    backend: &crate::store::Backend,
) -> Result<Vec<crate::store::postgres::lease::HostKey>, StoreError> {
    match backend {
        crate::store::Backend::Sqlite(_) => Ok(Vec::new()),
        crate::store::Backend::Postgres(url) => PostgresStore::open_existing(url)?.fleet_keys(),
    }
}
