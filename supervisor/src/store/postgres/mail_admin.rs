//! The operator's mail in PostgreSQL: the same pages, items, payload
//! pieces, retries and purges as SQLite's, under the rules of
//! `store::mail_admin`.

use std::collections::BTreeMap;

use postgres::Row;
use postgres::types::ToSql;

use super::mail::delete_ids;
use super::session::Statements;
use super::{PostgresStore, col, signed, unsigned};
use crate::store::held::Holder;
use crate::store::mail_admin::{
    self, HistoryEntry, LastFailure, MailPage, MailQuery, MailState, MailView, RETRY_BATCH, Retried,
};
use crate::store::questions::{OPEN_QUESTION, open_question};
use crate::store::{MailAdmin, StoreError};

/// The columns [`view`] reads, in its order.
const COLUMNS: &str = concat!(
    "id, deployment, state, starts, failures, enqueued_at_ms,
     octet_length(payload)::BIGINT, holder_channel, holder_pid, taken_at_ms, last_cause,
     last_pid, last_failed_at_ms, outcome, done_at_ms, dead_at_ms,
     coalesce(octet_length(result), 0)::BIGINT, ",
    open_question!()
);

const HISTORY: &str =
    "SELECT mail_id, attempt, holder_pid, holder_channel, taken_at_ms, ended_at_ms, how
     FROM mail_history";

/// A stored count or number that must fit a u32.
fn small(what: &str, value: i64) -> Result<u32, String> {
    u32::try_from(value).map_err(|_| format!("{what}: a stored value is out of range: {value}"))
}

/// An optional stored BIGINT as a u64.
fn opt_u64(what: &str, value: Option<i64>) -> Result<Option<u64>, String> {
    value.map(|v| unsigned(what, v)).transpose()
}

/// A row of [`COLUMNS`] as a view without its history, or what is wrong.
fn view(r: &Row) -> Result<MailView, String> {
    let what = "mail";
    let state: String = col(r, 2)?;
    let holder = match (col::<Option<String>>(r, 7)?, col::<Option<i64>>(r, 8)?) {
        (Some(channel_id), Some(pid)) => Some(Holder {
            channel_id,
            pid: small(what, pid)?,
        }),
        _ => None,
    };
    let last_failure = match (
        col::<Option<String>>(r, 10)?,
        col::<Option<i64>>(r, 11)?,
        col::<Option<i64>>(r, 12)?,
    ) {
        (Some(cause), Some(pid), Some(at)) => Some(LastFailure {
            cause,
            pid: small(what, pid)?,
            at_ms: unsigned(what, at)?,
        }),
        _ => None,
    };
    Ok(MailView {
        id: unsigned(what, col(r, 0)?)?,
        deployment: col(r, 1)?,
        state: mail_admin::stored_state(&state)?,
        attempts: small(what, col(r, 3)?)?,
        failures: small(what, col(r, 4)?)?,
        enqueued_at_ms: unsigned(what, col(r, 5)?)?,
        payload_bytes: unsigned(what, col(r, 6)?)?,
        holder,
        taken_at_ms: opt_u64(what, col(r, 9)?)?,
        last_failure,
        outcome: col(r, 13)?,
        done_at_ms: opt_u64(what, col(r, 14)?)?,
        dead_at_ms: opt_u64(what, col(r, 15)?)?,
        result_bytes: unsigned(what, col(r, 16)?)?,
        waiting_for_answer: col(r, 17)?,
        history: Vec::new(),
    })
}

/// A `mail_history` row (after its `mail_id`, column 0), or what is wrong.
fn entry(r: &Row) -> Result<HistoryEntry, String> {
    let what = "mail_history";
    Ok(HistoryEntry {
        attempt: col::<Option<i64>>(r, 1)?
            .map(|a| small(what, a))
            .transpose()?,
        pid: col::<Option<i64>>(r, 2)?
            .map(|p| small(what, p))
            .transpose()?,
        channel_id: col(r, 3)?,
        taken_at_ms: opt_u64(what, col(r, 4)?)?,
        ended_at_ms: opt_u64(what, col(r, 5)?)?,
        how: col(r, 6)?,
    })
}

type Args = Vec<Box<dyn ToSql + Sync>>;

/// A page's rows, its histories' rows, and the count after it (if full).
type PageRows = (Vec<Row>, Vec<Row>, Option<i64>);

/// The `WHERE` clause of `query` (ids above `$1`, then its deployment and
/// state if given) and its arguments.
fn filter(query: &MailQuery) -> (String, Args) {
    let mut clauses = vec!["id > $1".to_owned()];
    let mut args: Args = vec![Box::new(signed(query.after))];
    if let Some(d) = &query.deployment {
        args.push(Box::new(d.clone()));
        clauses.push(format!("deployment = ${}", args.len()));
    }
    if let Some(s) = query.state {
        args.push(Box::new(s.as_str()));
        clauses.push(format!("state = ${}", args.len()));
    }
    (clauses.join(" AND "), args)
}

fn bound(args: &Args) -> Vec<&(dyn ToSql + Sync)> {
    args.iter().map(|a| a.as_ref()).collect()
}

impl MailAdmin for PostgresStore {
    /// A page of items with their histories, and how many more match.
    fn list_mail(&mut self, query: &MailQuery) -> Result<MailPage, StoreError> {
        let limit = mail_admin::page_size(query.limit);
        let (where_, mut args) = filter(query);
        args.push(Box::new(i64::try_from(limit).unwrap_or(i64::MAX)));
        let at_limit = args.len();
        let page =
            format!("SELECT {COLUMNS} FROM mail WHERE {where_} ORDER BY id LIMIT ${at_limit}");
        let history = format!(
            "{HISTORY} WHERE mail_id IN (SELECT id FROM mail WHERE {where_} ORDER BY id LIMIT ${at_limit})
             ORDER BY mail_id, seq"
        );
        let client = self.client()?;
        let read = (|| -> Result<PageRows, postgres::Error> {
            // One snapshot: the page and its histories agree.
            let mut tx = client
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let rows = tx.query(&page, &bound(&args))?;
            let history = tx.query(&history, &bound(&args))?;
            let last = match rows.last() {
                Some(r) if rows.len() == limit => Some(r.try_get::<_, i64>(0)?),
                _ => None,
            };
            let more = match last {
                Some(last) => {
                    let rest = MailQuery {
                        after: u64::try_from(last).unwrap_or(0),
                        ..query.clone()
                    };
                    let (where_, args) = filter(&rest);
                    let count = format!("SELECT count(*) FROM mail WHERE {where_}");
                    Some(tx.query_one(&count, &bound(&args))?.try_get(0)?)
                }
                None => None,
            };
            tx.commit()?;
            Ok((rows, history, more))
        })();
        let (rows, history, more) = read.map_err(|e| self.fail("listing mail", &e))?;
        (|| -> Result<MailPage, String> {
            let mut by_id: BTreeMap<u64, Vec<HistoryEntry>> = BTreeMap::new();
            for r in &history {
                let id = unsigned("mail_history", col(r, 0)?)?;
                by_id.entry(id).or_default().push(entry(r)?);
            }
            let mut items = rows.iter().map(view).collect::<Result<Vec<_>, _>>()?;
            for item in &mut items {
                item.history = by_id.remove(&item.id).unwrap_or_default();
            }
            let more = more.map(|m| unsigned("count", m)).transpose()?.unwrap_or(0);
            Ok(MailPage { items, more })
        })()
        .map_err(|what| self.corrupt(what))
    }

    /// Item `id` with its history.
    fn mail_item(&mut self, id: u64) -> Result<Option<MailView>, StoreError> {
        let Ok(row_id) = i64::try_from(id) else {
            return Ok(None);
        };
        let client = self.client()?;
        let read = (|| -> Result<Option<(Row, Vec<Row>)>, postgres::Error> {
            let mut tx = client
                .build_transaction()
                .isolation_level(postgres::IsolationLevel::RepeatableRead)
                .read_only(true)
                .start()?;
            let Some(row) = tx.query_opt(
                &format!("SELECT {COLUMNS} FROM mail WHERE id = $1"),
                &[&row_id],
            )?
            else {
                return Ok(None);
            };
            let history = tx.query(
                &format!("{HISTORY} WHERE mail_id = $1 ORDER BY seq"),
                &[&row_id],
            )?;
            tx.commit()?;
            Ok(Some((row, history)))
        })();
        let Some((row, history)) = read.map_err(|e| self.fail("reading a mail item", &e))? else {
            return Ok(None);
        };
        (|| -> Result<MailView, String> {
            let mut item = view(&row)?;
            item.history = history.iter().map(entry).collect::<Result<_, _>>()?;
            Ok(item)
        })()
        .map(Some)
        .map_err(|what| self.corrupt(what))
    }

    /// At most `len` bytes of item `id`'s payload from `offset`.
    fn mail_payload(
        &mut self,
        id: u64,
        offset: u64,
        len: usize,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        let (Ok(row_id), Ok(start), Ok(len)) = (
            i64::try_from(id),
            i32::try_from(offset.saturating_add(1)),
            i32::try_from(len),
        ) else {
            return Ok(None);
        };
        let row = self.session()?.query_opt(
            "SELECT substring(payload FROM $2 FOR $3) FROM mail WHERE id = $1",
            &[&row_id, &start, &len],
        );
        let row = row.map_err(|e| self.fail("reading a mail payload", &e))?;
        row.map(|r| col::<Vec<u8>>(&r, 0))
            .transpose()
            .map_err(|what| self.corrupt(what))
    }

    /// Item `id`'s result.
    fn mail_result(&mut self, id: u64) -> Result<Option<Vec<u8>>, StoreError> {
        let Ok(row_id) = i64::try_from(id) else {
            return Ok(None);
        };
        let row = self.session()?.query_opt(
            "SELECT coalesce(result, ''::bytea) FROM mail WHERE id = $1",
            &[&row_id],
        );
        let row = row.map_err(|e| self.fail("reading a mail result", &e))?;
        row.map(|r| col::<Vec<u8>>(&r, 0))
            .transpose()
            .map_err(|what| self.corrupt(what))
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
        let how = mail_admin::retried_how(by, true);
        let location = self.location.clone();
        let session = self.session()?;
        let result = (|| -> Result<Result<Retried, StoreError>, postgres::Error> {
            let mut tx = session.begin()?;
            let ids: Vec<i64> = match id {
                Some(id) => {
                    let row = tx.query_opt(
                        "SELECT state FROM mail WHERE id = $1 AND deployment = $2 FOR UPDATE",
                        &[&i64::try_from(id).unwrap_or(-1), &deployment],
                    )?;
                    let Some(row) = row else {
                        return Ok(Err(StoreError::UnknownMail { id }));
                    };
                    let state: String = row.try_get(0)?;
                    let checked = mail_admin::stored_state(&state)
                        .map_err(|what| StoreError::Corrupt {
                            location: location.clone(),
                            what,
                        })
                        .and_then(|state| {
                            mail_admin::check_retry(id, deployment, state).map(|()| state)
                        });
                    match checked {
                        Err(refused) => return Ok(Err(refused)),
                        Ok(MailState::Interrupted) => {
                            // Its starts kept: it runs as its next attempt.
                            tx.execute(
                                &format!(
                                    "UPDATE mail SET state = 'inbox', awaiting = {OPEN_QUESTION}
                                     WHERE id = $1 AND state = 'interrupted'"
                                ),
                                &[&signed(id)],
                            )?;
                            tx.execute(
                                "INSERT INTO mail_history (mail_id, ended_at_ms, how) VALUES ($1, $2, $3)",
                                &[&signed(id), &signed(at_ms), &mail_admin::retried_how(by, false)],
                            )?;
                            tx.commit()?;
                            return Ok(Ok(Retried {
                                ids: vec![id],
                                left: 0,
                            }));
                        }
                        Ok(_) => {}
                    }
                    vec![signed(id)]
                }
                None => tx
                    .query(
                        "SELECT id FROM mail WHERE deployment = $1 AND state = 'dead'
                         ORDER BY id LIMIT $2 FOR UPDATE",
                        &[&deployment, &(RETRY_BATCH as i64)],
                    )?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<_, _>>()?,
            };
            if !ids.is_empty() {
                tx.execute(
                    &format!(
                        "UPDATE mail SET state = 'inbox', failures = 0, deliveries = 0, starts = 0,
                             dead_at_ms = NULL, first_taken_at_ms = NULL, awaiting = {OPEN_QUESTION}
                         WHERE id = ANY($1) AND state = 'dead'"
                    ),
                    &[&ids],
                )?;
                tx.execute(
                    "INSERT INTO mail_history (mail_id, ended_at_ms, how)
                     SELECT unnest($1::BIGINT[]), $2, $3",
                    &[&ids, &signed(at_ms), &how],
                )?;
            }
            let left: Option<i64> = tx
                .query_opt(
                    "SELECT dead FROM mail_counts WHERE deployment = $1",
                    &[&deployment],
                )?
                .map(|r| r.try_get(0))
                .transpose()?;
            tx.commit()?;
            Ok(Ok(Retried {
                ids: ids.iter().map(|&i| u64::try_from(i).unwrap_or(0)).collect(),
                left: left.and_then(|l| u64::try_from(l).ok()).unwrap_or(0),
            }))
        })();
        result.map_err(|e| self.fail("retrying dead mail", &e))?
    }

    /// Deletes dead items quarantined before `dead_before_ms` (of one
    /// deployment, or all), with their histories; returns how many went per
    /// deployment.
    fn purge_dead_mail(
        &mut self,
        deployment: Option<&str>,
        dead_before_ms: u64,
    ) -> Result<Vec<(String, u64)>, StoreError> {
        let cut = signed(dead_before_ms);
        let mut purged: BTreeMap<String, u64> = BTreeMap::new();
        loop {
            let session = self.session()?;
            let batch = (|| -> Result<usize, postgres::Error> {
                let mut tx = session.begin()?;
                let rows = tx.query(
                    "SELECT id, deployment FROM mail
                     WHERE state = 'dead' AND dead_at_ms < $1 AND ($2::TEXT IS NULL OR deployment = $2)
                     ORDER BY id LIMIT $3 FOR UPDATE",
                    &[&cut, &deployment, &PURGE_BATCH],
                )?;
                let mut ids = Vec::with_capacity(rows.len());
                for r in &rows {
                    ids.push(r.try_get::<_, i64>(0)?);
                    *purged.entry(r.try_get(1)?).or_default() += 1;
                }
                delete_ids(&mut tx, &ids)?;
                tx.commit()?;
                Ok(rows.len())
            })();
            let batch = batch.map_err(|e| self.fail("purging dead mail", &e))?;
            if (batch as i64) < PURGE_BATCH {
                return Ok(purged.into_iter().collect());
            }
        }
    }
}

/// Most dead items one purge transaction deletes.
const PURGE_BATCH: i64 = 5_000;
