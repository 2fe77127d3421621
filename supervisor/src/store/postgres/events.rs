//! The event log in PostgreSQL: `events` rows numbered by an identity
//! column. Identity values are handed out before commit, so two writers
//! could commit seqs out of order and a follower reading between the
//! commits would skip one for good; every transaction that writes events
//! therefore holds [`EVENTS_LOCK`] until it commits, which keeps "no seq
//! becomes visible before a smaller one" true as in SQLite.

use super::session::{Statements, Tx};
use super::{PostgresStore, col, fence, signed, unsigned};
use crate::store::events::parse_body;
use crate::store::{EventRecord, EventStore, NewEvent, StoreError};

/// The advisory lock of event-writing transactions ("wfhost" + 2).
pub(super) const EVENTS_LOCK: i64 = 0x7766_686f_7374_0002;

/// Inserts `event` in `tx`, which holds [`EVENTS_LOCK`]; returns its seq.
pub(super) fn insert(tx: &mut Tx<'_>, event: &NewEvent) -> Result<i64, postgres::Error> {
    tx.query_one(
        "INSERT INTO events (at_ms, deployment, kind, body) VALUES ($1, $2, $3, $4)
             RETURNING seq",
        &[
            &signed(event.at_ms),
            &event.deployment,
            &event.kind,
            &event.body.to_string(),
        ],
    )?
    .try_get(0)
}

/// Inserts `events` in `tx`, which holds [`EVENTS_LOCK`], in one round
/// trip; returns their seqs, in order (handed out in the order inserted).
fn insert_all(tx: &mut Tx<'_>, events: &[&NewEvent]) -> Result<Vec<i64>, postgres::Error> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let at: Vec<i64> = events.iter().map(|e| signed(e.at_ms)).collect();
    let deployment: Vec<Option<&str>> = events.iter().map(|e| e.deployment.as_deref()).collect();
    let kind: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    let body: Vec<String> = events.iter().map(|e| e.body.to_string()).collect();
    tx.query(
        "WITH added AS (
             INSERT INTO events (at_ms, deployment, kind, body)
             SELECT at_ms, deployment, kind, body
             FROM unnest($1::BIGINT[], $2::TEXT[], $3::TEXT[], $4::TEXT[])
                  WITH ORDINALITY AS e(at_ms, deployment, kind, body, n)
             ORDER BY n
             RETURNING seq)
         SELECT seq FROM added ORDER BY seq",
        &[&at, &deployment, &kind, &body],
    )?
    .iter()
    .map(|r| r.try_get(0))
    .collect()
}

impl EventStore for PostgresStore {
    /// Appends events in one transaction; returns their seqs.
    fn append_events(&mut self, events: &[NewEvent]) -> Result<Vec<u64>, StoreError> {
        let fenced = self.fence.clone();
        let session = self.session()?;
        let result = (|| -> Result<Vec<i64>, postgres::Error> {
            let mut tx = session.begin()?;
            // A fleet host's events for deployments it no longer holds are
            // left out; the rest of the batch is written.
            let writable = fence::writable(&mut tx, fenced.as_deref(), &named(events))?;
            tx.lock_events()?;
            let kept: Vec<&NewEvent> = events
                .iter()
                .filter(|e| e.deployment.as_ref().is_none_or(|d| writable.contains(d)))
                .collect();
            let seqs = insert_all(&mut tx, &kept)?;
            tx.commit()?;
            Ok(seqs)
        })();
        let seqs = result.map_err(|e| self.fail("appending events", &e))?;
        Ok(seqs
            .into_iter()
            .map(|s| u64::try_from(s).unwrap_or(0))
            .collect())
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
        let rows = self.session()?.query(
            "SELECT seq, at_ms, deployment, kind, body FROM events
             WHERE seq > $1 ORDER BY seq LIMIT $2",
            &[&after, &limit],
        );
        let rows = rows.map_err(|e| self.fail("reading the event log", &e))?;
        rows.iter()
            .map(|r| {
                let seq = unsigned("event", col(r, 0)?)?;
                let body: String = col(r, 4)?;
                Ok(EventRecord {
                    seq,
                    at_ms: unsigned(&format!("event {seq}"), col(r, 1)?)?,
                    deployment: col(r, 2)?,
                    kind: col(r, 3)?,
                    body: parse_body(seq, &body)?,
                })
            })
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }

    /// Deletes all but the newest `keep` events; returns how many went.
    fn prune_events(&mut self, keep: u64) -> Result<u64, StoreError> {
        // A write of its own (a savepoint in a group): a failure here
        // leaves the group's other writes be.
        let session = self.session()?;
        let deleted = (|| -> Result<u64, postgres::Error> {
            let mut tx = session.begin()?;
            let deleted = tx.execute(
                "DELETE FROM events
                 WHERE seq <= (SELECT seq FROM events ORDER BY seq DESC LIMIT 1 OFFSET $1)",
                &[&signed(keep)],
            )?;
            tx.commit()?;
            Ok(deleted)
        })();
        deleted.map_err(|e| self.fail("pruning the event log", &e))
    }

    /// The highest seq ever assigned, 0 when none: the identity sequence's
    /// high-water mark survives pruning every row.
    fn last_event_seq(&mut self) -> Result<u64, StoreError> {
        let row = self.session()?.query_one(
            "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('events', 'seq')), 0)",
            &[],
        );
        let seq: i64 = row
            .map_err(|e| self.fail("reading the last event seq", &e))?
            .get(0);
        Ok(u64::try_from(seq).unwrap_or(0))
    }
}

/// The deployments `events` name, each once.
fn named(events: &[NewEvent]) -> Vec<&str> {
    let mut named: Vec<&str> = events
        .iter()
        .filter_map(|e| e.deployment.as_deref())
        .collect();
    named.sort_unstable();
    named.dedup();
    named
}
