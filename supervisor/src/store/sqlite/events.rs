//! The event log in SQLite (DESIGN §7): `events` rows numbered by an
//! AUTOINCREMENT seq, so a follower's cursor stays meaningful across
//! pruning and restarts. Writers are serialised by SQLite's write lock and
//! each commits the seq it was given, so a reader never sees a later seq
//! before an earlier one: catching up after a cursor has no gap.

use rusqlite::{TransactionBehavior, params};

use super::SqliteStore;
use crate::store::{EventRecord, NewEvent, StoreError};

/// Appends events in one IMMEDIATE transaction; returns their seqs.
pub(super) fn append(store: &mut SqliteStore, events: &[NewEvent]) -> Result<Vec<u64>, StoreError> {
    let path = store.path.clone();
    let fail = |source| StoreError::Sqlite {
        path: path.clone(),
        action: "appending events",
        source,
    };
    let tx = store
        .conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(&fail)?;
    let mut seqs = Vec::with_capacity(events.len());
    {
        let mut stmt = tx
            .prepare_cached(
                "INSERT INTO events (at_ms, deployment, kind, body) VALUES (?1, ?2, ?3, ?4)
                 RETURNING seq",
            )
            .map_err(&fail)?;
        for e in events {
            let seq = stmt
                .query_row(
                    params![e.at_ms, e.deployment, e.kind, e.body.to_string()],
                    |r| r.get(0),
                )
                .map_err(&fail)?;
            seqs.push(seq);
        }
    }
    tx.commit().map_err(&fail)?;
    Ok(seqs)
}

/// An event row as stored, before its body is parsed.
struct EventRow {
    seq: u64,
    at_ms: u64,
    deployment: Option<String>,
    kind: String,
    body: String,
}

/// At most `limit` events after seq `after`, ascending.
pub(super) fn after(
    store: &mut SqliteStore,
    after: u64,
    limit: usize,
) -> Result<Vec<EventRecord>, StoreError> {
    // No stored seq is above i64::MAX.
    let Ok(after) = i64::try_from(after) else {
        return Ok(Vec::new());
    };
    if limit == 0 {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let fail = store.read_fail("reading the event log");
    let rows = store
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
        .map_err(fail)?;
    rows.into_iter()
        .map(|row| {
            let body = serde_json::from_str(&row.body)
                .map_err(|e| store.corrupt(format!("event {}: body is not JSON: {e}", row.seq)))?;
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
pub(super) fn prune(store: &mut SqliteStore, keep: u64) -> Result<u64, StoreError> {
    let keep = i64::try_from(keep).unwrap_or(i64::MAX);
    let fail = store.fail("pruning the event log");
    let deleted = store
        .conn
        .prepare_cached(
            "DELETE FROM events
             WHERE seq <= (SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET ?1)",
        )
        .and_then(|mut stmt| stmt.execute(params![keep]))
        .map_err(fail)?;
    Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
}

#[cfg(test)]
/// The highest seq ever assigned, 0 when none: AUTOINCREMENT's high-water
/// mark survives pruning every row.
pub(super) fn last_seq(store: &mut SqliteStore) -> Result<u64, StoreError> {
    let fail = store.read_fail("reading the last event seq");
    store
        .conn
        .prepare_cached(
            "SELECT max(
                 coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
                 coalesce((SELECT max(seq) FROM events), 0))",
        )
        .and_then(|mut stmt| stmt.query_row([], |r| r.get(0)))
        .map_err(fail)
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::json;

    use super::*;
    use crate::store::Store;

    fn fresh() -> (tempfile::TempDir, PathBuf, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let store = SqliteStore::open(&state).unwrap();
        (dir, state, store)
    }

    fn open(state: &Path) -> SqliteStore {
        SqliteStore::open(state).unwrap()
    }

    /// Appends events numbered `from..to` in their body.
    fn append_n(store: &mut SqliteStore, from: u64, to: u64) -> Vec<u64> {
        (from..to)
            .map(|i| {
                let deployment = (i % 2 == 0).then_some("even");
                store
                    .append_event(1_000 + i, deployment, "spawned", &json!({ "n": i }))
                    .unwrap()
            })
            .collect()
    }

    fn seqs(events: &[EventRecord]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn events_are_numbered_from_one_and_read_back_whole() {
        let (_dir, _state, mut store) = fresh();
        assert_eq!(store.last_event_seq().unwrap(), 0);
        assert!(store.events_after(0, 10).unwrap().is_empty());
        assert_eq!(append_n(&mut store, 0, 3), [1, 2, 3]);
        assert_eq!(store.last_event_seq().unwrap(), 3);
        let events = store.events_after(0, 10).unwrap();
        assert_eq!(
            events[0],
            EventRecord {
                seq: 1,
                at_ms: 1_000,
                deployment: Some("even".into()),
                kind: "spawned".into(),
                body: json!({ "n": 0 }),
            }
        );
        assert_eq!(events[1].deployment, None);
        assert_eq!(events[2].body, json!({ "n": 2 }));
        let line = serde_json::to_string(&events[1]).unwrap();
        assert_eq!(
            line,
            r#"{"seq":2,"at_ms":1001,"deployment":null,"kind":"spawned","body":{"n":1}}"#
        );
    }

    #[test]
    fn a_cursor_and_a_limit_page_through_the_log_without_gaps() {
        let (_dir, _state, mut store) = fresh();
        append_n(&mut store, 0, 10);
        assert_eq!(seqs(&store.events_after(7, 100).unwrap()), [8, 9, 10]);
        assert_eq!(seqs(&store.events_after(2, 3).unwrap()), [3, 4, 5]);
        assert!(store.events_after(10, 5).unwrap().is_empty());
        assert!(store.events_after(u64::MAX, 5).unwrap().is_empty());
        assert!(store.events_after(0, 0).unwrap().is_empty());
        // Paging by cursor sees every event exactly once.
        let mut seen = Vec::new();
        let mut cursor = 0;
        loop {
            let page = store.events_after(cursor, 4).unwrap();
            let Some(last) = page.last() else { break };
            cursor = last.seq;
            seen.extend(seqs(&page));
        }
        assert_eq!(seen, (1..=10).collect::<Vec<_>>());
    }

    #[test]
    fn pruning_keeps_the_newest_and_seqs_are_never_reused() {
        let (_dir, state, mut store) = fresh();
        append_n(&mut store, 0, 10);
        assert_eq!(store.prune_events(20).unwrap(), 0);
        assert_eq!(store.prune_events(4).unwrap(), 6);
        assert_eq!(seqs(&store.events_after(0, 100).unwrap()), [7, 8, 9, 10]);
        assert_eq!(store.prune_events(4).unwrap(), 0);
        // Pruning everything still leaves the high-water mark.
        assert_eq!(store.prune_events(0).unwrap(), 4);
        assert!(store.events_after(0, 100).unwrap().is_empty());
        assert_eq!(store.last_event_seq().unwrap(), 10);
        assert_eq!(store.prune_events(u64::MAX).unwrap(), 0);
        assert_eq!(append_n(&mut store, 10, 11), [11]);
        assert_eq!(store.prune_events(0).unwrap(), 1);
        drop(store);
        let mut store = open(&state);
        assert_eq!(store.last_event_seq().unwrap(), 11);
        assert_eq!(append_n(&mut store, 11, 12), [12]);
    }

    #[test]
    fn the_log_survives_a_reopen() {
        let (_dir, state, mut store) = fresh();
        append_n(&mut store, 0, 3);
        let before = store.events_after(0, 10).unwrap();
        drop(store);
        let mut store = open(&state);
        assert_eq!(store.events_after(0, 10).unwrap(), before);
        assert_eq!(store.last_event_seq().unwrap(), 3);
        assert_eq!(append_n(&mut store, 3, 4), [4]);
    }

    #[test]
    fn two_connections_share_one_sequence() {
        let (_dir, state, mut a) = fresh();
        let mut b = open(&state);
        let mut got = Vec::new();
        for i in 0..6 {
            let s = if i % 2 == 0 { &mut a } else { &mut b };
            got.push(s.append_event(i, None, "k", &json!(i)).unwrap());
        }
        assert_eq!(got, [1, 2, 3, 4, 5, 6]);
        assert_eq!(seqs(&b.events_after(0, 10).unwrap()), got);
    }

    #[test]
    fn a_mangled_body_is_reported_as_corruption_naming_the_event() {
        let (_dir, _state, mut store) = fresh();
        append_n(&mut store, 0, 2);
        store
            .conn
            .execute("UPDATE events SET body = '{not json' WHERE seq = 2", [])
            .unwrap();
        let err = store.events_after(0, 10).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
        assert!(
            err.to_string().contains("event 2: body is not JSON"),
            "{err}"
        );
        // Reading before it still works.
        assert_eq!(seqs(&store.events_after(0, 1).unwrap()), [1]);
    }
}
