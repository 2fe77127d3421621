//! Questions and answers in PostgreSQL: the same rows and rules as
//! SQLite's; an answer is stored in one transaction with the item's
//! release, the item's row locked so two answers never both win.

use postgres::Row;
use wfhost_policy::item;

use super::session::Statements;
use super::{PostgresStore, signed, unsigned};
use crate::store::questions::{self, Answer, Answering, OPEN_QUESTION, Question};
use crate::store::{Holder, QuestionStore, StoreError};

/// The columns [`question`] reads, in order.
const COLUMNS: &str = "q.deployment, q.mail_id, q.key, q.prompt, q.attempt, q.asked_at_ms,
     q.answer, q.answered_at_ms, q.answered_by";

/// One row of [`COLUMNS`], or what is wrong with it.
fn question(r: &Row) -> Result<Question, String> {
    let get = |e: postgres::Error| format!("a stored question has the wrong type: {e}");
    let what = "questions";
    let answer: Option<Vec<u8>> = r.try_get(6).map_err(get)?;
    Ok(Question {
        deployment: r.try_get(0).map_err(get)?,
        id: unsigned(what, r.try_get(1).map_err(get)?)?,
        key: r.try_get(2).map_err(get)?,
        prompt: r.try_get(3).map_err(get)?,
        attempt: u32::try_from(r.try_get::<_, i64>(4).map_err(get)?).unwrap_or(u32::MAX),
        asked_at_ms: unsigned(what, r.try_get(5).map_err(get)?)?,
        answer: match answer {
            Some(value) => Some(Answer {
                value,
                at_ms: unsigned(
                    what,
                    r.try_get::<_, Option<i64>>(7).map_err(get)?.unwrap_or(0),
                )?,
                by: r
                    .try_get::<_, Option<String>>(8)
                    .map_err(get)?
                    .unwrap_or_default(),
            }),
            None => None,
        },
    })
}

impl QuestionStore for PostgresStore {
    fn answer_question(
        &mut self,
        id: u64,
        key: &str,
        value: &[u8],
        by: &str,
        at_ms: u64,
    ) -> Result<Option<Answering>, StoreError> {
        let Ok(row_id) = i64::try_from(id) else {
            return Ok(None);
        };
        let session = self.session()?;
        let result = (|| -> Result<Result<Option<Answering>, String>, postgres::Error> {
            let mut tx = session.begin()?;
            let Some(item) = tx.query_opt(
                "SELECT deployment, state, outcome, holder_channel, holder_pid FROM mail
                 WHERE id = $1 FOR UPDATE",
                &[&row_id],
            )?
            else {
                return Ok(Ok(None));
            };
            let deployment: String = item.try_get(0)?;
            let state: String = item.try_get(1)?;
            if matches!(state.as_str(), "done" | "dead") {
                let outcome: Option<String> = item.try_get(2)?;
                let how = item::ended_as(&state, outcome.as_deref());
                return Ok(Ok(Some(Answering::Ended { deployment, how })));
            }
            let channel: Option<String> = item.try_get(3)?;
            let pid: Option<i64> = item.try_get(4)?;
            let holder = channel.zip(pid).map(|(channel_id, pid)| Holder {
                channel_id,
                pid: u32::try_from(pid).unwrap_or(0),
            });
            let Some(row) = tx.query_opt(
                &format!("SELECT {COLUMNS} FROM questions q WHERE q.mail_id = $1 AND q.key = $2"),
                &[&row_id, &key],
            )?
            else {
                let keys = tx
                    .query(
                        "SELECT key FROM questions WHERE mail_id = $1 ORDER BY key",
                        &[&row_id],
                    )?
                    .iter()
                    .map(|r| r.try_get(0))
                    .collect::<Result<Vec<String>, _>>()?;
                return Ok(Ok(Some(Answering::UnknownKey { deployment, keys })));
            };
            let stored = match question(&row) {
                Ok(q) => q,
                Err(e) => return Ok(Err(e)),
            };
            if let Some(first) = stored.answer {
                return Ok(Ok(Some(questions::again(deployment, holder, first, value))));
            }
            tx.execute(
                "UPDATE questions SET answer = $3, answered_at_ms = $4, answered_by = $5
                 WHERE mail_id = $1 AND key = $2",
                &[&row_id, &key, &value, &signed(at_ms), &by],
            )?;
            tx.execute(
                &format!(
                    "UPDATE mail SET awaiting = false WHERE id = $1 AND awaiting AND NOT {OPEN_QUESTION}"
                ),
                &[&row_id],
            )?;
            tx.commit()?;
            Ok(Ok(Some(Answering::New { deployment, holder })))
        })();
        result
            .map_err(|e| self.fail("answering a question", &e))?
            .map_err(|what| self.corrupt(what))
    }

    fn open_questions(
        &mut self,
        deployment: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Question>, StoreError> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.session()?.query(
            &format!(
                "SELECT {COLUMNS} FROM questions q JOIN mail m ON m.id = q.mail_id
                 WHERE q.answer IS NULL AND ($1::TEXT IS NULL OR q.deployment = $1)
                   AND m.state IN ('inbox', 'processing', 'interrupted')
                 ORDER BY q.asked_at_ms, q.mail_id, q.key LIMIT $2"
            ),
            &[&deployment, &limit],
        );
        let rows = rows.map_err(|e| self.fail("listing open questions", &e))?;
        rows.iter()
            .map(question)
            .collect::<Result<_, _>>()
            .map_err(|what| self.corrupt(what))
    }

    fn questions_of(&mut self, id: u64) -> Result<Vec<Question>, StoreError> {
        let Ok(row_id) = i64::try_from(id) else {
            return Ok(Vec::new());
        };
        let rows = self.session()?.query(
            &format!(
                "SELECT {COLUMNS} FROM questions q WHERE q.mail_id = $1
                 ORDER BY q.asked_at_ms, q.key"
            ),
            &[&row_id],
        );
        let rows = rows.map_err(|e| self.fail("reading an item's questions", &e))?;
        rows.iter()
            .map(question)
            .collect::<Result<_, _>>()
            .map_err(|what| self.corrupt(what))
    }
}
