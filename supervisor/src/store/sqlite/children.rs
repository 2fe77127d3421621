//! The children table in SQLite: one row per live child, keyed by pid.

use rusqlite::params;

use super::SqliteStore;
use crate::store::{ChildRecord, StoreError};

/// Remembers `child`, replacing any record of the same pid.
pub(super) fn record(store: &mut SqliteStore, child: &ChildRecord) -> Result<(), StoreError> {
    store
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
        .map_err(|e| store.fail("recording a child", &e))
}

/// Forgets `deployment`'s child `pid` (a stale forget is harmless).
pub(super) fn forget(
    store: &mut SqliteStore,
    deployment: &str,
    pid: u32,
) -> Result<(), StoreError> {
    store
        .conn
        .prepare_cached("DELETE FROM children WHERE deployment = ?1 AND pid = ?2")
        .and_then(|mut stmt| stmt.execute(params![deployment, pid]))
        .map(drop)
        .map_err(|e| store.fail("forgetting a child", &e))
}

/// Every remembered child, by deployment then pid.
pub(super) fn all(store: &mut SqliteStore) -> Result<Vec<ChildRecord>, StoreError> {
    let read = || -> rusqlite::Result<Vec<ChildRecord>> {
        let mut stmt = store.conn.prepare_cached(
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
    read().map_err(|e| store.read_fail("reading the children table", &e))
}
