//! Mail in PostgreSQL (DESIGN §6): the same rows and states as SQLite's,
//! the same rules (`store::mail`). Enqueues for one deployment are
//! serialized by a row lock on its `mail_counts` row, so two senders never
//! both take the last slot and a deployment's ids grow in inbox order.
//! Transactions that write events take the event log's advisory lock
//! (see `events`).

use super::events::{EVENTS_LOCK, insert};
use super::{PostgresStore, col, fence, signed, unsigned};
use crate::store::mail::{self, Admission, Earlier};
use crate::store::{Accepted, MailCounts, MailItem, StoreError};

/// Accepts `payload` into `deployment`'s inbox as [`mail::admit`] rules.
pub(super) fn enqueue(
    store: &mut PostgresStore,
    deployment: &str,
    key: Option<&str>,
    payload: &[u8],
    max_inbox: u64,
    at_ms: u64,
) -> Result<Accepted, StoreError> {
    let digest = mail::payload_digest(key, payload);
    let client = store.client()?;
    let result = (|| -> Result<Result<Accepted, StoreError>, postgres::Error> {
        let mut tx = client.transaction()?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&EVENTS_LOCK])?;
        tx.execute(
            "INSERT INTO mail_counts (deployment) VALUES ($1) ON CONFLICT (deployment) DO NOTHING",
            &[&deployment],
        )?;
        let pending: i64 = tx
            .query_one(
                "SELECT inbox + processing FROM mail_counts WHERE deployment = $1 FOR UPDATE",
                &[&deployment],
            )?
            .try_get(0)?;
        let earlier = match key {
            Some(key) => tx
                .query_opt(
                    "SELECT id, payload_sha256 FROM mail WHERE deployment = $1 AND idempotency_key = $2",
                    &[&deployment, &key],
                )?
                .map(|r| -> Result<Earlier, postgres::Error> {
                    Ok(Earlier {
                        id: u64::try_from(r.try_get::<_, i64>(0)?).unwrap_or(0),
                        payload_sha256: r.try_get(1)?,
                    })
                })
                .transpose()?,
            None => None,
        };
        let pending = u64::try_from(pending).unwrap_or(0);
        // Dropping `tx` without a commit rolls back: nothing was written.
        match mail::admit(
            deployment,
            key,
            digest.as_ref(),
            earlier,
            pending,
            max_inbox,
        ) {
            Err(refused) => return Ok(Err(refused)),
            Ok(Admission::Existing(id)) => return Ok(Ok(Accepted { id, new: false })),
            Ok(Admission::Insert) => {}
        }
        let digest = digest.as_ref().map(|d| d.as_slice());
        let id: i64 = tx
            .query_one(
                "INSERT INTO mail (deployment, state, payload, enqueued_at_ms, idempotency_key, payload_sha256)
                 VALUES ($1, 'inbox', $2, $3, $4, $5) RETURNING id",
                &[&deployment, &payload, &signed(at_ms), &key, &digest],
            )?
            .try_get(0)?;
        let id = u64::try_from(id).unwrap_or(0);
        insert(&mut tx, &mail::accepted_event(deployment, id, at_ms))?;
        tx.commit()?;
        Ok(Ok(Accepted { id, new: true }))
    })();
    result.map_err(|e| store.fail("accepting mail", &e))?
}

/// Moves the first `limit` inbox items of `deployment` to processing and
/// returns them in FIFO order.
pub(super) fn take(
    store: &mut PostgresStore,
    deployment: &str,
    limit: usize,
) -> Result<Vec<MailItem>, StoreError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let fenced = store.fence.clone();
    let client = store.client()?;
    let result = (|| -> Result<Vec<(i64, Vec<u8>, i64)>, postgres::Error> {
        let mut tx = client.transaction()?;
        fence::check(&mut tx, fenced.as_deref(), deployment)?;
        let rows = tx.query(
            "SELECT id, payload, deliveries FROM mail
             WHERE deployment = $1 AND state = 'inbox' ORDER BY id LIMIT $2 FOR UPDATE",
            &[&deployment, &limit],
        )?;
        let items = rows
            .iter()
            .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
            .collect::<Result<Vec<(i64, Vec<u8>, i64)>, postgres::Error>>()?;
        if let Some(last) = items.last() {
            // Exactly the rows just read and locked: the head of the inbox.
            tx.execute(
                "UPDATE mail SET state = 'processing', deliveries = deliveries + 1
                 WHERE deployment = $1 AND state = 'inbox' AND id <= $2",
                &[&deployment, &last.0],
            )?;
        }
        tx.commit()?;
        Ok(items)
    })();
    let items = result.map_err(|e| store.fail("taking mail from the inbox", &e))?;
    items
        .into_iter()
        .map(|(id, payload, deliveries)| {
            Ok(MailItem {
                id: unsigned("mail", id)?,
                payload,
                // This delivery is the one the UPDATE counted.
                attempt: mail::attempt(deliveries),
            })
        })
        .collect::<Result<_, String>>()
        .map_err(|what| store.corrupt(what))
}

/// Marks processing item `id` of `deployment` done; `false` if it is not in
/// processing there.
pub(super) fn ack(
    store: &mut PostgresStore,
    deployment: &str,
    id: u64,
    outcome: &str,
    at_ms: u64,
) -> Result<bool, StoreError> {
    // No stored id is above i64::MAX, so such an ack is unknown.
    let Ok(row_id) = i64::try_from(id) else {
        return Ok(false);
    };
    let fenced = store.fence.clone();
    let client = store.client()?;
    let result = (|| -> Result<bool, postgres::Error> {
        let mut tx = client.transaction()?;
        fence::check(&mut tx, fenced.as_deref(), deployment)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&EVENTS_LOCK])?;
        let changed = tx.execute(
            "UPDATE mail SET state = 'done', outcome = $3, done_at_ms = $4, payload = ''::bytea
             WHERE id = $1 AND deployment = $2 AND state = 'processing'",
            &[&row_id, &deployment, &outcome, &signed(at_ms)],
        )?;
        if changed != 1 {
            return Ok(false);
        }
        insert(&mut tx, &mail::done_event(deployment, id, outcome, at_ms))?;
        tx.commit()?;
        Ok(true)
    })();
    result.map_err(|e| store.fail("acknowledging mail", &e))
}

/// Moves processing items back to the inbox: one deployment's, or every
/// deployment's when `deployment` is `None`.
pub(super) fn replay(
    store: &mut PostgresStore,
    deployment: Option<&str>,
) -> Result<u64, StoreError> {
    let fenced = store.fence.clone();
    let client = store.client()?;
    let changed = (|| -> Result<u64, postgres::Error> {
        let mut tx = client.transaction()?;
        let changed = match deployment {
            Some(deployment) => {
                fence::check(&mut tx, fenced.as_deref(), deployment)?;
                tx.execute(
                    "UPDATE mail SET state = 'inbox' WHERE deployment = $1 AND state = 'processing'",
                    &[&deployment],
                )?
            }
            // A fleet host replays a deployment when it takes its lease;
            // other hosts' children may be working on the rest.
            None if fenced.is_some() => 0,
            None => tx.execute(
                "UPDATE mail SET state = 'inbox' WHERE state = 'processing'",
                &[],
            )?,
        };
        tx.commit()?;
        Ok(changed)
    })();
    changed.map_err(|e| store.fail("replaying unacknowledged mail", &e))
}

/// Most rows one prune transaction deletes, so it never holds locks long.
const PRUNE_BATCH: i64 = 5_000;

/// Deletes done items acknowledged before `done_before_ms`, with their
/// idempotency keys, in short transactions; returns how many went.
pub(super) fn prune_done(
    store: &mut PostgresStore,
    done_before_ms: u64,
) -> Result<u64, StoreError> {
    let cut = signed(done_before_ms);
    let mut total = 0u64;
    loop {
        let deleted = store.client()?.execute(
            "DELETE FROM mail WHERE id IN (
                 SELECT id FROM mail WHERE state = 'done' AND done_at_ms < $1 LIMIT $2)",
            &[&cut, &PRUNE_BATCH],
        );
        let deleted = deleted.map_err(|e| store.fail("pruning done mail", &e))?;
        total += deleted;
        if deleted < PRUNE_BATCH as u64 {
            return Ok(total);
        }
    }
}

/// How many of `deployment`'s items are in each state.
pub(super) fn counts(
    store: &mut PostgresStore,
    deployment: &str,
) -> Result<MailCounts, StoreError> {
    let row = store.client()?.query_opt(
        "SELECT inbox, processing, done FROM mail_counts WHERE deployment = $1",
        &[&deployment],
    );
    let Some(row) = row.map_err(|e| store.fail("counting mail", &e))? else {
        return Ok(MailCounts::default());
    };
    let what = "mail_counts";
    (|| {
        Ok(MailCounts {
            inbox: unsigned(what, col(&row, 0)?)?,
            processing: unsigned(what, col(&row, 1)?)?,
            done: unsigned(what, col(&row, 2)?)?,
        })
    })()
    .map_err(|what| store.corrupt(what))
}

#[cfg(test)]
/// Ids of `deployment`'s done items, ascending.
pub(super) fn done_ids(
    store: &mut PostgresStore,
    deployment: &str,
) -> Result<Vec<u64>, StoreError> {
    let rows = store.client()?.query(
        "SELECT id FROM mail WHERE deployment = $1 AND state = 'done' ORDER BY id",
        &[&deployment],
    );
    let rows = rows.map_err(|e| store.fail("listing done mail", &e))?;
    Ok(rows
        .iter()
        .map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0))
        .collect())
}
