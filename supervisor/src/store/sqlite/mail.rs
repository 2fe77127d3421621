//! Mail in SQLite (DESIGN §6): one `mail` row per accepted item whose
//! `state` moves inbox → processing → done (or back to inbox, or to dead,
//! when its holder ends) as `store::mail` and `store::held` say, and one
//! `mail_history` row per delivery. The rules are theirs; states are
//! literals in the SQL so the partial index on held rows is usable. Each
//! operation is one transaction, so an event is never written without its
//! mail row or the other way round.

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use wfhost_policy::item::{self, Fate, Held, Holding, OnCancel};

use crate::store::mail::{self, Admission, Earlier};
use crate::store::questions::{Asking, OPEN_QUESTION};
use crate::store::{
    Accepted, AckOf, CancelFound, DeadMail, Ending, Holder, Landed, MailCounts, MailItem,
    MailStore, NewEvent, Offer, Replayed, Settle, StoreError,
};

impl MailStore for SqliteStore {
    /// Offers accepted into their deployments' inboxes as [`mail::admit`]
    /// rules, in one write transaction (one commit): the look-ups and the
    /// insert of each share it, so two senders cannot both take the last slot;
    /// each offer is admitted on its own, a refused one writing nothing.
    fn enqueue_mail_many(
        &mut self,
        offers: &[Offer],
    ) -> Result<Vec<Result<Accepted, StoreError>>, StoreError> {
        let mut committing = false;
        (|| -> rusqlite::Result<Vec<Result<Accepted, StoreError>>> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let mut answers = Vec::with_capacity(offers.len());
            for offer in offers {
                answers.push(enqueue_in(&tx, offer)?);
            }
            // Dropping `tx` without a commit rolls back: nothing was written.
            if answers.iter().any(|a| a.as_ref().is_ok_and(|a| a.new)) {
                committing = true;
                tx.commit()?;
            }
            Ok(answers)
        })()
        .map_err(|e| {
            let e = self.read_fail("accepting mail", &e);
            // Before the commit nothing was written; at it, who knows.
            if committing { e.at_commit() } else { e }
        })
    }

    /// Moves items from the head of `deployment`'s inbox to processing, held
    /// by `holder`, as [`item::takeable`] allows, and returns them in FIFO
    /// order; each take begins a delivery in the history.
    fn take_mail_for(
        &mut self,
        deployment: &str,
        holder: &Holder,
        limit: usize,
        at_ms: u64,
        starts_on_take: bool,
    ) -> Result<Vec<MailItem>, StoreError> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let head = i64::try_from(limit).unwrap_or(i64::MAX);
        (|| -> rusqlite::Result<Vec<MailItem>> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let holding = tx
                .prepare_cached(
                    "SELECT count(*), coalesce(max(failures > 0), 0) FROM mail
                     WHERE deployment = ?1 AND state = 'processing' AND holder_channel = ?2",
                )?
                .query_row(params![deployment, holder.channel_id], |r| {
                    Ok(Holding {
                        items: r.get(0)?,
                        suspect: r.get(1)?,
                    })
                })?;
            let rows = tx
                .prepare_cached(
                    "SELECT id, payload, starts, failures, deadline_ms,
                         coalesce(first_taken_at_ms, ?3) FROM mail
                     WHERE deployment = ?1 AND state = 'inbox' AND awaiting = 0
                     ORDER BY id LIMIT ?2",
                )?
                .query_map(params![deployment, head, at_ms], |r| {
                    Ok((
                        MailItem {
                            id: r.get(0)?,
                            payload: r.get(1)?,
                            // The start this delivery is, or may become.
                            attempt: mail::attempt(r.get(2)?),
                            deadline_ms: r.get(4)?,
                            first_taken_at_ms: r.get(5)?,
                        },
                        r.get::<_, u32>(3)?,
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let n = item::takeable(holding, rows.iter().map(|(_, f)| *f), limit);
            let items: Vec<MailItem> = rows.into_iter().take(n).map(|(item, _)| item).collect();
            let Some(last) = items.last() else {
                return Ok(items);
            };
            // Exactly the rows just read: the head of the inbox up to `last`.
            tx.prepare_cached(
                "UPDATE mail SET state = 'processing', deliveries = deliveries + 1,
                     holder_channel = ?3, holder_pid = ?4, taken_at_ms = ?5,
                     started = ?6, starts = starts + ?6,
                     first_taken_at_ms = coalesce(first_taken_at_ms, ?5)
                 WHERE deployment = ?1 AND state = 'inbox' AND awaiting = 0 AND id <= ?2",
            )?
            .execute(params![
                deployment,
                last.id,
                holder.channel_id,
                holder.pid,
                at_ms,
                starts_on_take
            ])?;
            let mut begun = tx.prepare_cached(
                "INSERT INTO mail_history (mail_id, attempt, holder_pid, holder_channel, taken_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )?;
            for item in &items {
                begun.execute(params![
                    item.id,
                    item.attempt,
                    holder.pid,
                    holder.channel_id,
                    at_ms
                ])?;
            }
            drop(begun);
            tx.commit()?;
            Ok(items)
        })()
        .map_err(|e| self.read_fail("taking mail from the inbox", &e))
    }

    /// Several acknowledgements in one write transaction: one commit.
    fn settle_mail(
        &mut self,
        deployment: &str,
        writes: &[Settle],
        at_ms: u64,
    ) -> Result<Vec<Landed>, StoreError> {
        let written = |yes: bool| {
            if yes {
                Landed::Written
            } else {
                Landed::Ignored
            }
        };
        (|| -> rusqlite::Result<Vec<Landed>> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let mut landed = Vec::with_capacity(writes.len());
            for w in writes {
                landed.push(match w {
                    Settle::Started { holder, id } => {
                        written(start_in(&tx, deployment, holder, *id)?)
                    }
                    Settle::Done(a) => written(ack_in(&tx, deployment, a, at_ms)?),
                    Settle::Asked(q) => ask_in(&tx, deployment, q, at_ms)?,
                    Settle::GivenBack { holder, id } => {
                        written(give_back_in(&tx, deployment, holder, *id, at_ms)?)
                    }
                    Settle::Unsent { holder, id } => {
                        written(unsent_in(&tx, deployment, holder, *id, at_ms)?)
                    }
                });
            }
            if landed.iter().any(Landed::held) {
                tx.commit()?;
            }
            Ok(landed)
        })()
        .map_err(|e| self.fail("acknowledging mail", &e))
    }

    /// Item `id`, held by `holder`, ends failed.
    fn fail_held_mail(
        &mut self,
        deployment: &str,
        holder: &Holder,
        id: u64,
        reason: &str,
        at_ms: u64,
    ) -> Result<bool, StoreError> {
        if i64::try_from(id).is_err() {
            return Ok(false);
        }
        let outcome = format!("failed: {reason}");
        (|| -> rusqlite::Result<bool> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let changed = tx
                .prepare_cached(
                    "UPDATE mail SET state = 'done', outcome = ?4, done_at_ms = ?5, payload = x'',
                         result = x'', holder_channel = NULL, holder_pid = NULL
                     WHERE id = ?1 AND deployment = ?2 AND state = 'processing'
                       AND holder_channel = ?3",
                )?
                .execute(params![id, deployment, holder.channel_id, outcome, at_ms])?;
            if changed != 1 {
                return Ok(false);
            }
            end_delivery(&tx, id, at_ms, &item::done_how(&outcome))?;
            note(&tx, &mail::done_event(deployment, id, &outcome, at_ms))?;
            tx.commit()?;
            Ok(true)
        })()
        .map_err(|e| self.fail("failing mail past its deadline", &e))
    }

    /// A cancel of item `id`, decided in one transaction.
    fn cancel_mail(
        &mut self,
        id: u64,
        reason: &str,
        by: &str,
        at_ms: u64,
    ) -> Result<Option<CancelFound>, StoreError> {
        if i64::try_from(id).is_err() {
            return Ok(None);
        }
        (|| -> rusqlite::Result<Option<CancelFound>> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            type Row = (String, String, Option<String>, Option<u32>, Option<String>);
            let row: Option<Row> = tx
                .prepare_cached(
                    "SELECT deployment, state, holder_channel, holder_pid, outcome FROM mail WHERE id = ?1",
                )?
                .query_row(params![id], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })
                .optional()?;
            let Some((deployment, state, channel, pid, outcome)) = row else {
                return Ok(None);
            };
            let found = match (item::on_cancel(&state), channel, pid) {
                (OnCancel::EndNow, _, _) => {
                    tx.prepare_cached(
                        "UPDATE mail SET state = 'done', outcome = ?2, done_at_ms = ?3, payload = x'',
                             result = x''
                         WHERE id = ?1",
                    )?
                    .execute(params![id, item::CANCELLED, at_ms])?;
                    tx.prepare_cached(
                        "INSERT INTO mail_history (mail_id, ended_at_ms, how) VALUES (?1, ?2, ?3)",
                    )?
                    .execute(params![id, at_ms, item::cancelled_queued_how(by, reason)])?;
                    note(&tx, &mail::done_event(&deployment, id, item::CANCELLED, at_ms))?;
                    CancelFound::Queued { deployment }
                }
                (OnCancel::Record, Some(channel_id), Some(pid)) => {
                    tx.prepare_cached("UPDATE mail SET cancel_reason = ?2 WHERE id = ?1")?
                        .execute(params![id, reason])?;
                    CancelFound::Held {
                        deployment,
                        holder: Holder { channel_id, pid },
                    }
                }
                _ => CancelFound::Ended {
                    how: item::ended_as(&state, outcome.as_deref()),
                    deployment,
                },
            };
            tx.commit()?;
            Ok(Some(found))
        })()
        .map_err(|e| self.fail("cancelling mail", &e))
    }

    /// Returns what `holder` holds in `deployment` after its `ending`: back to
    /// the inbox, or dead, as [`item::after_ending`] rules.
    fn replay_mail(
        &mut self,
        deployment: &str,
        holder: &Holder,
        ending: &Ending,
        max_deliveries: u32,
    ) -> Result<Replayed, StoreError> {
        (|| -> rusqlite::Result<Replayed> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let held_items = tx
                .prepare_cached(&format!(
                    "SELECT id, failures, started, cancel_reason IS NOT NULL, {OPEN_QUESTION}
                         FROM mail
                         WHERE deployment = ?1 AND state = 'processing' AND holder_channel = ?2
                         ORDER BY id"
                ))?
                .query_map(params![deployment, holder.channel_id], |r| {
                    Ok((
                        r.get::<_, u64>(0)?,
                        Held {
                            failures: r.get(1)?,
                            started: r.get(2)?,
                            cancel_asked: r.get(3)?,
                            awaiting: r.get(4)?,
                        },
                    ))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut replayed = Replayed::default();
            for (id, held) in held_items {
                let (failures, started) = (held.failures, held.started);
                let fate = item::after_ending(held, ending.counts, max_deliveries, ending.hold);
                let how = item::ended_how(&ending.cause, fate, ending.counts, started);
                let counted = ending.counts && started;
                if fate == Fate::Cancelled {
                    cancel_held(&tx, deployment, id, ending.at_ms)?;
                } else if fate == Fate::Interrupted {
                    tx.prepare_cached(
                        "UPDATE mail SET state = 'interrupted', holder_channel = NULL,
                             holder_pid = NULL, started = 0, last_cause = ?2, last_pid = ?3,
                             last_failed_at_ms = ?4
                         WHERE id = ?1",
                    )?
                    .execute(params![
                        id,
                        ending.cause,
                        holder.pid,
                        ending.at_ms
                    ])?;
                } else if fate == Fate::Awaiting {
                    tx.prepare_cached(
                        "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                             started = 0, awaiting = 1
                         WHERE id = ?1",
                    )?
                    .execute(params![id])?;
                } else if counted {
                    let (state, failures, dead_at) = match fate {
                        Fate::Dead(f) => ("dead", f, Some(ending.at_ms)),
                        Fate::Inbox(f) => ("inbox", f, None),
                        Fate::Cancelled | Fate::Interrupted | Fate::Awaiting => {
                            ("inbox", failures, None)
                        }
                    };
                    tx.prepare_cached(
                        "UPDATE mail SET state = ?2, failures = ?3, holder_channel = NULL,
                             holder_pid = NULL, last_cause = ?4, last_pid = ?5,
                             last_failed_at_ms = ?6, dead_at_ms = ?7, started = 0
                         WHERE id = ?1",
                    )?
                    .execute(params![
                        id,
                        state,
                        failures,
                        ending.cause,
                        holder.pid,
                        ending.at_ms,
                        dead_at
                    ])?;
                } else {
                    tx.prepare_cached(
                        "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                             started = 0
                         WHERE id = ?1",
                    )?
                    .execute(params![id])?;
                }
                end_delivery(&tx, id, ending.at_ms, &how)?;
                match fate {
                    Fate::Inbox(_) | Fate::Awaiting => replayed.returned += 1,
                    Fate::Cancelled => replayed.cancelled += 1,
                    Fate::Interrupted => replayed.interrupted.push(id),
                    Fate::Dead(failures) => replayed.dead.push(DeadMail {
                        id,
                        failures,
                        cause: ending.cause.clone(),
                        pid: holder.pid,
                    }),
                }
            }
            tx.commit()?;
            Ok(replayed)
        })()
        .map_err(|e| self.read_fail("returning unacknowledged mail", &e))
    }

    /// Every processing item of every deployment back to the inbox, not
    /// counted; returns how many.
    fn replay_all_mail_holding(&mut self, at_ms: u64, hold: &[String]) -> Result<u64, StoreError> {
        (|| -> rusqlite::Result<u64> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            // What a committed cancel named ends cancelled, not returned.
            let cancelled: Vec<(u64, String)> = tx
                .prepare_cached(
                    "SELECT id, deployment FROM mail
                     WHERE state = 'processing' AND cancel_reason IS NOT NULL ORDER BY id",
                )?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<_>>()?;
            let gone = item::SUPERVISOR_GONE;
            let how = item::ended_how(gone, Fate::Cancelled, false, true);
            for (id, deployment) in &cancelled {
                cancel_held(&tx, deployment, *id, at_ms)?;
                end_delivery(&tx, *id, at_ms, &how)?;
            }
            // A deployment that holds: its started items wait for an operator.
            let held_how = item::ended_how(gone, Fate::Interrupted, false, true);
            for deployment in hold {
                // (Not one waiting for an answer: that waits for its answer.)
                tx.prepare_cached(&format!(
                    "UPDATE mail_history SET ended_at_ms = ?1, how = ?2
                     WHERE ended_at_ms IS NULL AND attempt IS NOT NULL
                       AND mail_id IN (SELECT id FROM mail WHERE state = 'processing'
                                       AND started = 1 AND deployment = ?3
                                       AND NOT {OPEN_QUESTION})"
                ))?
                .execute(params![at_ms, held_how, deployment])?;
                tx.prepare_cached(&format!(
                    "UPDATE mail SET state = 'interrupted', holder_channel = NULL,
                         holder_pid = NULL, started = 0, last_cause = ?2
                     WHERE state = 'processing' AND started = 1 AND deployment = ?1
                       AND NOT {OPEN_QUESTION}"
                ))?
                .execute(params![deployment, gone])?;
            }
            tx.prepare_cached(
                "UPDATE mail_history SET ended_at_ms = ?1, how = ?2
                 WHERE ended_at_ms IS NULL AND attempt IS NOT NULL
                   AND mail_id IN (SELECT id FROM mail WHERE state = 'processing')",
            )?
            .execute(params![at_ms, item::RETURNED_AT_START])?;
            let changed = tx
                .prepare_cached(&format!(
                    "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                         started = 0, awaiting = {OPEN_QUESTION}
                     WHERE state = 'processing'"
                ))?
                .execute([])?;
            tx.commit()?;
            Ok(u64::try_from(changed).unwrap_or(u64::MAX))
        })()
        .map_err(|e| self.fail("replaying unacknowledged mail", &e))
    }

    /// Deletes done items acknowledged before `done_before_ms`, with their
    /// idempotency keys and histories, in short transactions; returns how
    /// many went.
    fn prune_done_mail(&mut self, done_before_ms: u64) -> Result<u64, StoreError> {
        let cut = i64::try_from(done_before_ms).unwrap_or(i64::MAX);
        let mut total = 0u64;
        loop {
            let deleted = delete_batch(
                self,
                "SELECT id FROM mail WHERE state = 'done' AND done_at_ms < ?1 ORDER BY id LIMIT ?2",
                params![cut, PRUNE_BATCH],
            )
            .map_err(|e| self.fail("pruning done mail", &e))?;
            total += deleted;
            if deleted < PRUNE_BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// How many of `deployment`'s items are in each state.
    fn mail_counts(&mut self, deployment: &str) -> Result<MailCounts, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT c.inbox, c.processing, c.done, c.dead,
                     (SELECT count(*) FROM mail
                      WHERE deployment = ?1 AND state = 'processing' AND started = 1),
                     c.interrupted,
                     (SELECT count(*) FROM mail
                      WHERE deployment = ?1 AND awaiting = 1 AND state = 'inbox'),
                     q.n, q.oldest
                 FROM mail_counts c,
                     (SELECT count(*) AS n, min(q.asked_at_ms) AS oldest
                      FROM questions q JOIN mail m ON m.id = q.mail_id
                      WHERE q.deployment = ?1 AND q.answer IS NULL
                        AND m.state IN ('inbox', 'processing', 'interrupted')) q
                 WHERE c.deployment = ?1",
            )
            .and_then(|mut stmt| {
                stmt.query_row(params![deployment], |r| {
                    Ok(MailCounts {
                        inbox: r.get(0)?,
                        processing: r.get(1)?,
                        working: r.get(4)?,
                        done: r.get(2)?,
                        dead: r.get(3)?,
                        interrupted: r.get(5)?,
                        awaiting: r.get(6)?,
                        questions_open: r.get(7)?,
                        oldest_question_at_ms: r.get(8)?,
                    })
                })
                .optional()
            })
            .map(Option::unwrap_or_default)
            .map_err(|e| self.read_fail("counting mail", &e))
    }

    #[cfg(test)]
    /// Ids of `deployment`'s done items, ascending.
    fn mail_done_ids(&mut self, deployment: &str) -> Result<Vec<u64>, StoreError> {
        self.conn
            .prepare_cached(
                "SELECT id FROM mail WHERE deployment = ?1 AND state = 'done' ORDER BY id",
            )
            .and_then(|mut stmt| stmt.query_map(params![deployment], |r| r.get(0))?.collect())
            .map_err(|e| self.read_fail("listing done mail", &e))
    }
}

/// One offer inside the caller's transaction.
fn enqueue_in(
    tx: &rusqlite::Connection,
    offer: &Offer,
) -> rusqlite::Result<Result<Accepted, StoreError>> {
    let (deployment, key) = (offer.deployment.as_str(), offer.key.as_deref());
    let digest = mail::payload_digest(key, &offer.payload);
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
    let admitted = mail::admit(
        deployment,
        key,
        digest.as_ref(),
        earlier,
        pending,
        offer.max_inbox,
    );
    match admitted {
        Err(refused) => return Ok(Err(refused)),
        Ok(Admission::Existing(id)) => return Ok(Ok(Accepted { id, new: false })),
        Ok(Admission::Insert) => {}
    }
    let id: u64 = tx
        .prepare_cached(
            "INSERT INTO mail (deployment, state, payload, enqueued_at_ms, idempotency_key, payload_sha256,
                               deadline_ms)
             VALUES (?1, 'inbox', ?2, ?3, ?4, ?5, ?6) RETURNING id",
        )?
        .query_row(
            params![
                deployment,
                offer.payload,
                offer.at_ms,
                key,
                digest,
                offer.deadline_ms
            ],
            |r| r.get(0),
        )?;
    note(tx, &mail::accepted_event(deployment, id, offer.at_ms))?;
    Ok(Ok(Accepted { id, new: true }))
}

/// One acknowledgement inside the caller's transaction.
fn ack_in(
    tx: &rusqlite::Connection,
    deployment: &str,
    a: &AckOf,
    at_ms: u64,
) -> rusqlite::Result<bool> {
    // No stored id is above i64::MAX, so such an ack is unknown.
    if i64::try_from(a.id).is_err() {
        return Ok(false);
    }
    let changed = tx
        .prepare_cached(
            "UPDATE mail SET state = 'done', outcome = ?4, done_at_ms = ?5, payload = x'',
                 holder_channel = NULL, holder_pid = NULL, result = ?6,
                 starts = starts + (1 - started), started = 1
             WHERE id = ?1 AND deployment = ?2 AND state = 'processing' AND holder_channel = ?3",
        )?
        .execute(params![
            a.id,
            deployment,
            a.holder.channel_id,
            a.outcome,
            at_ms,
            a.result
        ])?;
    if changed != 1 {
        return Ok(false);
    }
    end_delivery(tx, a.id, at_ms, &item::done_how(&a.outcome))?;
    note(tx, &mail::done_event(deployment, a.id, &a.outcome, at_ms))?;
    Ok(true)
}

/// A held item whose cancel was recorded, its holder gone: done,
/// cancelled, never run again (the caller ends its delivery).
fn cancel_held(
    tx: &rusqlite::Connection,
    deployment: &str,
    id: u64,
    at_ms: u64,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE mail SET state = 'done', outcome = ?2, done_at_ms = ?3, payload = x'',
             result = x'', holder_channel = NULL, holder_pid = NULL, started = 0
         WHERE id = ?1",
    )?
    .execute(params![id, item::CANCELLED, at_ms])?;
    note(
        tx,
        &mail::done_event(deployment, id, item::CANCELLED, at_ms),
    )
}

/// A question of item `id`'s handler, held by `asking.holder`: stored
/// once per (item, key), with the attempt that first asked it; asked
/// again, its stored answer, if any, comes back.
fn ask_in(
    tx: &rusqlite::Connection,
    deployment: &str,
    asking: &Asking,
    at_ms: u64,
) -> rusqlite::Result<Landed> {
    let Ok(id) = i64::try_from(asking.id) else {
        return Ok(Landed::Ignored);
    };
    let starts: Option<u32> = tx
        .prepare_cached(
            "SELECT starts FROM mail
             WHERE id = ?1 AND deployment = ?2 AND state = 'processing' AND holder_channel = ?3",
        )?
        .query_row(params![id, deployment, asking.holder.channel_id], |r| {
            r.get(0)
        })
        .optional()?;
    let Some(starts) = starts else {
        return Ok(Landed::Ignored);
    };
    let stored: Option<Option<Vec<u8>>> = tx
        .prepare_cached("SELECT answer FROM questions WHERE mail_id = ?1 AND key = ?2")?
        .query_row(params![id, asking.key], |r| r.get(0))
        .optional()?;
    Ok(match stored {
        Some(Some(answer)) => Landed::Answered(answer),
        Some(None) => Landed::Written,
        None => {
            tx.prepare_cached(
                "INSERT INTO questions (mail_id, key, deployment, prompt, attempt, asked_at_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            )?
            .execute(params![
                id,
                asking.key,
                deployment,
                asking.prompt,
                starts.max(1),
                at_ms
            ])?;
            Landed::Opened
        }
    })
}

/// Item `id`, held by `holder`, given back while its handler waits for
/// an answer: back in the inbox, uncounted, awaiting (a recorded cancel
/// ends it cancelled instead).
fn give_back_in(
    tx: &rusqlite::Connection,
    deployment: &str,
    holder: &Holder,
    id: u64,
    at_ms: u64,
) -> rusqlite::Result<bool> {
    let Ok(row) = i64::try_from(id) else {
        return Ok(false);
    };
    let cancel: Option<bool> = tx
        .prepare_cached(
            "SELECT cancel_reason IS NOT NULL FROM mail
             WHERE id = ?1 AND deployment = ?2 AND state = 'processing' AND holder_channel = ?3",
        )?
        .query_row(params![row, deployment, holder.channel_id], |r| r.get(0))
        .optional()?;
    match cancel {
        None => return Ok(false),
        Some(true) => {
            cancel_held(tx, deployment, id, at_ms)?;
            let how = item::ended_how("given back", Fate::Cancelled, false, true);
            end_delivery(tx, id, at_ms, &how)?;
            return Ok(true);
        }
        Some(false) => {}
    }
    tx.prepare_cached(&format!(
        "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
             started = 0, awaiting = {OPEN_QUESTION}
         WHERE id = ?1"
    ))?
    .execute(params![row])?;
    end_delivery(tx, id, at_ms, item::GIVEN_BACK_HOW)?;
    Ok(true)
}

/// Item `id`'s delivery to `holder` becomes a start: true when `holder`
/// holds it and had not started it.
fn start_in(
    tx: &rusqlite::Connection,
    deployment: &str,
    holder: &Holder,
    id: u64,
) -> rusqlite::Result<bool> {
    if i64::try_from(id).is_err() {
        return Ok(false);
    }
    let changed = tx
        .prepare_cached(
            "UPDATE mail SET started = 1, starts = starts + 1
             WHERE id = ?1 AND deployment = ?2 AND state = 'processing' AND holder_channel = ?3
               AND started = 0",
        )?
        .execute(params![id, deployment, holder.channel_id])?;
    Ok(changed == 1)
}

/// Item `id`, taken for `holder` but never sent, back in the inbox with
/// its take undone (a protocol-2 holder's take was a start).
fn unsent_in(
    tx: &rusqlite::Connection,
    deployment: &str,
    holder: &Holder,
    id: u64,
    at_ms: u64,
) -> rusqlite::Result<bool> {
    let Ok(row) = i64::try_from(id) else {
        return Ok(false);
    };
    let changed = tx
        .prepare_cached(
            "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                 starts = starts - started, started = 0
             WHERE id = ?1 AND deployment = ?2 AND state = 'processing' AND holder_channel = ?3",
        )?
        .execute(params![row, deployment, holder.channel_id])?;
    if changed == 1 {
        end_delivery(tx, id, at_ms, crate::store::held::UNSENT)?;
    }
    Ok(changed == 1)
}

/// Ends item `id`'s delivery in flight in the history.
fn end_delivery(tx: &rusqlite::Connection, id: u64, at_ms: u64, how: &str) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "UPDATE mail_history SET ended_at_ms = ?2, how = ?3
         WHERE mail_id = ?1 AND ended_at_ms IS NULL AND attempt IS NOT NULL",
    )?
    .execute(params![id, at_ms, how])?;
    Ok(())
}

/// Adds an event row inside the caller's transaction.
fn note(tx: &rusqlite::Connection, event: &NewEvent) -> rusqlite::Result<()> {
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

/// Most rows one prune transaction deletes, so it never holds the write
/// lock for long.
const PRUNE_BATCH: i64 = 5_000;

/// Deletes, in one transaction, the mail rows whose ids `select` (with
/// `args`) returns, and their history; returns how many rows went.
pub(super) fn delete_batch(
    store: &mut SqliteStore,
    select: &str,
    args: impl rusqlite::Params + Copy,
) -> rusqlite::Result<u64> {
    let tx = super::write(&mut store.conn, store.grouped)?;
    tx.prepare_cached(&format!(
        "DELETE FROM mail_history WHERE mail_id IN ({select})"
    ))?
    .execute(args)?;
    tx.prepare_cached(&format!(
        "DELETE FROM questions WHERE mail_id IN ({select})"
    ))?
    .execute(args)?;
    let deleted = tx
        .prepare_cached(&format!("DELETE FROM mail WHERE id IN ({select})"))?
        .execute(args)?;
    tx.commit()?;
    Ok(u64::try_from(deleted).unwrap_or(u64::MAX))
}
