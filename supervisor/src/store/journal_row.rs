//! A journal record as every backend stores it: the fixed-size hashes and
//! key id as byte strings of any length, checked when read back, so a
//! mangled row is named as corruption instead of misread.

use wfhost_ipc::KeyId;

use super::StoreError;
use super::error::Location;
use crate::journal::{JournalHead, JournalRecord};

/// A journal row as stored, before its blobs are checked.
pub struct JournalRow {
    /// Its seq.
    pub seq: u64,
    /// Unix ms.
    pub at_ms: u64,
    /// What happened.
    pub kind: String,
    /// The deployment, if any.
    pub deployment: Option<String>,
    /// The signed JSON text.
    pub body: String,
    /// 32 bytes when intact.
    pub prev_hash: Vec<u8>,
    /// 32 bytes when intact.
    pub hash: Vec<u8>,
    /// 8 bytes when intact.
    pub key_id: Vec<u8>,
    /// 64 bytes when intact (checked by `verify`, not here).
    pub signature: Vec<u8>,
}

/// `bytes` as `N` bytes, or what is wrong, naming `what`.
pub fn fixed<const N: usize>(what: &str, bytes: &[u8]) -> Result<[u8; N], String> {
    <[u8; N]>::try_from(bytes).map_err(|_| format!("{what} is {} bytes, expected {N}", bytes.len()))
}

impl JournalRow {
    /// The record, or what is wrong with the row.
    pub fn into_record(self) -> Result<JournalRecord, String> {
        let seq = self.seq;
        let field = |name: &str| format!("journal record {seq}: {name}");
        Ok(JournalRecord {
            seq,
            at_ms: self.at_ms,
            kind: self.kind,
            deployment: self.deployment,
            body: self.body,
            prev_hash: fixed(&field("prev_hash"), &self.prev_hash)?,
            hash: fixed(&field("hash"), &self.hash)?,
            key_id: KeyId(fixed(&field("key_id"), &self.key_id)?),
            signature: self.signature,
        })
    }
}

/// A head as stored (`seq`, `hash`), or what is wrong with it.
pub fn head(what: &str, seq: i64, hash: &[u8]) -> Result<JournalHead, String> {
    let seq = u64::try_from(seq).map_err(|_| format!("{what}: seq {seq} is negative"))?;
    Ok(JournalHead {
        seq,
        hash: fixed(&format!("{what}: hash"), hash)?,
    })
}

/// Whether the stored hash of record `seq`, the one an append chains
/// onto, is readable.
pub fn check_tip(seq: u64, hash: &[u8]) -> Result<(), String> {
    fixed::<32>(&format!("journal record {seq}: hash"), hash).map(drop)
}

/// What a backend's append found, besides its own errors.
pub enum Appended {
    /// The record was written and is the head.
    Done(JournalRecord),
    /// The head row, or the record it names, is missing or mangled.
    BadHead(String),
    /// The seq after the head is already taken by a row wfhost did not
    /// append.
    Taken(u64),
}

impl Appended {
    /// The record, or what was found, as an error about `location`.
    pub fn into_result(self, location: &Location) -> Result<JournalRecord, StoreError> {
        let corrupt = |what| StoreError::Corrupt {
            location: location.clone(),
            what,
        };
        match self {
            Self::Done(record) => Ok(record),
            Self::BadHead(what) => Err(corrupt(what)),
            Self::Taken(seq) => Err(corrupt(format!(
                "journal record {seq} already exists though the journal's head is record {}: something other than wfhost wrote to the journal",
                seq.saturating_sub(1)
            ))),
        }
    }
}
