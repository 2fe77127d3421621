//! The event log in SQLite (DESIGN §7): `events` rows numbered by an
//! AUTOINCREMENT seq, so a follower's cursor stays meaningful across
//! pruning and restarts. Writers are serialised by SQLite's write lock and
//! each commits the seq it was given, so a reader never sees a later seq
//! before an earlier one: catching up after a cursor has no gap.

use rusqlite::params;

use super::SqliteStore;
use crate::store::events::parse_body;
use crate::store::{EventRecord, EventStore, NewEvent, StoreError};

impl EventStore for SqliteStore {
    /// Appends events in one IMMEDIATE transaction; returns their seqs.
    fn append_events(&mut self, events: &[NewEvent]) -> Result<Vec<u64>, StoreError> {
        (|| -> rusqlite::Result<Vec<u64>> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let mut seqs = Vec::with_capacity(events.len());
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO events (at_ms, deployment, kind, body) VALUES (?1, ?2, ?3, ?4)
                     RETURNING seq",
                )?;
                for e in events {
                    let seq = stmt.query_row(
                        params![e.at_ms, e.deployment, e.kind, e.body.to_string()],
                        |r| r.get(0),
                    )?;
                    seqs.push(seq);
                }
            }
            tx.commit()?;
            Ok(seqs)
        })()
        .map_err(|e| self.fail("appending events", &e))
    }

    /// At most `limit` events after seq `after`, ascending.
    fn events_after(&mut self, after: u64, limit: usize) -> Result<Vec<EventRecord>, StoreError> {
        // No stored seq is above i64::MAX.
        let Ok(after) = i64::try_from(after) else {
            return Ok(Vec::new());
        };
        if limit == 0 {
            return Ok(Vec::new());
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .conn
            .prepare_cached(
                "SELECT seq, at_ms, deployment, kind, body FROM events
                 WHERE seq > ?1 ORDER BY seq LIMIT ?2",
            )
            .and_then(|mut stmt| {
                stmt.query_map(params![after, limit], |r| {
                    Ok(EventRow {
                        seq: r.get(0)?,
                        at_ms: r.get(1)?,
                        deployment: r.get(2)?,
                        kind: r.get(3)?,
                        body: r.get(4)?,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.read_fail("reading the event log", &e))?;
        rows.into_iter()
            .map(|row| {
                let body = parse_body(row.seq, &row.body).map_err(|what| self.corrupt(what))?;
                Ok(EventRecord {
                    seq: row.seq,
                    at_ms: row.at_ms,
                    deployment: row.deployment,
                    kind: row.kind,
                    body,
                })
            })
            .collect()
    }

    /// Deletes all but the newest `keep` events; returns how many went.
    fn prune_events(&mut self, keep: u64) -> Result<u64, StoreError> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        let deleted = self
            .conn
            .prepare_cached(
                "DELETE FROM events
                 WHERE seq <= (SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET ?1)",
            )
            .and_then(|mut stmt| stmt.execute(params![keep]))
            .map_err(|e| self.fail("pruning the event log", &e))?;
        Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
    }

    /// The highest seq ever assigned, 0 when none: AUTOINCREMENT's high-water
    /// mark survives pruning every row.
    fn last_event_seq(&mut self) -> Result<u64, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT max(
                     coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
                     coalesce((SELECT max(seq) FROM events), 0))",
            )
            .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)))
            .map_err(|e| self.read_fail("reading the last event seq", &e))
    }
}

/// An event row as stored, before its body is parsed.
struct EventRow {
    seq: u64,
    at_ms: u64,
    deployment: Option<String>,
    kind: String,
    body: String,
}
