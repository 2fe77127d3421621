//! Mail in SQLite (DESIGN §6): one `mail` row per accepted item whose
//! `state` moves inbox → processing → done, and back to inbox on replay.
//! The inbox is ordered by id and a take always removes its head, so every
//! processing id is below every inbox id: replay puts items back at the
//! head in their original order with no reordering step.
//!
//! Acceptance and completion each write their event (`mail_accepted`,
//! `mail_done`) in the same transaction as the mail row, so the event log
//! can never miss or invent one, whatever kills the supervisor.

use rusqlite::{OptionalExtension, TransactionBehavior, params};
use sha2::{Digest, Sha256};

use super::SqliteStore;
use crate::store::{Accepted, MailCounts, MailItem, StoreError};

/// Accepts `payload` into `deployment`'s inbox unless `max_inbox` items
/// already wait there or in processing; the check and the insert share one
/// write transaction, so two senders cannot both take the last slot. A
/// `key` already used by this deployment answers with the earlier item
/// (whatever its state) before the limit is looked at: a retry of accepted
/// mail is never refused as busy.
pub(super) fn enqueue(
    store: &mut SqliteStore,
    deployment: &str,
    key: Option<&str>,
    payload: &[u8],
    max_inbox: u64,
    at_ms: u64,
) -> Result<Accepted, StoreError> {
    enum Outcome {
        Accepted(Accepted),
        Full,
        KeyReused(u64),
    }
    let fail = store.read_fail("accepting mail");
    let outcome = (|| -> rusqlite::Result<Outcome> {
        let tx = store
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let digest = key.map(|_| <[u8; 32]>::from(Sha256::digest(payload)));
        if let Some(key) = key {
            let earlier: Option<(u64, Option<Vec<u8>>)> = tx
                .prepare_cached(
                    "SELECT id, payload_sha256 FROM mail WHERE deployment = ?1 AND idempotency_key = ?2",
                )?
                .query_row(params![deployment, key], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            if let Some((id, earlier)) = earlier {
                return Ok(if earlier.as_deref() == digest.as_ref().map(|d| &d[..]) {
                    Outcome::Accepted(Accepted { id, new: false })
                } else {
                    Outcome::KeyReused(id)
                });
            }
        }
        let pending: u64 = tx
            .prepare_cached("SELECT inbox + processing FROM mail_counts WHERE deployment = ?1")?
            .query_row(params![deployment], |r| r.get(0))
            .optional()?
            .unwrap_or(0);
        if pending >= max_inbox {
            // Dropping `tx` rolls back: nothing was written anyway.
            return Ok(Outcome::Full);
        }
        let id: u64 = tx
            .prepare_cached(
                "INSERT INTO mail (deployment, state, payload, enqueued_at_ms, idempotency_key, payload_sha256)
                 VALUES (?1, 'inbox', ?2, ?3, ?4, ?5) RETURNING id",
            )?
            .query_row(params![deployment, payload, at_ms, key, digest], |r| r.get(0))?;
        note(
            &tx,
            at_ms,
            deployment,
            "mail_accepted",
            &serde_json::json!({ "id": id }),
        )?;
        tx.commit()?;
        Ok(Outcome::Accepted(Accepted { id, new: true }))
    })()
    .map_err(fail)?;
    match outcome {
        Outcome::Accepted(accepted) => Ok(accepted),
        Outcome::Full => Err(StoreError::InboxFull {
            deployment: deployment.to_owned(),
            limit: max_inbox,
        }),
        Outcome::KeyReused(id) => Err(StoreError::KeyReused {
            deployment: deployment.to_owned(),
            key: key.unwrap_or_default().to_owned(),
            id,
        }),
    }
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
    let fail = store.read_fail("taking mail from the inbox");
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
                let deliveries: i64 = r.get(2)?;
                Ok(MailItem {
                    id: r.get(0)?,
                    payload: r.get(1)?,
                    // This delivery is the one the UPDATE below counts.
                    attempt: u32::try_from(deliveries.saturating_add(1)).unwrap_or(u32::MAX),
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
    .map_err(fail)
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
    let fail = store.fail("acknowledging mail");
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
        let body = serde_json::json!({ "id": id, "outcome": outcome });
        note(&tx, at_ms, deployment, "mail_done", &body)?;
        tx.commit()?;
        Ok(true)
    })()
    .map_err(fail)
}

/// Adds an event row inside the caller's transaction.
fn note(
    tx: &rusqlite::Transaction<'_>,
    at_ms: u64,
    deployment: &str,
    kind: &str,
    body: &serde_json::Value,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO events (at_ms, deployment, kind, body) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![at_ms, deployment, kind, body.to_string()])?;
    Ok(())
}

/// Moves processing items back to the inbox: one deployment's, or every
/// deployment's when `deployment` is `None`.
pub(super) fn replay(store: &mut SqliteStore, deployment: Option<&str>) -> Result<u64, StoreError> {
    let fail = store.fail("replaying unacknowledged mail");
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
    .map_err(fail)?;
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
        let fail = store.fail("pruning done mail");
        let deleted = store
            .conn
            .prepare_cached(
                "DELETE FROM mail WHERE id IN (
                     SELECT id FROM mail WHERE state = 'done' AND done_at_ms < ?1 LIMIT ?2)",
            )
            .and_then(|mut stmt| stmt.execute(params![cut, PRUNE_BATCH]))
            .map_err(fail)?;
        total += u64::try_from(deleted).unwrap_or(u64::MAX);
        if (deleted as i64) < PRUNE_BATCH {
            return Ok(total);
        }
    }
}

/// How many of `deployment`'s items are in each state.
pub(super) fn counts(store: &mut SqliteStore, deployment: &str) -> Result<MailCounts, StoreError> {
    let fail = store.read_fail("counting mail");
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
        .map_err(fail)
}

#[cfg(test)]
/// Ids of `deployment`'s done items, ascending.
pub(super) fn done_ids(store: &mut SqliteStore, deployment: &str) -> Result<Vec<u64>, StoreError> {
    let fail = store.read_fail("listing done mail");
    store
        .conn
        .prepare_cached("SELECT id FROM mail WHERE deployment = ?1 AND state = 'done' ORDER BY id")
        .and_then(|mut stmt| stmt.query_map(params![deployment], |r| r.get(0))?.collect())
        .map_err(fail)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap, VecDeque};
    use std::path::{Path, PathBuf};

    use rusqlite::Connection;

    use super::*;
    use crate::store::Store;

    const MAX: u64 = 1_000;

    fn open(state: &Path) -> SqliteStore {
        SqliteStore::open(state).unwrap()
    }

    fn fresh() -> (tempfile::TempDir, PathBuf, SqliteStore) {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let store = open(&state);
        (dir, state, store)
    }

    fn send(store: &mut SqliteStore, deployment: &str, payload: &str) -> u64 {
        store
            .enqueue_mail(deployment, None, payload.as_bytes(), MAX, 1_700_000_000_000)
            .unwrap()
            .id
    }

    fn ids(items: &[MailItem]) -> Vec<u64> {
        items.iter().map(|m| m.id).collect()
    }

    fn counts(inbox: u64, processing: u64, done: u64) -> MailCounts {
        MailCounts {
            inbox,
            processing,
            done,
        }
    }

    /// Counts recomputed from the rows, to check the trigger-kept table.
    fn recount(store: &SqliteStore, deployment: &str) -> MailCounts {
        let n = |state: &str| -> u64 {
            store
                .conn
                .query_row(
                    "SELECT count(*) FROM mail WHERE deployment = ?1 AND state = ?2",
                    params![deployment, state],
                    |r| r.get(0),
                )
                .unwrap()
        };
        counts(n("inbox"), n("processing"), n("done"))
    }

    #[test]
    fn acceptance_and_completion_write_their_events_with_the_mail() {
        let (_dir, _path, mut store) = fresh();
        let id = send(&mut store, "d", "x");
        store.take_mail("d", 1).unwrap();
        assert!(store.ack_mail("d", id, "succeeded", 7).unwrap());
        assert!(
            !store.ack_mail("d", id, "succeeded", 8).unwrap(),
            "a duplicate ack writes no event"
        );
        let events = store.events_after(0, 10).unwrap();
        let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
        assert_eq!(kinds, ["mail_accepted", "mail_done"]);
        assert_eq!(events[1].body["id"], id);
        assert_eq!(events[1].body["outcome"], "succeeded");
        assert_eq!(events[1].deployment.as_deref(), Some("d"));
    }

    #[test]
    fn mail_is_taken_in_fifo_order_and_moves_to_processing() {
        let (_dir, _state, mut store) = fresh();
        let a = send(&mut store, "d", "a");
        let b = send(&mut store, "d", "b");
        let c = send(&mut store, "d", "c");
        assert!(a < b && b < c);
        assert_eq!(store.mail_counts("d").unwrap(), counts(3, 0, 0));

        let first = store.take_mail("d", 2).unwrap();
        assert_eq!(
            first,
            [
                MailItem {
                    id: a,
                    payload: b"a".to_vec(),
                    attempt: 1,
                },
                MailItem {
                    id: b,
                    payload: b"b".to_vec(),
                    attempt: 1,
                }
            ]
        );
        assert_eq!(store.mail_counts("d").unwrap(), counts(1, 2, 0));
        // Processing items are not handed out again.
        assert_eq!(ids(&store.take_mail("d", 10).unwrap()), [c]);
        assert!(store.take_mail("d", 10).unwrap().is_empty());
        assert!(store.take_mail("d", 0).unwrap().is_empty());
        assert_eq!(store.mail_counts("d").unwrap(), counts(0, 3, 0));
        assert_eq!(recount(&store, "d"), counts(0, 3, 0));
    }

    #[test]
    fn an_ack_counts_once_and_a_duplicate_or_unknown_ack_changes_nothing() {
        let (_dir, _state, mut store) = fresh();
        let a = send(&mut store, "d", "a");
        let b = send(&mut store, "d", "b");
        // Not yet sent to a child: nothing to acknowledge.
        assert!(!store.ack_mail("d", a, "ok", 5).unwrap());
        store.take_mail("d", 2).unwrap();
        // The wrong deployment cannot acknowledge it.
        assert!(!store.ack_mail("other", a, "ok", 5).unwrap());
        assert!(store.ack_mail("d", a, "ok", 5).unwrap());
        assert!(!store.ack_mail("d", a, "again", 6).unwrap());
        assert!(!store.ack_mail("d", 999, "ok", 5).unwrap());
        assert!(!store.ack_mail("d", u64::MAX, "ok", 5).unwrap());
        assert_eq!(store.mail_counts("d").unwrap(), counts(0, 1, 1));
        assert_eq!(store.mail_done_ids("d").unwrap(), [a]);
        // The first outcome stays; the payload is dropped once done.
        let (outcome, done_at, payload): (String, u64, Vec<u8>) = store
            .conn
            .query_row(
                "SELECT outcome, done_at_ms, payload FROM mail WHERE id = ?1",
                [a],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!((outcome.as_str(), done_at, payload.len()), ("ok", 5, 0));
        // A done item is never replayed.
        assert_eq!(store.replay_mail("d").unwrap(), 1);
        assert_eq!(ids(&store.take_mail("d", 10).unwrap()), [b]);
    }

    #[test]
    fn replay_puts_processing_back_at_the_head_in_original_order() {
        let (_dir, _state, mut store) = fresh();
        let sent: Vec<u64> = (0..5)
            .map(|i| send(&mut store, "d", &format!("m{i}")))
            .collect();
        assert_eq!(ids(&store.take_mail("d", 3).unwrap()), sent[..3]);
        // One of the three is acknowledged before the child dies.
        assert!(store.ack_mail("d", sent[1], "ok", 1).unwrap());
        // Newer mail arrives meanwhile.
        let later = send(&mut store, "d", "later");
        assert_eq!(store.replay_mail("d").unwrap(), 2);
        assert_eq!(store.replay_mail("d").unwrap(), 0);
        assert_eq!(store.mail_counts("d").unwrap(), counts(5, 0, 1));
        let again = store.take_mail("d", 10).unwrap();
        assert_eq!(ids(&again), [sent[0], sent[2], sent[3], sent[4], later]);
        assert_eq!(again[1].payload, b"m2");
    }

    #[test]
    fn replay_after_a_partial_retake_keeps_order() {
        let (_dir, _state, mut store) = fresh();
        let sent: Vec<u64> = (0..6).map(|_| send(&mut store, "d", "x")).collect();
        store.take_mail("d", 4).unwrap();
        store.replay_mail("d").unwrap();
        // The new child takes two, dies, and the rest are still behind.
        assert_eq!(ids(&store.take_mail("d", 2).unwrap()), sent[..2]);
        store.replay_mail("d").unwrap();
        assert_eq!(ids(&store.take_mail("d", 10).unwrap()), sent);
    }

    #[test]
    fn an_idempotency_key_accepts_once_per_deployment() {
        let (_dir, _state, mut store) = fresh();
        let first = store.enqueue_mail("d", Some("k1"), b"a", 2, 1).unwrap();
        assert!(first.new);
        store.enqueue_mail("d", None, b"b", 2, 1).unwrap();
        // The inbox is full now, and a retry still gets its answer.
        let again = Accepted {
            id: first.id,
            new: false,
        };
        assert_eq!(
            store.enqueue_mail("d", Some("k1"), b"a", 2, 1).unwrap(),
            again
        );
        // Whatever state the item is in.
        store.take_mail("d", 1).unwrap();
        assert!(store.ack_mail("d", first.id, "ok", 2).unwrap());
        assert_eq!(
            store.enqueue_mail("d", Some("k1"), b"a", 2, 1).unwrap(),
            again
        );
        // The same key with another payload is a mistake, named.
        let err = store
            .enqueue_mail("d", Some("k1"), b"other", 2, 1)
            .unwrap_err();
        let StoreError::KeyReused { id, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(*id, first.id);
        let msg = err.to_string();
        assert!(
            msg.contains("\"k1\"")
                && msg.contains("different payload")
                && msg.contains("nothing was accepted"),
            "{msg}"
        );
        // Keys belong to one deployment.
        let other = store.enqueue_mail("e", Some("k1"), b"a", 2, 1).unwrap();
        assert!(other.new && other.id != first.id);
        let count = |sql: &str| -> u64 { store.conn.query_row(sql, [], |r| r.get(0)).unwrap() };
        assert_eq!(count("SELECT count(*) FROM mail"), 3);
        assert_eq!(
            count("SELECT count(*) FROM events WHERE kind = 'mail_accepted'"),
            3
        );
    }

    #[test]
    fn pruning_deletes_only_done_mail_older_than_the_cut_and_frees_its_key() {
        let (_dir, _state, mut store) = fresh();
        let old = store.enqueue_mail("d", Some("k"), b"a", 9, 1).unwrap().id;
        let recent = send(&mut store, "d", "b");
        let waiting = send(&mut store, "d", "c");
        store.take_mail("d", 2).unwrap();
        assert!(store.ack_mail("d", old, "ok", 100).unwrap());
        assert!(store.ack_mail("d", recent, "ok", 200).unwrap());
        assert_eq!(
            store.prune_done_mail(100).unwrap(),
            0,
            "the cut is exclusive"
        );
        assert_eq!(store.prune_done_mail(150).unwrap(), 1);
        assert_eq!(store.mail_done_ids("d").unwrap(), [recent]);
        assert_eq!(store.mail_counts("d").unwrap(), counts(1, 0, 1));
        // Inbox and processing are never pruned, however old.
        assert_eq!(store.prune_done_mail(u64::MAX).unwrap(), 1);
        assert_eq!(ids(&store.take_mail("d", 9).unwrap()), [waiting]);
        // The pruned item's key may be used again.
        assert!(store.enqueue_mail("d", Some("k"), b"z", 9, 1).unwrap().new);
    }

    #[test]
    fn a_full_inbox_refuses_and_writes_nothing() {
        let (_dir, _state, mut store) = fresh();
        let a = store.enqueue_mail("d", None, b"a", 2, 1).unwrap().id;
        store.enqueue_mail("d", None, b"b", 2, 1).unwrap();
        store.take_mail("d", 1).unwrap();
        // Processing counts against the limit too.
        let err = store.enqueue_mail("d", None, b"c", 2, 1).unwrap_err();
        let StoreError::InboxFull { deployment, limit } = &err else {
            panic!("{err}");
        };
        assert_eq!((deployment.as_str(), *limit), ("d", 2));
        let msg = err.to_string();
        assert!(
            msg.contains("deployment d is busy") && msg.contains("2 mail items"),
            "{msg}"
        );
        assert!(
            msg.contains("retry later") && msg.contains("raise max_inbox"),
            "{msg}"
        );
        let rows: u64 = store
            .conn
            .query_row("SELECT count(*) FROM mail", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 2);
        assert_eq!(store.mail_counts("d").unwrap(), counts(1, 1, 0));
        // Other deployments have their own limit.
        store.enqueue_mail("e", None, b"e", 2, 1).unwrap();
        // Done mail does not count: acking frees a slot.
        assert!(store.ack_mail("d", a, "ok", 2).unwrap());
        store.enqueue_mail("d", None, b"c", 2, 1).unwrap();
        // A zero limit accepts nothing.
        assert!(matches!(
            store.enqueue_mail("z", None, b"", 0, 1),
            Err(StoreError::InboxFull { limit: 0, .. })
        ));
        assert_eq!(store.mail_counts("z").unwrap(), MailCounts::default());
    }

    #[test]
    fn ids_increase_across_deployments_and_are_never_reused() {
        let (_dir, state, mut store) = fresh();
        let mut all = Vec::new();
        for i in 0..9 {
            all.push(send(&mut store, ["a", "b", "c"][i % 3], "x"));
        }
        // Even when the newest rows are pruned (a retention job).
        store.conn.execute("DELETE FROM mail", []).unwrap();
        assert_eq!(store.mail_counts("a").unwrap(), MailCounts::default());
        drop(store);
        let mut store = open(&state);
        all.push(send(&mut store, "b", "x"));
        assert!(all.windows(2).all(|w| w[0] < w[1]), "{all:?}");
    }

    #[test]
    fn replay_all_covers_every_deployment() {
        let (_dir, _state, mut store) = fresh();
        let a1 = send(&mut store, "a", "1");
        let b1 = send(&mut store, "b", "1");
        let a2 = send(&mut store, "a", "2");
        let b2 = send(&mut store, "b", "2");
        store.take_mail("a", 10).unwrap();
        store.take_mail("b", 1).unwrap();
        assert_eq!(store.replay_all_mail().unwrap(), 3);
        assert_eq!(store.replay_all_mail().unwrap(), 0);
        assert_eq!(store.mail_counts("a").unwrap(), counts(2, 0, 0));
        assert_eq!(store.mail_counts("b").unwrap(), counts(2, 0, 0));
        assert_eq!(ids(&store.take_mail("a", 10).unwrap()), [a1, a2]);
        assert_eq!(ids(&store.take_mail("b", 10).unwrap()), [b1, b2]);
        // Replaying one deployment leaves the other's in processing.
        assert_eq!(store.replay_mail("a").unwrap(), 2);
        assert_eq!(store.mail_counts("b").unwrap(), counts(0, 2, 0));
    }

    #[test]
    fn mail_in_flight_survives_a_supervisor_crash() {
        let (_dir, state, mut store) = fresh();
        let sent: Vec<u64> = (0..4).map(|_| send(&mut store, "d", "x")).collect();
        store.take_mail("d", 3).unwrap();
        assert!(store.ack_mail("d", sent[0], "ok", 1).unwrap());
        drop(store);
        let mut store = open(&state);
        assert_eq!(store.mail_counts("d").unwrap(), counts(1, 2, 1));
        assert_eq!(store.replay_all_mail().unwrap(), 2);
        assert_eq!(ids(&store.take_mail("d", 10).unwrap()), sent[1..]);
        assert_eq!(store.mail_done_ids("d").unwrap(), [sent[0]]);
    }

    #[test]
    fn a_v1_database_gains_mail_and_keeps_its_journal() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(super::super::DB_FILE);
        let conn = Connection::open(&db).unwrap();
        conn.execute_batch(super::super::MIGRATIONS[0]).unwrap();
        conn.execute_batch(
            "INSERT INTO children VALUES (7, 'd', 1, 'c', 2); PRAGMA user_version = 1;",
        )
        .unwrap();
        drop(conn);
        let mut store = SqliteStore::open(dir.path()).unwrap();
        assert_eq!(store.children().unwrap().len(), 1);
        send(&mut store, "d", "x");
        assert_eq!(store.mail_counts("d").unwrap(), counts(1, 0, 0));
    }

    /// A tiny deterministic generator (xorshift64*), so the random test
    /// replays exactly from its seed.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
        }
    }

    /// What the store should hold for one deployment.
    #[derive(Default)]
    struct Model {
        inbox: VecDeque<u64>,
        processing: Vec<u64>,
        done: BTreeSet<u64>,
        accepted: Vec<u64>,
    }

    impl Model {
        fn counts(&self) -> MailCounts {
            counts(
                self.inbox.len() as u64,
                self.processing.len() as u64,
                self.done.len() as u64,
            )
        }

        fn replay(&mut self) -> u64 {
            let n = self.processing.len() as u64;
            // Processing ids are all below inbox ids: back at the head.
            for id in self.processing.drain(..).rev() {
                assert!(self.inbox.front().is_none_or(|&head| id < head));
                self.inbox.push_front(id);
            }
            n
        }
    }

    #[test]
    fn random_histories_end_with_every_accepted_id_done_exactly_once() {
        const DEPLOYMENTS: [&str; 3] = ["a", "b", "c"];
        // How often the interesting cases happened, so the test cannot
        // pass by never reaching them.
        let (mut full, mut replayed, mut stray_acks, mut restarts) = (0, 0, 0, 0);
        for seed in 1..=10u64 {
            let (_dir, state, mut store) = fresh();
            let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
            let mut models: HashMap<&str, Model> = HashMap::new();
            let mut last_id = 0;
            for step in 0..400 {
                let d = DEPLOYMENTS[rng.below(3) as usize];
                let ctx = format!("seed {seed} step {step} deployment {d}");
                let m = models.entry(d).or_default();
                match rng.below(100) {
                    0..40 => {
                        let max_inbox = 1 + rng.below(12);
                        let pending = (m.inbox.len() + m.processing.len()) as u64;
                        match store.enqueue_mail(
                            d,
                            None,
                            &step.to_string().into_bytes(),
                            max_inbox,
                            step,
                        ) {
                            Ok(Accepted { id, new }) => {
                                assert!(new && pending < max_inbox, "{ctx}");
                                assert!(id > last_id, "{ctx}");
                                last_id = id;
                                m.inbox.push_back(id);
                                m.accepted.push(id);
                            }
                            Err(StoreError::InboxFull { .. }) => {
                                assert!(pending >= max_inbox, "{ctx}");
                                full += 1;
                            }
                            Err(e) => panic!("{ctx}: {e}"),
                        }
                    }
                    40..65 => {
                        let limit = rng.below(5) as usize;
                        let got = store.take_mail(d, limit).unwrap();
                        let want: Vec<u64> = m.inbox.drain(..limit.min(m.inbox.len())).collect();
                        assert_eq!(ids(&got), want, "{ctx}");
                        m.processing.extend(want);
                    }
                    65..90 => {
                        // Mostly a real ack; sometimes a duplicate or a
                        // stray one.
                        let id = match (m.processing.len(), rng.below(4)) {
                            (0, _) | (_, 0) => m.accepted.first().copied().unwrap_or(1),
                            (n, _) => m.processing[rng.below(n as u64) as usize],
                        };
                        let expect = m.processing.contains(&id);
                        assert_eq!(store.ack_mail(d, id, "ok", step).unwrap(), expect, "{ctx}");
                        if !expect {
                            stray_acks += 1;
                        } else {
                            m.processing.retain(|&p| p != id);
                            assert!(m.done.insert(id), "{ctx}");
                        }
                    }
                    90..96 => {
                        let want = m.replay();
                        replayed += want;
                        assert_eq!(store.replay_mail(d).unwrap(), want, "{ctx}");
                    }
                    96..98 => {
                        let want: u64 = models.values_mut().map(Model::replay).sum();
                        replayed += want;
                        assert_eq!(store.replay_all_mail().unwrap(), want, "{ctx}");
                    }
                    _ => {
                        // The supervisor dies and restarts.
                        drop(store);
                        store = open(&state);
                        restarts += 1;
                        let want: u64 = models.values_mut().map(Model::replay).sum();
                        replayed += want;
                        assert_eq!(store.replay_all_mail().unwrap(), want, "{ctx}");
                    }
                }
                for (d, m) in &models {
                    assert_eq!(store.mail_counts(d).unwrap(), m.counts(), "{ctx}: {d}");
                }
            }
            // Drain everything: replay, take all, ack all.
            for d in DEPLOYMENTS {
                store.replay_mail(d).unwrap();
                for item in store.take_mail(d, usize::MAX).unwrap() {
                    assert!(store.ack_mail(d, item.id, "ok", 0).unwrap());
                }
                let m = models.remove(d).unwrap_or_default();
                assert_eq!(
                    store.mail_done_ids(d).unwrap(),
                    m.accepted,
                    "seed {seed} {d}"
                );
                let n = m.accepted.len() as u64;
                assert_eq!(store.mail_counts(d).unwrap(), counts(0, 0, n));
                assert_eq!(recount(&store, d), counts(0, 0, n));
            }
        }
        assert!(full > 20, "the inbox limit was hit {full} times");
        assert!(replayed > 50, "{replayed} items replayed");
        assert!(stray_acks > 50, "{stray_acks} stray acks");
        assert!(restarts > 5, "{restarts} restarts");
    }
}
