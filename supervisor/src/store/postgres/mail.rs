//! Mail in PostgreSQL (DESIGN §6): the same rows, states and history as
//! SQLite's, the same rules (`store::mail`, `store::held`). Enqueues for one deployment are
//! serialized by a row lock on its `mail_counts` row, so two senders never
//! both take the last slot and a deployment's ids grow in inbox order.
//! Transactions that write events take the event log's advisory lock
//! (see `events`).

use super::events::insert;
use super::session::{Statements, Tx};
use super::{PostgresStore, col, fence, signed, unsigned};
use crate::store::mail::{self, Admission, Earlier};
use crate::store::questions::{Asking, OPEN_QUESTION};
use crate::store::{
    Accepted, AckOf, CancelFound, DeadMail, Ending, Holder, Landed, MailCounts, MailItem,
    MailStore, Offer, Replayed, Settle, StoreError,
};
use wfhost_policy::item::{self, Fate, Held, Holding, OnCancel};

impl MailStore for PostgresStore {
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
        let pid = i64::from(holder.pid);
        let fenced = self.fence.clone();
        let session = self.session()?;
        let result = (|| -> Result<Vec<Taken>, postgres::Error> {
            let mut tx = session.begin()?;
            fence::check(&mut tx, fenced.as_deref(), deployment)?;
            let holding = tx.query_one(
                "SELECT count(*), coalesce(bool_or(failures > 0), false) FROM mail
                 WHERE deployment = $1 AND state = 'processing' AND holder_channel = $2",
                &[&deployment, &holder.channel_id],
            )?;
            let holding = Holding {
                items: u64::try_from(holding.try_get::<_, i64>(0)?).unwrap_or(0),
                suspect: holding.try_get(1)?,
            };
            let rows = tx.query(
                "SELECT id, payload, starts, failures, deadline_ms, coalesce(first_taken_at_ms, $3)
                 FROM mail
                 WHERE deployment = $1 AND state = 'inbox' AND NOT awaiting
                 ORDER BY id LIMIT $2 FOR UPDATE",
                &[&deployment, &head, &signed(at_ms)],
            )?;
            let rows = rows
                .iter()
                .map(|r| {
                    let failures: i64 = r.try_get(3)?;
                    let taken = Taken {
                        id: r.try_get(0)?,
                        payload: r.try_get(1)?,
                        starts: r.try_get(2)?,
                        deadline_ms: r.try_get(4)?,
                        first_taken_at_ms: r.try_get(5)?,
                    };
                    Ok((taken, failures))
                })
                .collect::<Result<Vec<(Taken, i64)>, postgres::Error>>()?;
            let failures = rows
                .iter()
                .map(|(_, f)| u32::try_from(*f).unwrap_or(u32::MAX));
            let n = item::takeable(holding, failures, limit);
            let items: Vec<Taken> = rows.into_iter().take(n).map(|(i, _)| i).collect();
            if !items.is_empty() {
                // Exactly the rows just read and locked: the head of the
                // inbox, each beginning the start it is or may become in the
                // history, in one round trip.
                let ids: Vec<i64> = items.iter().map(|i| i.id).collect();
                tx.execute(
                    "WITH taken AS (
                         UPDATE mail SET state = 'processing', deliveries = deliveries + 1,
                             holder_channel = $2, holder_pid = $3, taken_at_ms = $4,
                             started = $5::boolean, starts = starts + ($5::boolean)::int,
                             first_taken_at_ms = coalesce(first_taken_at_ms, $4)
                         WHERE id = ANY($1) AND state = 'inbox'
                         RETURNING id, starts + 1 - started::int AS attempt, holder_pid,
                             holder_channel, taken_at_ms)
                     INSERT INTO mail_history (mail_id, attempt, holder_pid, holder_channel, taken_at_ms)
                     SELECT id, attempt, holder_pid, holder_channel, taken_at_ms
                     FROM taken ORDER BY id",
                    &[
                        &ids,
                        &holder.channel_id,
                        &pid,
                        &signed(at_ms),
                        &starts_on_take,
                    ],
                )?;
            }
            tx.commit()?;
            Ok(items)
        })();
        let items = result.map_err(|e| self.fail("taking mail from the inbox", &e))?;
        items
            .into_iter()
            .map(|t| {
                Ok(MailItem {
                    id: unsigned("mail", t.id)?,
                    payload: t.payload,
                    // The start this delivery is, or may become.
                    attempt: mail::attempt(t.starts),
                    deadline_ms: t.deadline_ms.map(|d| unsigned("deadline", d)).transpose()?,
                    first_taken_at_ms: unsigned("first delivery", t.first_taken_at_ms)?,
                })
            })
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }

    /// Several acknowledgements for `deployment` in one transaction (one
    /// fence check, one durable commit), each `true` when its holder held the
    /// item, as if alone.
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
        let fenced = self.fence.clone();
        let session = self.session()?;
        let result = (|| -> Result<Vec<Landed>, postgres::Error> {
            let mut tx = session.begin()?;
            fence::check(&mut tx, fenced.as_deref(), deployment)?;
            tx.lock_events()?;
            let mut landed = Vec::with_capacity(writes.len());
            for w in writes {
                landed.push(match w {
                    Settle::Started { holder, id } => {
                        written(start_one(&mut tx, deployment, holder, *id)?)
                    }
                    Settle::Done(a) => written(ack_one(&mut tx, deployment, a, at_ms)?),
                    Settle::Asked(q) => ask_one(&mut tx, deployment, q, at_ms)?,
                    Settle::GivenBack { holder, id } => {
                        written(give_back_one(&mut tx, deployment, holder, *id, at_ms)?)
                    }
                    Settle::Unsent { holder, id } => {
                        written(unsent_one(&mut tx, deployment, holder, *id, at_ms)?)
                    }
                });
            }
            tx.commit()?;
            Ok(landed)
        })();
        result.map_err(|e| self.fail("acknowledging mail", &e))
    }

    /// Several offers in one transaction (one durable commit), each admitted
    /// or refused as if alone: a refusal writes nothing for that offer and
    /// leaves the others be.
    fn enqueue_mail_many(
        &mut self,
        offers: &[Offer],
    ) -> Result<Vec<Result<Accepted, StoreError>>, StoreError> {
        let session = self.session()?;
        let mut committing = false;
        let result = (|| -> Result<Vec<Result<Accepted, StoreError>>, postgres::Error> {
            let mut tx = session.begin()?;
            tx.lock_events()?;
            let mut answers = Vec::with_capacity(offers.len());
            for o in offers {
                answers.push(admit_one(&mut tx, o)?);
            }
            committing = true;
            tx.commit()?;
            Ok(answers)
        })();
        result.map_err(|e| {
            let e = self.fail("accepting mail", &e);
            // A connection lost during COMMIT may have committed.
            if committing { e.at_commit() } else { e }
        })
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
        let Ok(row_id) = i64::try_from(id) else {
            return Ok(false);
        };
        let outcome = format!("failed: {reason}");
        let fenced = self.fence.clone();
        let session = self.session()?;
        let result = (|| -> Result<bool, postgres::Error> {
            let mut tx = session.begin()?;
            fence::check(&mut tx, fenced.as_deref(), deployment)?;
            tx.lock_events()?;
            let changed = tx.execute(
                "UPDATE mail SET state = 'done', outcome = $4, done_at_ms = $5, payload = ''::bytea,
                     result = ''::bytea, holder_channel = NULL, holder_pid = NULL
                 WHERE id = $1 AND deployment = $2 AND state = 'processing' AND holder_channel = $3",
                &[
                    &row_id,
                    &deployment,
                    &holder.channel_id,
                    &outcome,
                    &signed(at_ms),
                ],
            )?;
            if changed != 1 {
                return Ok(false);
            }
            end_delivery(&mut tx, row_id, at_ms, &item::done_how(&outcome))?;
            insert(&mut tx, &mail::done_event(deployment, id, &outcome, at_ms))?;
            tx.commit()?;
            Ok(true)
        })();
        result.map_err(|e| self.fail("failing mail past its deadline", &e))
    }

    /// A cancel of item `id`, decided in one transaction.
    fn cancel_mail(
        &mut self,
        id: u64,
        reason: &str,
        by: &str,
        at_ms: u64,
    ) -> Result<Option<CancelFound>, StoreError> {
        let Ok(row_id) = i64::try_from(id) else {
            return Ok(None);
        };
        let session = self.session()?;
        let result = (|| -> Result<Option<CancelFound>, postgres::Error> {
            let mut tx = session.begin()?;
            tx.lock_events()?;
            let Some(row) = tx.query_opt(
                "SELECT deployment, state, holder_channel, holder_pid, outcome FROM mail
                 WHERE id = $1 FOR UPDATE",
                &[&row_id],
            )?
            else {
                return Ok(None);
            };
            let deployment: String = row.try_get(0)?;
            let state: String = row.try_get(1)?;
            let channel: Option<String> = row.try_get(2)?;
            let pid: Option<i64> = row.try_get(3)?;
            let outcome: Option<String> = row.try_get(4)?;
            let found = match (item::on_cancel(&state), channel, pid) {
                (OnCancel::EndNow, _, _) => {
                    tx.execute(
                        "UPDATE mail SET state = 'done', outcome = $2, done_at_ms = $3,
                             payload = ''::bytea, result = ''::bytea
                         WHERE id = $1",
                        &[&row_id, &item::CANCELLED, &signed(at_ms)],
                    )?;
                    tx.execute(
                        "INSERT INTO mail_history (mail_id, ended_at_ms, how) VALUES ($1, $2, $3)",
                        &[
                            &row_id,
                            &signed(at_ms),
                            &item::cancelled_queued_how(by, reason),
                        ],
                    )?;
                    insert(
                        &mut tx,
                        &mail::done_event(&deployment, id, item::CANCELLED, at_ms),
                    )?;
                    CancelFound::Queued { deployment }
                }
                (OnCancel::Record, Some(channel_id), Some(pid)) => {
                    tx.execute(
                        "UPDATE mail SET cancel_reason = $2 WHERE id = $1",
                        &[&row_id, &reason],
                    )?;
                    CancelFound::Held {
                        deployment,
                        holder: Holder {
                            channel_id,
                            pid: u32::try_from(pid).unwrap_or(0),
                        },
                    }
                }
                _ => CancelFound::Ended {
                    how: item::ended_as(&state, outcome.as_deref()),
                    deployment,
                },
            };
            tx.commit()?;
            Ok(Some(found))
        })();
        result.map_err(|e| self.fail("cancelling mail", &e))
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
        let pid = i64::from(holder.pid);
        let at = signed(ending.at_ms);
        let fenced = self.fence.clone();
        let session = self.session()?;
        let result = (|| -> Result<Replayed, postgres::Error> {
            let mut tx = session.begin()?;
            fence::check(&mut tx, fenced.as_deref(), deployment)?;
            let rows = tx.query(
                &format!(
                    "SELECT id, failures, started, cancel_reason IS NOT NULL, {OPEN_QUESTION}
                     FROM mail
                     WHERE deployment = $1 AND state = 'processing' AND holder_channel = $2
                     ORDER BY id FOR UPDATE"
                ),
                &[&deployment, &holder.channel_id],
            )?;
            let mut replayed = Replayed::default();
            if rows
                .iter()
                .any(|r| r.try_get::<_, bool>(3).unwrap_or(false))
            {
                tx.lock_events()?;
            }
            for r in &rows {
                let (id, failures): (i64, i64) = (r.try_get(0)?, r.try_get(1)?);
                let started: bool = r.try_get(2)?;
                let held = Held {
                    failures: u32::try_from(failures).unwrap_or(u32::MAX),
                    started,
                    cancel_asked: r.try_get(3)?,
                    awaiting: r.try_get(4)?,
                };
                let fate = item::after_ending(held, ending.counts, max_deliveries, ending.hold);
                let how = item::ended_how(&ending.cause, fate, ending.counts, started);
                let counted = ending.counts && started;
                if fate == Fate::Cancelled {
                    cancel_held(&mut tx, deployment, id, ending.at_ms)?;
                } else if fate == Fate::Interrupted {
                    tx.execute(
                        "UPDATE mail SET state = 'interrupted', holder_channel = NULL,
                             holder_pid = NULL, started = false, last_cause = $2, last_pid = $3,
                             last_failed_at_ms = $4
                         WHERE id = $1",
                        &[&id, &ending.cause, &pid, &at],
                    )?;
                } else if fate == Fate::Awaiting {
                    tx.execute(
                        "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                             started = false, awaiting = true
                         WHERE id = $1",
                        &[&id],
                    )?;
                } else if counted {
                    let (state, failures, dead_at) = match fate {
                        Fate::Dead(f) => ("dead", f, Some(at)),
                        Fate::Inbox(f) => ("inbox", f, None),
                        Fate::Cancelled | Fate::Interrupted | Fate::Awaiting => {
                            ("inbox", held.failures, None)
                        }
                    };
                    tx.execute(
                        "UPDATE mail SET state = $2, failures = $3, holder_channel = NULL,
                             holder_pid = NULL, last_cause = $4, last_pid = $5,
                             last_failed_at_ms = $6, dead_at_ms = $7, started = false
                         WHERE id = $1",
                        &[
                            &id,
                            &state,
                            &i64::from(failures),
                            &ending.cause,
                            &pid,
                            &at,
                            &dead_at,
                        ],
                    )?;
                } else {
                    tx.execute(
                        "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                             started = false
                         WHERE id = $1",
                        &[&id],
                    )?;
                }
                end_delivery(&mut tx, id, ending.at_ms, &how)?;
                match fate {
                    Fate::Inbox(_) | Fate::Awaiting => replayed.returned += 1,
                    Fate::Cancelled => replayed.cancelled += 1,
                    Fate::Interrupted => replayed.interrupted.push(u64::try_from(id).unwrap_or(0)),
                    Fate::Dead(failures) => replayed.dead.push(DeadMail {
                        id: u64::try_from(id).unwrap_or(0),
                        failures,
                        cause: ending.cause.clone(),
                        pid: holder.pid,
                    }),
                }
            }
            tx.commit()?;
            Ok(replayed)
        })();
        result.map_err(|e| self.fail("returning unacknowledged mail", &e))
    }

    /// Every processing item of every deployment back to the inbox, not
    /// counted; returns how many.
    fn replay_all_mail_holding(&mut self, at_ms: u64, hold: &[String]) -> Result<u64, StoreError> {
        // A fleet host returns a deployment's mail when it takes its lease
        // (`takeover.rs`); other hosts' children may be working on the rest.
        if self.fence.is_some() {
            return Ok(0);
        }
        let session = self.session()?;
        let result = (|| -> Result<u64, postgres::Error> {
            let mut tx = session.begin()?;
            tx.lock_events()?;
            // What a committed cancel named ends cancelled, not returned.
            let cancelled = tx.query(
                "SELECT id, deployment FROM mail
                 WHERE state = 'processing' AND cancel_reason IS NOT NULL ORDER BY id FOR UPDATE",
                &[],
            )?;
            let gone = item::SUPERVISOR_GONE;
            let how = item::ended_how(gone, Fate::Cancelled, false, true);
            for r in &cancelled {
                let (id, deployment): (i64, String) = (r.try_get(0)?, r.try_get(1)?);
                cancel_held(&mut tx, &deployment, id, at_ms)?;
                end_delivery(&mut tx, id, at_ms, &how)?;
            }
            // A deployment that holds: its started items wait for an operator.
            let held_how = item::ended_how(gone, Fate::Interrupted, false, true);
            // (Not one waiting for an answer: that waits for its answer.)
            tx.execute(
                &format!(
                    "UPDATE mail_history SET ended_at_ms = $1, how = $2
                     WHERE ended_at_ms IS NULL AND attempt IS NOT NULL
                       AND mail_id IN (SELECT id FROM mail WHERE state = 'processing'
                                       AND started AND deployment = ANY($3)
                                       AND NOT {OPEN_QUESTION})"
                ),
                &[&signed(at_ms), &held_how, &hold],
            )?;
            tx.execute(
                &format!(
                    "UPDATE mail SET state = 'interrupted', holder_channel = NULL, holder_pid = NULL,
                         started = false, last_cause = $2
                     WHERE state = 'processing' AND started AND deployment = ANY($1)
                       AND NOT {OPEN_QUESTION}"
                ),
                &[&hold, &gone],
            )?;
            tx.execute(
                "UPDATE mail_history SET ended_at_ms = $1, how = $2
                 WHERE ended_at_ms IS NULL AND attempt IS NOT NULL
                   AND mail_id IN (SELECT id FROM mail WHERE state = 'processing')",
                &[&signed(at_ms), &item::RETURNED_AT_START],
            )?;
            let changed = tx.execute(
                &format!(
                    "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                         started = false, awaiting = {OPEN_QUESTION}
                     WHERE state = 'processing'"
                ),
                &[],
            )?;
            tx.commit()?;
            Ok(changed)
        })();
        result.map_err(|e| self.fail("replaying unacknowledged mail", &e))
    }

    /// Deletes done items acknowledged before `done_before_ms`, with their
    /// idempotency keys and histories, in short transactions; returns how
    /// many went.
    fn prune_done_mail(&mut self, done_before_ms: u64) -> Result<u64, StoreError> {
        let cut = signed(done_before_ms);
        let mut total = 0u64;
        loop {
            let session = self.session()?;
            let deleted = (|| -> Result<u64, postgres::Error> {
                let mut tx = session.begin()?;
                let ids: Vec<i64> = tx
                    .query(
                        "SELECT id FROM mail WHERE state = 'done' AND done_at_ms < $1
                         ORDER BY id LIMIT $2 FOR UPDATE",
                        &[&cut, &PRUNE_BATCH],
                    )?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?;
                let deleted = delete_ids(&mut tx, &ids)?;
                tx.commit()?;
                Ok(deleted)
            })();
            let deleted = deleted.map_err(|e| self.fail("pruning done mail", &e))?;
            total += deleted;
            if deleted < PRUNE_BATCH as u64 {
                return Ok(total);
            }
        }
    }

    /// How many of `deployment`'s items are in each state.
    fn mail_counts(&mut self, deployment: &str) -> Result<MailCounts, StoreError> {
        let row = self.session()?.query_opt(
            "SELECT c.inbox, c.processing, c.done, c.dead,
                 (SELECT count(*) FROM mail
                  WHERE deployment = $1 AND state = 'processing' AND started),
                 c.interrupted,
                 (SELECT count(*) FROM mail WHERE deployment = $1 AND awaiting AND state = 'inbox'),
                 q.n, q.oldest
             FROM mail_counts c,
                 (SELECT count(*) AS n, min(q.asked_at_ms) AS oldest
                  FROM questions q JOIN mail m ON m.id = q.mail_id
                  WHERE q.deployment = $1 AND q.answer IS NULL
                    AND m.state IN ('inbox', 'processing', 'interrupted')) q
             WHERE c.deployment = $1",
            &[&deployment],
        );
        let Some(row) = row.map_err(|e| self.fail("counting mail", &e))? else {
            return Ok(MailCounts::default());
        };
        let what = "mail_counts";
        (|| {
            Ok(MailCounts {
                inbox: unsigned(what, col(&row, 0)?)?,
                processing: unsigned(what, col(&row, 1)?)?,
                working: unsigned(what, col(&row, 4)?)?,
                done: unsigned(what, col(&row, 2)?)?,
                dead: unsigned(what, col(&row, 3)?)?,
                interrupted: unsigned(what, col(&row, 5)?)?,
                awaiting: unsigned(what, col(&row, 6)?)?,
                questions_open: unsigned(what, col(&row, 7)?)?,
                oldest_question_at_ms: col::<Option<i64>>(&row, 8)?
                    .map(|v| unsigned(what, v))
                    .transpose()?,
            })
        })()
        .map_err(|what| self.corrupt(what))
    }

    #[cfg(test)]
    /// Ids of `deployment`'s done items, ascending.
    fn mail_done_ids(&mut self, deployment: &str) -> Result<Vec<u64>, StoreError> {
        let rows = self.session()?.query(
            "SELECT id FROM mail WHERE deployment = $1 AND state = 'done' ORDER BY id",
            &[&deployment],
        );
        let rows = rows.map_err(|e| self.fail("listing done mail", &e))?;
        Ok(rows
            .iter()
            .map(|r| u64::try_from(r.get::<_, i64>(0)).unwrap_or(0))
            .collect())
    }
}

/// An item read from the inbox's head for a take.
struct Taken {
    id: i64,
    payload: Vec<u8>,
    starts: i64,
    deadline_ms: Option<i64>,
    first_taken_at_ms: i64,
}

/// A held item whose cancel was committed, its holder gone: done,
/// cancelled, never run again.
fn cancel_held(
    tx: &mut Tx<'_>,
    deployment: &str,
    row_id: i64,
    at_ms: u64,
) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE mail SET state = 'done', outcome = $2, done_at_ms = $3, payload = ''::bytea,
             result = ''::bytea, holder_channel = NULL, holder_pid = NULL, started = false
         WHERE id = $1",
        &[&row_id, &item::CANCELLED, &signed(at_ms)],
    )?;
    let id = u64::try_from(row_id).unwrap_or(0);
    insert(
        tx,
        &mail::done_event(deployment, id, item::CANCELLED, at_ms),
    )?;
    Ok(())
}

/// A question of item `id`'s handler inside [`MailStore::settle_mail`]'s
/// transaction: stored once per (item, key); asked again, its stored
/// answer, if any, comes back.
fn ask_one(
    tx: &mut Tx<'_>,
    deployment: &str,
    asking: &Asking,
    at_ms: u64,
) -> Result<Landed, postgres::Error> {
    let Ok(id) = i64::try_from(asking.id) else {
        return Ok(Landed::Ignored);
    };
    let Some(held) = tx.query_opt(
        "SELECT starts FROM mail
         WHERE id = $1 AND deployment = $2 AND state = 'processing' AND holder_channel = $3",
        &[&id, &deployment, &asking.holder.channel_id],
    )?
    else {
        return Ok(Landed::Ignored);
    };
    let starts: i64 = held.try_get(0)?;
    let stored = tx.query_opt(
        "SELECT answer FROM questions WHERE mail_id = $1 AND key = $2",
        &[&id, &asking.key],
    )?;
    if let Some(row) = stored {
        return Ok(match row.try_get::<_, Option<Vec<u8>>>(0)? {
            Some(answer) => Landed::Answered(answer),
            None => Landed::Written,
        });
    }
    let inserted = tx.execute(
        "INSERT INTO questions (mail_id, key, deployment, prompt, attempt, asked_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (mail_id, key) DO NOTHING",
        &[
            &id,
            &asking.key,
            &deployment,
            &asking.prompt,
            &starts.max(1),
            &signed(at_ms),
        ],
    )?;
    Ok(if inserted == 1 {
        Landed::Opened
    } else {
        Landed::Written
    })
}

/// Item `id`, held by `holder`, given back while its handler waits for
/// an answer: back in the inbox, uncounted, awaiting (a recorded cancel
/// ends it cancelled instead).
fn give_back_one(
    tx: &mut Tx<'_>,
    deployment: &str,
    holder: &Holder,
    id: u64,
    at_ms: u64,
) -> Result<bool, postgres::Error> {
    let Ok(row_id) = i64::try_from(id) else {
        return Ok(false);
    };
    let Some(row) = tx.query_opt(
        "SELECT cancel_reason IS NOT NULL FROM mail
         WHERE id = $1 AND deployment = $2 AND state = 'processing' AND holder_channel = $3
         FOR UPDATE",
        &[&row_id, &deployment, &holder.channel_id],
    )?
    else {
        return Ok(false);
    };
    if row.try_get::<_, bool>(0)? {
        cancel_held(tx, deployment, row_id, at_ms)?;
        let how = item::ended_how("given back", Fate::Cancelled, false, true);
        end_delivery(tx, row_id, at_ms, &how)?;
        return Ok(true);
    }
    tx.execute(
        &format!(
            "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
                 started = false, awaiting = {OPEN_QUESTION}
             WHERE id = $1"
        ),
        &[&row_id],
    )?;
    end_delivery(tx, row_id, at_ms, item::GIVEN_BACK_HOW)?;
    Ok(true)
}

/// One start inside [`MailStore::settle_mail`]'s transaction: true when
/// `holder` holds item `id` and had not started it.
fn start_one(
    tx: &mut Tx<'_>,
    deployment: &str,
    holder: &Holder,
    id: u64,
) -> Result<bool, postgres::Error> {
    let Ok(row_id) = i64::try_from(id) else {
        return Ok(false);
    };
    let changed = tx.execute(
        "UPDATE mail SET started = true, starts = starts + 1
         WHERE id = $1 AND deployment = $2 AND state = 'processing' AND holder_channel = $3
           AND NOT started",
        &[&row_id, &deployment, &holder.channel_id],
    )?;
    Ok(changed == 1)
}

/// One acknowledgement inside [`MailStore::settle_mail`]'s transaction.
fn ack_one(
    tx: &mut Tx<'_>,
    deployment: &str,
    a: &AckOf,
    at_ms: u64,
) -> Result<bool, postgres::Error> {
    // No stored id is above i64::MAX, so such an ack is unknown.
    let Ok(row_id) = i64::try_from(a.id) else {
        return Ok(false);
    };
    let event = mail::done_event(deployment, a.id, &a.outcome, at_ms);
    // The item, its delivery in the history and its event, in one round
    // trip; the last two only when the first changed.
    let changed: i64 = tx
        .query_one(
            "WITH done AS (
                 UPDATE mail SET state = 'done', outcome = $4, done_at_ms = $5, payload = ''::bytea,
                     holder_channel = NULL, holder_pid = NULL, result = $6,
                     starts = starts + (1 - started::int), started = true
                 WHERE id = $1 AND deployment = $2 AND state = 'processing' AND holder_channel = $3
                 RETURNING id),
             delivery AS (
                 UPDATE mail_history SET ended_at_ms = $5, how = $7
                 WHERE mail_id IN (SELECT id FROM done) AND ended_at_ms IS NULL
                   AND attempt IS NOT NULL),
             noted AS (
                 INSERT INTO events (at_ms, deployment, kind, body)
                 SELECT $8, $2, $9, $10 FROM done)
             SELECT count(*) FROM done",
            &[
                &row_id,
                &deployment,
                &a.holder.channel_id,
                &a.outcome,
                &signed(at_ms),
                &a.result,
                &item::done_how(&a.outcome),
                &signed(event.at_ms),
                &event.kind,
                &event.body.to_string(),
            ],
        )?
        .try_get(0)?;
    Ok(changed == 1)
}

/// One offer inside [`enqueue_many`]'s transaction, as [`mail::admit`]
/// rules; enqueues for one deployment are serialized by the row lock on
/// its `mail_counts` row.
fn admit_one(tx: &mut Tx<'_>, o: &Offer) -> Result<Result<Accepted, StoreError>, postgres::Error> {
    let (deployment, key) = (o.deployment.as_str(), o.key.as_deref());
    let digest = mail::payload_digest(key, &o.payload);
    // The counts row locked, with the item an earlier send of the key
    // made, in one round trip.
    let lock = "SELECT c.inbox + c.processing, m.id, m.payload_sha256
                FROM mail_counts c
                LEFT JOIN mail m ON m.deployment = c.deployment AND m.idempotency_key = $2
                WHERE c.deployment = $1 FOR UPDATE OF c";
    let row = match tx.query_opt(lock, &[&deployment, &key])? {
        Some(row) => row,
        // The deployment's first mail: its row, then the lock.
        None => {
            tx.execute(
                "INSERT INTO mail_counts (deployment) VALUES ($1) ON CONFLICT (deployment) DO NOTHING",
                &[&deployment],
            )?;
            tx.query_one(lock, &[&deployment, &key])?
        }
    };
    let pending = u64::try_from(row.try_get::<_, i64>(0)?).unwrap_or(0);
    let earlier = match row.try_get::<_, Option<i64>>(1)? {
        Some(id) => Some(Earlier {
            id: u64::try_from(id).unwrap_or(0),
            payload_sha256: row.try_get(2)?,
        }),
        None => None,
    };
    match mail::admit(
        deployment,
        key,
        digest.as_ref(),
        earlier,
        pending,
        o.max_inbox,
    ) {
        Err(refused) => return Ok(Err(refused)),
        Ok(Admission::Existing(id)) => return Ok(Ok(Accepted { id, new: false })),
        Ok(Admission::Insert) => {}
    }
    let digest = digest.as_ref().map(|d| d.as_slice());
    // The item and its `mail_accepted` event in one round trip; the
    // event's body is `Fact::MailAccepted`'s, `{"id":N}`, made here as the
    // id is the insert's.
    let id: i64 = tx
        .query_one(
            "WITH added AS (
                 INSERT INTO mail (deployment, state, payload, enqueued_at_ms, idempotency_key,
                                   payload_sha256, deadline_ms)
                 VALUES ($1, 'inbox', $2, $3, $4, $5, $6) RETURNING id),
             noted AS (
                 INSERT INTO events (at_ms, deployment, kind, body)
                 SELECT $3, $1, $7, '{\"id\":' || id || '}' FROM added)
             SELECT id FROM added",
            &[
                &deployment,
                &o.payload,
                &signed(o.at_ms),
                &key,
                &digest,
                &o.deadline_ms.map(signed),
                &mail::accepted_event(deployment, 0, o.at_ms).kind,
            ],
        )?
        .try_get(0)?;
    Ok(Ok(Accepted {
        id: u64::try_from(id).unwrap_or(0),
        new: true,
    }))
}

/// Item `id`, taken for `holder` but never sent, back in the inbox with
/// its take undone (a protocol-2 holder's take was a start).
fn unsent_one(
    tx: &mut Tx<'_>,
    deployment: &str,
    holder: &Holder,
    id: u64,
    at_ms: u64,
) -> Result<bool, postgres::Error> {
    let Ok(row_id) = i64::try_from(id) else {
        return Ok(false);
    };
    let changed = tx.execute(
        "UPDATE mail SET state = 'inbox', holder_channel = NULL, holder_pid = NULL,
             starts = starts - (CASE WHEN started THEN 1 ELSE 0 END), started = false
         WHERE id = $1 AND deployment = $2 AND state = 'processing' AND holder_channel = $3",
        &[&row_id, &deployment, &holder.channel_id],
    )?;
    if changed == 1 {
        end_delivery(tx, row_id, at_ms, crate::store::held::UNSENT)?;
    }
    Ok(changed == 1)
}

/// Ends item `id`'s delivery in flight in the history.
fn end_delivery(tx: &mut Tx<'_>, id: i64, at_ms: u64, how: &str) -> Result<(), postgres::Error> {
    tx.execute(
        "UPDATE mail_history SET ended_at_ms = $2, how = $3
         WHERE mail_id = $1 AND ended_at_ms IS NULL AND attempt IS NOT NULL",
        &[&id, &signed(at_ms), &how],
    )?;
    Ok(())
}

/// Most rows one prune transaction deletes, so it never holds locks long.
const PRUNE_BATCH: i64 = 5_000;

/// Deletes mail rows `ids` and their history in `tx`; returns how many
/// rows went.
pub(super) fn delete_ids(tx: &mut Tx<'_>, ids: &[i64]) -> Result<u64, postgres::Error> {
    if ids.is_empty() {
        return Ok(0);
    }
    tx.execute("DELETE FROM mail_history WHERE mail_id = ANY($1)", &[&ids])?;
    tx.execute("DELETE FROM questions WHERE mail_id = ANY($1)", &[&ids])?;
    tx.execute("DELETE FROM mail WHERE id = ANY($1)", &[&ids])
}
