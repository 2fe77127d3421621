//! The journal in PostgreSQL: `journal` rows and the one-row
//! `journal_head`. An append locks the head row (`FOR UPDATE`) for its
//! transaction, so appends from every connection and host are serialized
//! and make one chain.

use super::session::Statements;
use super::{PostgresStore, col, fence, signed, unsigned};
use crate::journal::{JournalHead, JournalHeads, JournalRecord};
use crate::store::journal_row::{self, Appended, JournalRow};
use crate::store::{JournalStore, StoreError};

impl JournalStore for PostgresStore {
    /// Reads the head under a row lock, seals the next record with `seal`,
    /// inserts it and makes it the head, in one transaction.
    fn append_sealed(
        &mut self,
        seal: &dyn Fn(JournalHead) -> JournalRecord,
    ) -> Result<JournalRecord, StoreError> {
        let fenced = self.fence.clone();
        let session = self.session()?;
        let result = (|| -> Result<Appended, postgres::Error> {
            let mut tx = session.begin()?;
            let Some(row) = tx.query_opt(
                "SELECT seq, hash FROM journal_head WHERE id = 1 FOR UPDATE",
                &[],
            )?
            else {
                return Ok(Appended::BadHead(
                    "the journal's head row is missing".into(),
                ));
            };
            let hash: Vec<u8> = row.try_get(1)?;
            let head = match journal_row::head("the journal's head", row.try_get(0)?, &hash) {
                Ok(head) => head,
                Err(what) => return Ok(Appended::BadHead(what)),
            };
            // The record chained onto must at least be readable.
            let tip = tx.query_opt(
                "SELECT hash FROM journal WHERE seq = $1",
                &[&signed(head.seq)],
            )?;
            if let Some(tip) = tip
                && let Err(what) = journal_row::check_tip(head.seq, &tip.try_get::<_, Vec<u8>>(0)?)
            {
                return Ok(Appended::BadHead(what));
            }
            let record = seal(head);
            if let Some(deployment) = &record.deployment {
                fence::check(&mut tx, fenced.as_deref(), deployment)?;
            }
            let inserted = tx.execute(
                "INSERT INTO journal (seq, at_ms, kind, deployment, body, prev_hash, hash, key_id, signature)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (seq) DO NOTHING",
                &[
                    &signed(record.seq),
                    &signed(record.at_ms),
                    &record.kind,
                    &record.deployment,
                    &record.body,
                    &record.prev_hash.as_slice(),
                    &record.hash.as_slice(),
                    &record.key_id.0.as_slice(),
                    &record.signature,
                ],
            )?;
            if inserted == 0 {
                return Ok(Appended::Taken(record.seq));
            }
            tx.execute(
                "UPDATE journal_head SET seq = $1, hash = $2 WHERE id = 1",
                &[&signed(record.seq), &record.hash.as_slice()],
            )?;
            tx.commit()?;
            Ok(Appended::Done(record))
        })();
        result
            .map_err(|e| self.fail("appending to the journal", &e))?
            .into_result(&self.location)
    }

    /// The head and the last verified head.
    fn journal_heads(&mut self) -> Result<JournalHeads, StoreError> {
        let row = self.session()?.query_opt(
            "SELECT seq, hash, verified_seq, verified_hash FROM journal_head WHERE id = 1",
            &[],
        );
        let row = row.map_err(|e| self.fail("reading the journal's head", &e))?;
        let Some(row) = row else {
            return Err(self.corrupt("the journal's head row is missing".into()));
        };
        let read = || -> Result<JournalHeads, String> {
            let hash: Vec<u8> = col(&row, 1)?;
            let head = journal_row::head("the journal's head", col(&row, 0)?, &hash)?;
            let verified = match (
                col::<Option<i64>>(&row, 2)?,
                col::<Option<Vec<u8>>>(&row, 3)?,
            ) {
                (Some(seq), Some(hash)) => Some(journal_row::head(
                    "the journal's verified head",
                    seq,
                    &hash,
                )?),
                _ => None,
            };
            Ok(JournalHeads { head, verified })
        };
        read().map_err(|what| self.corrupt(what))
    }

    /// Records `head` as the last verified one.
    fn set_verified_head(&mut self, head: JournalHead) -> Result<(), StoreError> {
        let result = self.session()?.execute(
            "UPDATE journal_head SET verified_seq = $1, verified_hash = $2 WHERE id = 1",
            &[&signed(head.seq), &head.hash.as_slice()],
        );
        result
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
        let rows = self.session()?.query(
            "SELECT seq, at_ms, kind, deployment, body, prev_hash, hash, key_id, signature
             FROM journal WHERE ($1::TEXT IS NULL OR deployment = $1) AND seq > $2
             ORDER BY seq LIMIT $3",
            &[&deployment, &after, &limit],
        );
        let rows = rows.map_err(|e| self.fail("reading the journal", &e))?;
        rows.iter()
            .map(|r| {
                let seq: i64 = col(r, 0)?;
                let what = format!("journal record {seq}");
                JournalRow {
                    seq: unsigned(&what, seq)?,
                    at_ms: unsigned(&what, col(r, 1)?)?,
                    kind: col(r, 2)?,
                    deployment: col(r, 3)?,
                    body: col(r, 4)?,
                    prev_hash: col(r, 5)?,
                    hash: col(r, 6)?,
                    key_id: col(r, 7)?,
                    signature: col(r, 8)?,
                }
                .into_record()
            })
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }
}
