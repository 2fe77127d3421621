//! The children table in SQLite: one row per live child, keyed by pid.

use rusqlite::params;

use super::SqliteStore;
use crate::store::{ChildRecord, ChildrenStore, StoreError};

impl ChildrenStore for SqliteStore {
    /// Remembers `child`, replacing any record of the same pid.
    fn record_child(&mut self, child: &ChildRecord) -> Result<(), StoreError> {
        self
            .conn
            .prepare_cached(
                "INSERT OR REPLACE INTO children (pid, deployment, start_time, channel_id, spawned_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .and_then(|mut stmt| {
                stmt.execute(params![
                    child.pid,
                    child.deployment,
                    child.start_time,
                    child.channel_id,
                    child.spawned_at_ms
                ])
            })
            .map(drop)
            .map_err(|e| self.fail("recording a child", &e))
    }

    /// Forgets `deployment`'s child `pid` (a stale forget is harmless).
    fn forget_child(&mut self, deployment: &str, pid: u32) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("DELETE FROM children WHERE deployment = ?1 AND pid = ?2")
            .and_then(|mut stmt| stmt.execute(params![deployment, pid]))
            .map(drop)
            .map_err(|e| self.fail("forgetting a child", &e))
    }

    /// Every remembered child, by deployment then pid.
    fn children(&mut self) -> Result<Vec<ChildRecord>, StoreError> {
        let read = || -> rusqlite::Result<Vec<ChildRecord>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT deployment, pid, start_time, channel_id, spawned_at_ms
                 FROM children ORDER BY deployment, pid",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(ChildRecord {
                    deployment: r.get(0)?,
                    pid: r.get(1)?,
                    start_time: r.get(2)?,
                    channel_id: r.get(3)?,
                    spawned_at_ms: r.get(4)?,
                })
            })?;
            rows.collect()
        };
        read().map_err(|e| self.read_fail("reading the children table", &e))
    }
}
