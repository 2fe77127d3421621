//! Questions and answers in SQLite: one `questions` row per (item, key);
//! an answer is stored in one transaction with the item's release.

use rusqlite::{OptionalExtension, Row, params};
use wfhost_policy::item;

use super::SqliteStore;
use crate::store::questions::{self, Answer, Answering, OPEN_QUESTION, Question};
use crate::store::{Holder, QuestionStore, StoreError};

/// The columns [`question`] reads, in order.
const COLUMNS: &str = "q.deployment, q.mail_id, q.key, q.prompt, q.attempt, q.asked_at_ms,
     q.answer, q.answered_at_ms, q.answered_by";

/// One row of [`COLUMNS`].
fn question(r: &Row<'_>) -> rusqlite::Result<Question> {
    let answer: Option<Vec<u8>> = r.get(6)?;
    Ok(Question {
        deployment: r.get(0)?,
        id: r.get(1)?,
        key: r.get(2)?,
        prompt: r.get(3)?,
        attempt: r.get(4)?,
        asked_at_ms: r.get(5)?,
        answer: match answer {
            Some(value) => Some(Answer {
                value,
                at_ms: r.get::<_, Option<u64>>(7)?.unwrap_or(0),
                by: r.get::<_, Option<String>>(8)?.unwrap_or_default(),
            }),
            None => None,
        },
    })
}

impl QuestionStore for SqliteStore {
    fn answer_question(
        &mut self,
        id: u64,
        key: &str,
        value: &[u8],
        by: &str,
        at_ms: u64,
    ) -> Result<Option<Answering>, StoreError> {
        let Ok(row) = i64::try_from(id) else {
            return Ok(None);
        };
        (|| -> rusqlite::Result<Option<Answering>> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let found = tx
                .prepare_cached(
                    "SELECT deployment, state, outcome, holder_channel, holder_pid FROM mail
                     WHERE id = ?1",
                )?
                .query_row(params![row], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, Option<String>>(2)?,
                        r.get::<_, Option<String>>(3)?,
                        r.get::<_, Option<u32>>(4)?,
                    ))
                })
                .optional()?;
            let Some((deployment, state, outcome, channel, pid)) = found else {
                return Ok(None);
            };
            if matches!(state.as_str(), "done" | "dead") {
                let how = item::ended_as(&state, outcome.as_deref());
                return Ok(Some(Answering::Ended { deployment, how }));
            }
            let holder = channel.zip(pid).map(|(channel_id, pid)| Holder { channel_id, pid });
            let stored = tx
                .prepare_cached(&format!(
                    "SELECT {COLUMNS} FROM questions q WHERE q.mail_id = ?1 AND q.key = ?2"
                ))?
                .query_row(params![row, key], question)
                .optional()?;
            let Some(stored) = stored else {
                let keys = tx
                    .prepare_cached("SELECT key FROM questions WHERE mail_id = ?1 ORDER BY key")?
                    .query_map(params![row], |r| r.get(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()?;
                return Ok(Some(Answering::UnknownKey { deployment, keys }));
            };
            if let Some(first) = stored.answer {
                return Ok(Some(questions::again(deployment, holder, first, value)));
            }
            tx.prepare_cached(
                "UPDATE questions SET answer = ?3, answered_at_ms = ?4, answered_by = ?5
                 WHERE mail_id = ?1 AND key = ?2",
            )?
            .execute(params![row, key, value, at_ms, by])?;
            tx.prepare_cached(&format!(
                "UPDATE mail SET awaiting = 0 WHERE id = ?1 AND awaiting = 1 AND NOT {OPEN_QUESTION}"
            ))?
            .execute(params![row])?;
            tx.commit()?;
            Ok(Some(Answering::New { deployment, holder }))
        })()
        .map_err(|e| self.fail("answering a question", &e))
    }

    fn open_questions(
        &mut self,
        deployment: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Question>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM questions q JOIN mail m ON m.id = q.mail_id
                 WHERE q.answer IS NULL AND (?1 IS NULL OR q.deployment = ?1)
                   AND m.state IN ('inbox', 'processing', 'interrupted')
                 ORDER BY q.asked_at_ms, q.mail_id, q.key LIMIT ?2"
            ))
            .and_then(|mut stmt| {
                stmt.query_map(params![deployment, limit], question)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.read_fail("listing open questions", &e))
    }

    fn questions_of(&mut self, id: u64) -> Result<Vec<Question>, StoreError> {
        let Ok(row) = i64::try_from(id) else {
            return Ok(Vec::new());
        };
        self.conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM questions q WHERE q.mail_id = ?1
                 ORDER BY q.asked_at_ms, q.key"
            ))
            .and_then(|mut stmt| {
                stmt.query_map(params![row], question)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.read_fail("reading an item's questions", &e))
    }
}
