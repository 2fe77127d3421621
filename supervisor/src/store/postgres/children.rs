//! The children table in PostgreSQL: one row per live child, keyed by pid.

use super::{PostgresStore, col, signed, unsigned};
use crate::store::{ChildRecord, StoreError};

/// Remembers `child`, replacing any record of the same pid.
pub(super) fn record(store: &mut PostgresStore, child: &ChildRecord) -> Result<(), StoreError> {
    let result = store.client()?.execute(
        "INSERT INTO children (pid, deployment, start_time, channel_id, spawned_at_ms)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (pid) DO UPDATE SET deployment = excluded.deployment,
             start_time = excluded.start_time, channel_id = excluded.channel_id,
             spawned_at_ms = excluded.spawned_at_ms",
        &[
            &i64::from(child.pid),
            &child.deployment,
            &signed(child.start_time),
            &child.channel_id,
            &signed(child.spawned_at_ms),
        ],
    );
    result
        .map(drop)
        .map_err(|e| store.fail("recording a child", &e))
}

/// Forgets `deployment`'s child `pid` (a stale forget is harmless).
pub(super) fn forget(
    store: &mut PostgresStore,
    deployment: &str,
    pid: u32,
) -> Result<(), StoreError> {
    let result = store.client()?.execute(
        "DELETE FROM children WHERE deployment = $1 AND pid = $2",
        &[&deployment, &i64::from(pid)],
    );
    result
        .map(drop)
        .map_err(|e| store.fail("forgetting a child", &e))
}

/// Every remembered child, by deployment then pid.
pub(super) fn all(store: &mut PostgresStore) -> Result<Vec<ChildRecord>, StoreError> {
    let rows = store.client()?.query(
        "SELECT deployment, pid, start_time, channel_id, spawned_at_ms
         FROM children ORDER BY deployment, pid",
        &[],
    );
    let rows = rows.map_err(|e| store.fail("reading the children table", &e))?;
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
        .map_err(|what| store.corrupt(what))
}
