//! The children table in PostgreSQL: one row per live child, keyed by the
//! host that started it and its pid; each host reads only its own.

use super::session::Statements;
use super::{PostgresStore, col, fence, signed, unsigned};
use crate::store::{ChildRecord, ChildrenStore, StoreError};

impl ChildrenStore for PostgresStore {
    /// Remembers `child`, replacing any record of the same pid.
    fn record_child(&mut self, child: &ChildRecord) -> Result<(), StoreError> {
        let (fenced, host) = (self.fence.clone(), self.host().to_owned());
        let session = self.session()?;
        let result = (|| -> Result<(), postgres::Error> {
            let mut tx = session.begin()?;
            fence::check(&mut tx, fenced.as_deref(), &child.deployment)?;
            tx.execute(
                "INSERT INTO children (host, pid, deployment, start_time, channel_id, spawned_at_ms)
                 VALUES ($6, $1, $2, $3, $4, $5)
                 ON CONFLICT (host, pid) DO UPDATE SET deployment = excluded.deployment,
                     start_time = excluded.start_time, channel_id = excluded.channel_id,
                     spawned_at_ms = excluded.spawned_at_ms",
                &[
                    &i64::from(child.pid),
                    &child.deployment,
                    &signed(child.start_time),
                    &child.channel_id,
                    &signed(child.spawned_at_ms),
                    &host,
                ],
            )?;
            tx.commit()
        })();
        result.map_err(|e| self.fail("recording a child", &e))
    }

    /// Forgets `deployment`'s child `pid` (a stale forget is harmless).
    fn forget_child(&mut self, deployment: &str, pid: u32) -> Result<(), StoreError> {
        // Scoped to this host's own rows rather than fenced: a host that lost
        // a lease still clears the rows of the children it killed.
        let host = self.host().to_owned();
        let result = self.session()?.execute(
            "DELETE FROM children WHERE host = $3 AND deployment = $1 AND pid = $2",
            &[&deployment, &i64::from(pid), &host],
        );
        result
            .map(drop)
            .map_err(|e| self.fail("forgetting a child", &e))
    }

    /// Every remembered child, by deployment then pid.
    fn children(&mut self) -> Result<Vec<ChildRecord>, StoreError> {
        let host = self.host().to_owned();
        let rows = self.session()?.query(
            "SELECT deployment, pid, start_time, channel_id, spawned_at_ms
             FROM children WHERE host = $1 ORDER BY deployment, pid",
            &[&host],
        );
        let rows = rows.map_err(|e| self.fail("reading the children table", &e))?;
        rows.iter()
            .map(|r| {
                let what = "the children table";
                let pid = unsigned(what, col(r, 1)?)?;
                Ok(ChildRecord {
                    deployment: col(r, 0)?,
                    pid: u32::try_from(pid).map_err(|_| format!("{what}: pid {pid} is too big"))?,
                    start_time: unsigned(what, col(r, 2)?)?,
                    channel_id: col(r, 3)?,
                    spawned_at_ms: unsigned(what, col(r, 4)?)?,
                })
            })
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }
}
