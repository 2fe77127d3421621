//! The journal in SQLite: `journal` rows, and the one-row `journal_head`
//! holding the highest seq ever assigned (with its hash) and the head the
//! start-up check last verified. An append is one IMMEDIATE transaction,
//! so appends from every connection and process are serialized by
//! SQLite's write lock and make one chain.

use rusqlite::{OptionalExtension, params};

use super::SqliteStore;
use crate::journal::{JournalHead, JournalHeads, JournalRecord};
use crate::store::journal_row::{self, Appended, JournalRow};
use crate::store::{JournalStore, StoreError};

impl JournalStore for SqliteStore {
    /// Reads the head, seals the next record with `seal`, inserts it and
    /// makes it the head, in one write transaction.
    fn append_sealed(
        &mut self,
        seal: &dyn Fn(JournalHead) -> JournalRecord,
    ) -> Result<JournalRecord, StoreError> {
        let result = (|| -> rusqlite::Result<Appended> {
            let tx = super::write(&mut self.conn, self.grouped)?;
            let row: Option<(i64, Vec<u8>)> = tx
                .prepare_cached("SELECT seq, hash FROM journal_head WHERE id = 1")?
                .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()?;
            let Some((seq, hash)) = row else {
                return Ok(Appended::BadHead(
                    "the journal's head row is missing".into(),
                ));
            };
            let head = match journal_row::head("the journal's head", seq, &hash) {
                Ok(head) => head,
                Err(what) => return Ok(Appended::BadHead(what)),
            };
            // The record chained onto must at least be readable.
            let tip: Option<Vec<u8>> = tx
                .prepare_cached("SELECT hash FROM journal WHERE seq = ?1")?
                .query_row(params![head.seq], |r| r.get(0))
                .optional()?;
            if let Some(Err(what)) = tip.map(|hash| journal_row::check_tip(head.seq, &hash)) {
                return Ok(Appended::BadHead(what));
            }
            let record = seal(head);
            let inserted = tx
                .prepare_cached(
                    "INSERT INTO journal (seq, at_ms, kind, deployment, body, prev_hash, hash, key_id, signature)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (seq) DO NOTHING",
                )?
                .execute(params![
                    record.seq,
                    record.at_ms,
                    record.kind,
                    record.deployment,
                    record.body,
                    record.prev_hash.as_slice(),
                    record.hash.as_slice(),
                    record.key_id.0.as_slice(),
                    record.signature
                ])?;
            if inserted == 0 {
                return Ok(Appended::Taken(record.seq));
            }
            tx.prepare_cached("UPDATE journal_head SET seq = ?1, hash = ?2 WHERE id = 1")?
                .execute(params![record.seq, record.hash.as_slice()])?;
            tx.commit()?;
            Ok(Appended::Done(record))
        })();
        result
            .map_err(|e| self.fail("appending to the journal", &e))?
            .into_result(&self.location)
    }

    /// The head and the last verified head.
    fn journal_heads(&mut self) -> Result<JournalHeads, StoreError> {
        type Row = (i64, Vec<u8>, Option<i64>, Option<Vec<u8>>);
        let row: Option<Row> = self
            .conn
            .prepare_cached(
                "SELECT seq, hash, verified_seq, verified_hash FROM journal_head WHERE id = 1",
            )
            .and_then(|mut stmt| {
                stmt.query_row([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
                    .optional()
            })
            .map_err(|e| self.read_fail("reading the journal's head", &e))?;
        let Some((seq, hash, verified_seq, verified_hash)) = row else {
            return Err(self.corrupt("the journal's head row is missing".into()));
        };
        let head =
            journal_row::head("the journal's head", seq, &hash).map_err(|w| self.corrupt(w))?;
        let verified = match (verified_seq, verified_hash) {
            (Some(seq), Some(hash)) => Some(
                journal_row::head("the journal's verified head", seq, &hash)
                    .map_err(|w| self.corrupt(w))?,
            ),
            _ => None,
        };
        Ok(JournalHeads { head, verified })
    }

    /// Records `head` as the last verified one.
    fn set_verified_head(&mut self, head: JournalHead) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE journal_head SET verified_seq = ?1, verified_hash = ?2 WHERE id = 1",
            )
            .and_then(|mut stmt| stmt.execute(params![head.seq, head.hash.as_slice()]))
            .map(drop)
            .map_err(|e| self.fail("recording the verified journal head", &e))
    }

    fn read_journal(
        &mut self,
        deployment: Option<&str>,
        after: u64,
        limit: usize,
    ) -> Result<Vec<JournalRecord>, StoreError> {
        // No stored seq is above i64::MAX.
        let Ok(after) = i64::try_from(after) else {
            return Ok(Vec::new());
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = (|| -> rusqlite::Result<Vec<JournalRow>> {
            let mut stmt = self.conn.prepare_cached(
                "SELECT seq, at_ms, kind, deployment, body, prev_hash, hash, key_id, signature
                 FROM journal WHERE (?1 IS NULL OR deployment = ?1) AND seq > ?2
                 ORDER BY seq LIMIT ?3",
            )?;
            let rows = stmt.query_map(params![deployment, after, limit], |row| {
                Ok(JournalRow {
                    seq: row.get(0)?,
                    at_ms: row.get(1)?,
                    kind: row.get(2)?,
                    deployment: row.get(3)?,
                    body: row.get(4)?,
                    prev_hash: row.get(5)?,
                    hash: row.get(6)?,
                    key_id: row.get(7)?,
                    signature: row.get(8)?,
                })
            })?;
            rows.collect()
        })()
        .map_err(|e| self.read_fail("reading the journal", &e))?;
        rows.into_iter()
            .map(|row| row.into_record().map_err(|what| self.corrupt(what)))
            .collect()
    }
}
