//! Host maintenance in the fleet's tables (DESIGN §10b): a host drained
//! by an operator (`wfhost host drain`) has a row in `fleet_maintenance`
//! until `wfhost host resume`; the lease rules read it with the hosts
//! (`fleet_view`), so the drained host hands everything off and takes
//! nothing, and the others count it out of the fair share. The row
//! outlives the host's own restarts. Each change wakes every host.

use super::{PostgresStore, col};
use crate::store::StoreError;

/// One host as `wfhost hosts` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostEntry {
    /// Its id.
    pub host: String,
    /// How long ago it last heartbeated (database ms); none for a drained
    /// host that is not running.
    pub heartbeat_age_ms: Option<i64>,
    /// It is stopping.
    pub stopping: bool,
    /// Drained since (Unix ms, the database's clock), by whom.
    pub drained: Option<(i64, String)>,
    /// The leases it holds now.
    pub leases: i64,
    /// How its connections to the database are protected.
    pub connection: Option<String>,
}

impl PostgresStore {
    /// Marks `host` drained, asked `by`; false if it already was.
    pub fn fleet_drain_host(&mut self, host: &str, by: &str) -> Result<bool, StoreError> {
        let client = self.client()?;
        let result = (|| -> Result<u64, postgres::Error> {
            let mut tx = client.transaction()?;
            let n = tx.execute(
                "INSERT INTO fleet_maintenance (host_id, asked_by) VALUES ($1, $2)
                 ON CONFLICT (host_id) DO NOTHING",
                &[&host, &by],
            )?;
            tx.execute("SELECT pg_notify('wfhost_lease', $1)", &[&host])?;
            tx.commit()?;
            Ok(n)
        })();
        result
            .map(|n| n == 1)
            .map_err(|e| self.fail("draining a host", &e))
    }

    /// Lets `host` take deployments again; false if it was not drained.
    pub fn fleet_resume_host(&mut self, host: &str) -> Result<bool, StoreError> {
        let client = self.client()?;
        let result = (|| -> Result<u64, postgres::Error> {
            let mut tx = client.transaction()?;
            let n = tx.execute("DELETE FROM fleet_maintenance WHERE host_id = $1", &[&host])?;
            tx.execute("SELECT pg_notify('wfhost_lease', $1)", &[&host])?;
            tx.commit()?;
            Ok(n)
        })();
        result
            .map(|n| n == 1)
            .map_err(|e| self.fail("resuming a host", &e))
    }

    /// Every host that heartbeats or is drained, by id.
    pub fn fleet_host_list(&mut self) -> Result<Vec<HostEntry>, StoreError> {
        let rows = self.client()?.query(
            "SELECT coalesce(h.host_id, m.host_id),
                    (extract(epoch FROM clock_timestamp() - h.heartbeat_at) * 1000)::BIGINT,
                    coalesce(h.stopping, false),
                    (extract(epoch FROM m.since) * 1000)::BIGINT,
                    m.asked_by,
                    (SELECT count(*) FROM fleet_leases l
                      WHERE l.holder = coalesce(h.host_id, m.host_id)
                        AND l.expires_at > clock_timestamp()),
                    h.connection
             FROM fleet_hosts h FULL OUTER JOIN fleet_maintenance m ON h.host_id = m.host_id
             ORDER BY 1",
            &[],
        );
        let rows = rows.map_err(|e| self.fail("reading the fleet's hosts", &e))?;
        rows.iter()
            .map(|r| {
                let since: Option<i64> = col(r, 3)?;
                let by: Option<String> = col(r, 4)?;
                Ok(HostEntry {
                    host: col(r, 0)?,
                    heartbeat_age_ms: col(r, 1)?,
                    stopping: col(r, 2)?,
                    drained: since.map(|s| (s, by.unwrap_or_default())),
                    leases: col(r, 5)?,
                    connection: col(r, 6)?,
                })
            })
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }
}
