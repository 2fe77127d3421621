//! The operator's mail in SQLite: pages of items with their histories,
//! one item, its payload in pieces, and the two decisions (retry, purge)
//! under the rules of `store::mail_admin`.

use std::collections::BTreeMap;

use rusqlite::types::ToSql;
use rusqlite::{OptionalExtension, Row, params};

use super::SqliteStore;
use crate::store::held::Holder;
use crate::store::mail_admin::{
    self, HistoryEntry, LastFailure, MailPage, MailQuery, MailState, MailView, RETRY_BATCH, Retried,
};
use crate::store::questions::{OPEN_QUESTION, open_question};
use crate::store::{MailAdmin, StoreError};

/// The columns [`view`] reads, in its order.
const COLUMNS: &str = concat!(
    "id, deployment, state, starts, failures, enqueued_at_ms, length(payload),
     holder_channel, holder_pid, taken_at_ms, last_cause, last_pid, last_failed_at_ms,
     outcome, done_at_ms, dead_at_ms, coalesce(length(result), 0), ",
    open_question!()
);

/// A row of [`COLUMNS`] as a view without its history; a state wfhost
/// never writes is a conversion failure (reported as corruption).
fn view(r: &Row<'_>) -> rusqlite::Result<MailView> {
    let state: String = r.get(2)?;
    let state = mail_admin::stored_state(&state).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Text, e.into())
    })?;
    let holder = match (r.get::<_, Option<String>>(7)?, r.get::<_, Option<u32>>(8)?) {
        (Some(channel_id), Some(pid)) => Some(Holder { channel_id, pid }),
        _ => None,
    };
    let last_failure = match (
        r.get::<_, Option<String>>(10)?,
        r.get::<_, Option<u32>>(11)?,
        r.get::<_, Option<u64>>(12)?,
    ) {
        (Some(cause), Some(pid), Some(at_ms)) => Some(LastFailure { cause, pid, at_ms }),
        _ => None,
    };
    Ok(MailView {
        id: r.get(0)?,
        deployment: r.get(1)?,
        state,
        attempts: r.get(3)?,
        failures: r.get(4)?,
        enqueued_at_ms: r.get(5)?,
        payload_bytes: r.get(6)?,
        holder,
        taken_at_ms: r.get(9)?,
        last_failure,
        outcome: r.get(13)?,
        done_at_ms: r.get(14)?,
        dead_at_ms: r.get(15)?,
        result_bytes: r.get(16)?,
        waiting_for_answer: r.get(17)?,
        history: Vec::new(),
    })
}

/// A `mail_history` row (after its `mail_id`, column 0).
fn entry(r: &Row<'_>) -> rusqlite::Result<HistoryEntry> {
    Ok(HistoryEntry {
        attempt: r.get(1)?,
        pid: r.get(2)?,
        channel_id: r.get(3)?,
        taken_at_ms: r.get(4)?,
        ended_at_ms: r.get(5)?,
        how: r.get(6)?,
    })
}

const HISTORY: &str =
    "SELECT mail_id, attempt, holder_pid, holder_channel, taken_at_ms, ended_at_ms, how
     FROM mail_history";

/// The `WHERE` clause of `query` (ids above `?1`, then its deployment and
/// state if given) and its arguments.
fn filter(query: &MailQuery) -> (String, Vec<Box<dyn ToSql>>) {
    let mut clauses = vec!["id > ?1".to_owned()];
    let mut args: Vec<Box<dyn ToSql>> = vec![Box::new(query.after)];
    if let Some(d) = &query.deployment {
        args.push(Box::new(d.clone()));
        clauses.push(format!("deployment = ?{}", args.len()));
    }
    if let Some(s) = query.state {
        args.push(Box::new(s.as_str()));
        clauses.push(format!("state = ?{}", args.len()));
    }
    (clauses.join(" AND "), args)
}

impl MailAdmin for SqliteStore {
    /// A page of items with their histories, and how many more match.
    fn list_mail(&mut self, query: &MailQuery) -> Result<MailPage, StoreError> {
        let limit = mail_admin::page_size(query.limit);
        let (filter, mut args) = filter(query);
        args.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        let at_limit = args.len();
        let page =
            format!("SELECT {COLUMNS} FROM mail WHERE {filter} ORDER BY id LIMIT ?{at_limit}");
        let history = format!(
            "{HISTORY} WHERE mail_id IN (SELECT id FROM mail WHERE {filter} ORDER BY id LIMIT ?{at_limit})
             ORDER BY mail_id, seq"
        );
        let bound: Vec<&dyn ToSql> = args.iter().map(|a| a.as_ref()).collect();
        (|| -> rusqlite::Result<MailPage> {
            // One read transaction: the page and its histories agree.
            let tx = self.conn.transaction()?;
            let mut items = tx
                .prepare_cached(&page)?
                .query_map(bound.as_slice(), view)?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let mut by_id: BTreeMap<u64, Vec<HistoryEntry>> = BTreeMap::new();
            let mut stmt = tx.prepare_cached(&history)?;
            let mut rows = stmt.query(bound.as_slice())?;
            while let Some(r) = rows.next()? {
                by_id.entry(r.get(0)?).or_default().push(entry(r)?);
            }
            drop(rows);
            drop(stmt);
            for item in &mut items {
                item.history = by_id.remove(&item.id).unwrap_or_default();
            }
            let more = match items.last() {
                Some(last) if items.len() == limit => {
                    let rest = MailQuery {
                        after: last.id,
                        ..query.clone()
                    };
                    let (filter, args) = self::filter(&rest);
                    let bound: Vec<&dyn ToSql> = args.iter().map(|a| a.as_ref()).collect();
                    tx.prepare_cached(&format!("SELECT count(*) FROM mail WHERE {filter}"))?
                        .query_row(bound.as_slice(), |r| r.get(0))?
                }
                _ => 0,
            };
            Ok(MailPage { items, more })
        })()
        .map_err(|e| self.read_fail("listing mail", &e))
    }

    /// Item `id` with its history.
    fn mail_item(&mut self, id: u64) -> Result<Option<MailView>, StoreError> {
        if i64::try_from(id).is_err() {
            return Ok(None);
        }
        (|| -> rusqlite::Result<Option<MailView>> {
            let tx = self.conn.transaction()?;
            let Some(mut item) = tx
                .prepare_cached(&format!("SELECT {COLUMNS} FROM mail WHERE id = ?1"))?
                .query_row(params![id], view)
                .optional()?
            else {
                return Ok(None);
            };
            item.history = tx
                .prepare_cached(&format!("{HISTORY} WHERE mail_id = ?1 ORDER BY seq"))?
                .query_map(params![id], entry)?
                .collect::<rusqlite::Result<_>>()?;
            Ok(Some(item))
        })()
        .map_err(|e| self.read_fail("reading a mail item", &e))
    }

    /// At most `len` bytes of item `id`'s payload from `offset`.
    fn mail_payload(
        &mut self,
        id: u64,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let (Ok(row), Ok(start), Ok(len)) = (
            i64::try_from(id),
            i64::try_from(offset.saturating_add(1)),
            i64::try_from(len),
        ) else {
            return Ok(None);
        };
        self.conn
            .prepare_cached("SELECT substr(payload, ?2, ?3) FROM mail WHERE id = ?1")
            .and_then(|mut stmt| {
                stmt.query_row(params![row, start, len], |r| r.get(0))
                    .optional()
            })
            .map_err(|e| self.read_fail("reading a mail payload", &e))
    }

    /// Item `id`'s result.
    fn mail_result(&mut self, id: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let Ok(row) = i64::try_from(id) else {
            return Ok(None);
        };
        self.conn
            .prepare_cached("SELECT coalesce(result, x'') FROM mail WHERE id = ?1")
            .and_then(|mut stmt| stmt.query_row(params![row], |r| r.get(0)).optional())
            .map_err(|e| self.read_fail("reading a mail result", &e))
    }

    /// Dead mail of `deployment` (item `id`, or its oldest) back to the inbox
    /// with failures and attempts reset.
    fn retry_dead_mail(
        &mut self,
        deployment: &str,
        id: Option<u64>,
        by: &str,
        at_ms: u64,
    ) -> Result<Retried, StoreError> {
        (|| -> rusqlite::Result<Result<Retried, StoreError>> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let ids: Vec<u64> = match id {
                Some(id) => {
                    let state: Option<String> = tx
                        .prepare_cached("SELECT state FROM mail WHERE id = ?1 AND deployment = ?2")?
                        .query_row(params![i64::try_from(id).unwrap_or(-1), deployment], |r| {
                            r.get(0)
                        })
                        .optional()?;
                    let Some(state) = state else {
                        return Ok(Err(StoreError::UnknownMail { id }));
                    };
                    let state = mail_admin::stored_state(&state).map_err(|e| {
                        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, e.into())
                    })?;
                    if let Err(refused) = mail_admin::check_retry(id, deployment, state) {
                        return Ok(Err(refused));
                    }
                    if state == MailState::Interrupted {
                        // Its starts kept: it runs as its next attempt.
                        tx.prepare_cached(&format!(
                            "UPDATE mail SET state = 'inbox', awaiting = {OPEN_QUESTION}
                             WHERE id = ?1 AND state = 'interrupted'"
                        ))?
                        .execute(params![id])?;
                        tx.prepare_cached(
                            "INSERT INTO mail_history (mail_id, ended_at_ms, how) VALUES (?1, ?2, ?3)",
                        )?
                        .execute(params![id, at_ms, mail_admin::retried_how(by, false)])?;
                        tx.commit()?;
                        return Ok(Ok(Retried {
                            ids: vec![id],
                            left: 0,
                        }));
                    }
                    vec![id]
                }
                None => tx
                    .prepare_cached(
                        "SELECT id FROM mail WHERE deployment = ?1 AND state = 'dead' ORDER BY id LIMIT ?2",
                    )?
                    .query_map(params![deployment, RETRY_BATCH as i64], |r| r.get(0))?
                    .collect::<rusqlite::Result<_>>()?,
            };
            let how = mail_admin::retried_how(by, true);
            for id in &ids {
                tx.prepare_cached(&format!(
                    "UPDATE mail SET state = 'inbox', failures = 0, deliveries = 0, starts = 0, dead_at_ms = NULL,
                         first_taken_at_ms = NULL, awaiting = {OPEN_QUESTION}
                     WHERE id = ?1 AND state = 'dead'"
                ))?
                .execute(params![id])?;
                tx.prepare_cached(
                    "INSERT INTO mail_history (mail_id, ended_at_ms, how) VALUES (?1, ?2, ?3)",
                )?
                .execute(params![id, at_ms, how])?;
            }
            let left: u64 = tx
                .prepare_cached("SELECT dead FROM mail_counts WHERE deployment = ?1")?
                .query_row(params![deployment], |r| r.get(0))
                .optional()?
                .unwrap_or(0);
            tx.commit()?;
            Ok(Ok(Retried { ids, left }))
        })()
        .map_err(|e| self.read_fail("retrying dead mail", &e))?
    }

    /// Deletes dead items quarantined before `dead_before_ms` (of one
    /// deployment, or all), with their histories; returns how many went per
    /// deployment.
    fn purge_dead_mail(
        &mut self,
        deployment: Option<&str>,
        dead_before_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let cut = i64::try_from(dead_before_ms).unwrap_or(i64::MAX);
        let mut purged: BTreeMap<String, u64> = BTreeMap::new();
        loop {
            let batch = (|| -> rusqlite::Result<usize> {
                let tx = super::write(&mut self.conn, self.grouped)?;
                let rows: Vec<(u64, String)> = tx
                    .prepare_cached(
                        "SELECT id, deployment FROM mail
                         WHERE state = 'dead' AND dead_at_ms < ?1 AND (?2 IS NULL OR deployment = ?2)
                         ORDER BY id LIMIT ?3",
                    )?
                    .query_map(params![cut, deployment, PURGE_BATCH], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?
                    .collect::<rusqlite::Result<_>>()?;
                for (id, d) in &rows {
                    tx.prepare_cached("DELETE FROM mail_history WHERE mail_id = ?1")?
                        .execute(params![id])?;
                    tx.prepare_cached("DELETE FROM questions WHERE mail_id = ?1")?
                        .execute(params![id])?;
                    tx.prepare_cached("DELETE FROM mail WHERE id = ?1")?
                        .execute(params![id])?;
                    *purged.entry(d.clone()).or_default() += 1;
                }
                tx.commit()?;
                Ok(rows.len())
            })()
            .map_err(|e| self.read_fail("purging dead mail", &e))?;
            if (batch as i64) < PURGE_BATCH {
                return Ok(purged.into_iter().collect());
            }
        }
    }
}

/// Most dead items one purge transaction deletes.
const PURGE_BATCH: i64 = 5_000;
