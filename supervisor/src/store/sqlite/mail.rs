//! Mail in SQLite (DESIGN §6): one `mail` row per accepted item whose
//! `state` moves inbox → processing → done (or back to inbox on replay)
//! as `store::mail` says; the admission rules and the events written with
//! the mail are `store::mail`'s. States are literals in the SQL so the
//! partial index on processing rows is usable. Each
//! operation is one transaction, so an event is never written without its
//! mail row or the other way round.

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::SqliteStore;
use crate::store::mail::{self, Admission, Earlier};
use crate::store::{Accepted, MailCounts, MailItem, NewEvent, StoreError};

/// Accepts `payload` into `deployment`'s inbox as [`mail::admit`] rules;
/// the look-ups and the insert share one write transaction, so two
/// senders cannot both take the last slot.
pub(super) fn enqueue(
    store: &mut SqliteStore,
    deployment: &str,
    key: Option<&str>,
    payload: &[u8],
    max_inbox: u64,
    at_ms: u64,
) -> Result<Accepted, StoreError> {
    let digest = mail::payload_digest(key, payload);
    (|| -> rusqlite::Result<Result<Accepted, StoreError>> {
        let tx = store
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let earlier = match key {
            Some(key) => tx
                .prepare_cached(
                    "SELECT id, payload_sha256 FROM mail WHERE deployment = ?1 AND idempotency_key = ?2",
                )?
                .query_row(params![deployment, key], |r| {
                    Ok(Earlier {
                        id: r.get(0)?,
                        payload_sha256: r.get(1)?,
                    })
                })
                .optional()?,
            None => None,
        };
        let pending: u64 = tx
            .prepare_cached("SELECT inbox + processing FROM mail_counts WHERE deployment = ?1")?
            .query_row(params![deployment], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        // Dropping `tx` without a commit rolls back: nothing was written.
        match mail::admit(deployment, key, digest.as_ref(), earlier, pending, max_inbox) {
            Err(refused) => return Ok(Err(refused)),
            Ok(Admission::Existing(id)) => return Ok(Ok(Accepted { id, new: false })),
            Ok(Admission::Insert) => {}
        }
        let id: u64 = tx
            .prepare_cached(
                "INSERT INTO mail (deployment, state, payload, enqueued_at_ms, idempotency_key, payload_sha256)
                 VALUES (?1, 'inbox', ?2, ?3, ?4, ?5) RETURNING id",
            )?
            .query_row(params![deployment, payload, at_ms, key, digest], |r| {
                r.get(0)
            })?;
        note(&tx, &mail::accepted_event(deployment, id, at_ms))?;
        tx.commit()?;
        Ok(Ok(Accepted { id, new: true }))
    })()
    .map_err(|e| store.read_fail("accepting mail", &e))?
}

/// Moves the first `limit` inbox items of `deployment` to processing and
/// returns them in FIFO order.
pub(super) fn take(
    store: &mut SqliteStore,
    deployment: &str,
    limit: usize,
) -> Result<Vec<MailItem>, StoreError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    (|| -> rusqlite::Result<Vec<MailItem>> {
        let tx = store
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let items = tx
            .prepare_cached(
                "SELECT id, payload, deliveries FROM mail
                 WHERE deployment = ?1 AND state = 'inbox' ORDER BY id LIMIT ?2",
            )?
            .query_map(params![deployment, limit], |r| {
                Ok(MailItem {
                    id: r.get(0)?,
                    payload: r.get(1)?,
                    // This delivery is the one the UPDATE below counts.
                    attempt: mail::attempt(r.get(2)?),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let Some(last) = items.last() else {
            return Ok(items);
        };
        // Exactly the rows just read: the head of the inbox up to `last`.
        tx.prepare_cached(
            "UPDATE mail SET state = 'processing', deliveries = deliveries + 1
             WHERE deployment = ?1 AND state = 'inbox' AND id <= ?2",
        )?
        .execute(params![deployment, last.id])?;
        tx.commit()?;
        Ok(items)
    })()
    .map_err(|e| store.read_fail("taking mail from the inbox", &e))
}

/// Marks processing item `id` of `deployment` done; `false` if it is not in
/// processing there.
pub(super) fn ack(
    store: &mut SqliteStore,
    deployment: &str,
    id: u64,
    outcome: &str,
    at_ms: u64,
) -> Result<bool, StoreError> {
    // No stored id is above i64::MAX, so such an ack is unknown.
    if i64::try_from(id).is_err() {
        return Ok(false);
    }
    (|| -> rusqlite::Result<bool> {
        let tx = store
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let changed = tx
            .prepare_cached(
                "UPDATE mail SET state = 'done', outcome = ?3, done_at_ms = ?4, payload = x''
                 WHERE id = ?1 AND deployment = ?2 AND state = 'processing'",
            )?
            .execute(params![id, deployment, outcome, at_ms])?;
        if changed != 1 {
            return Ok(false);
        }
        note(&tx, &mail::done_event(deployment, id, outcome, at_ms))?;
        tx.commit()?;
        Ok(true)
    })()
    .map_err(|e| store.fail("acknowledging mail", &e))
}

/// Adds an event row inside the caller's transaction.
fn note(tx: &rusqlite::Transaction<'_>, event: &NewEvent) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO events (at_ms, deployment, kind, body) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        event.at_ms,
        event.deployment,
        event.kind,
        event.body.to_string()
    ])?;
    Ok(())
}

/// Moves processing items back to the inbox: one deployment's, or every
/// deployment's when `deployment` is `None`.
pub(super) fn replay(store: &mut SqliteStore, deployment: Option<&str>) -> Result<u64, StoreError> {
    let changed = match deployment {
        Some(deployment) => store
            .conn
            .prepare_cached(
                "UPDATE mail SET state = 'inbox' WHERE deployment = ?1 AND state = 'processing'",
            )
            .and_then(|mut stmt| stmt.execute(params![deployment])),
        None => store
            .conn
            .prepare_cached("UPDATE mail SET state = 'inbox' WHERE state = 'processing'")
            .and_then(|mut stmt| stmt.execute([])),
    }
    .map_err(|e| store.fail("replaying unacknowledged mail", &e))?;
    Ok(u64::try_from(changed).unwrap_or(u64::MAX))
}

/// Most rows one prune transaction deletes, so it never holds the write
/// lock for long.
const PRUNE_BATCH: i64 = 5_000;

/// Deletes done items acknowledged before `done_before_ms`, with their
/// idempotency keys, in short transactions; returns how many went.
pub(super) fn prune_done(store: &mut SqliteStore, done_before_ms: u64) -> Result<u64, StoreError> {
    let cut = i64::try_from(done_before_ms).unwrap_or(i64::MAX);
    let mut total = 0u64;
    loop {
        let deleted = store
            .conn
            .prepare_cached(
                "DELETE FROM mail WHERE id IN (
                     SELECT id FROM mail WHERE state = 'done' AND done_at_ms < ?1 LIMIT ?2)",
            )
            .and_then(|mut stmt| stmt.execute(params![cut, PRUNE_BATCH]))
            .map_err(|e| store.fail("pruning done mail", &e))?;
        total += u64::try_from(deleted).unwrap_or(u64::MAX);
        if (deleted as i64) < PRUNE_BATCH {
            return Ok(total);
        }
    }
}

/// How many of `deployment`'s items are in each state.
pub(super) fn counts(store: &mut SqliteStore, deployment: &str) -> Result<MailCounts, StoreError> {
    store
        .conn
        .prepare_cached("SELECT inbox, processing, done FROM mail_counts WHERE deployment = ?1")
        .and_then(|mut stmt| {
            stmt.query_row(params![deployment], |r| {
                Ok(MailCounts {
                    inbox: r.get(0)?,
                    processing: r.get(1)?,
                    done: r.get(2)?,
                })
            })
            .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| store.read_fail("counting mail", &e))
}

#[cfg(test)]
/// Ids of `deployment`'s done items, ascending.
pub(super) fn done_ids(store: &mut SqliteStore, deployment: &str) -> Result<Vec<u64>, StoreError> {
    store
        .conn
        .prepare_cached("SELECT id FROM mail WHERE deployment = ?1 AND state = 'done' ORDER BY id")
        .and_then(|mut stmt| stmt.query_map(params![deployment], |r| r.get(0))?.collect())
        .map_err(|e| store.read_fail("listing done mail", &e))
}
