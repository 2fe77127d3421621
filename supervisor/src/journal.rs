//! The signed journal (DESIGN §7): an append-only list of what the
//! supervisor decided (spawns, exits, restarts, cancels, recycles, config
//! reloads). Each record is signed with the supervisor key and chained to
//! the previous record's hash, so `wfhost journal verify` detects any edit,
//! deletion, insertion or reordering. Stores persist records; this module
//! defines them and holds every rule about them: how the next record is
//! numbered, chained and sealed (a backend only offers "read the head,
//! insert the sealed record, make it the head" in one transaction), and
//! how a journal is verified (`verify`). Sequence numbers are never
//! reused: a store keeps the highest seq it ever assigned (its head), so a
//! cut tail shows as missing records, not as records written over.

mod verify;

pub use verify::{Breakage, JournalBroken, Verifier};
#[cfg(test)]
pub use verify::{verify, verify_with_keys};

use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256};
use wfhost_ipc::KeyId;
use wfhost_ipc::signed::{Canonical, Signable, signing_bytes};

/// The `prev_hash` of the first record: there is nothing before it.
pub const GENESIS_HASH: [u8; 32] = [0; 32];

/// The newest record a journal has ever had (seq 0 and [`GENESIS_HASH`]
/// for none), or a record some check was anchored at: a seq and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalHead {
    /// The record's seq.
    pub seq: u64,
    /// Its hash.
    pub hash: [u8; 32],
}

impl JournalHead {
    /// The head of a journal that never had a record.
    pub const GENESIS: Self = Self {
        seq: 0,
        hash: GENESIS_HASH,
    };

    /// Parses `SEQ:HASH` (64 hex digits), as `journal verify` prints it.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (seq, hash) = text
            .split_once(':')
            .ok_or_else(|| format!("{text:?} is not SEQ:HASH"))?;
        let seq = seq
            .trim()
            .parse()
            .map_err(|_| format!("{seq:?} is not a record number"))?;
        let hash = hex::decode(hash.trim())
            .ok()
            .and_then(|h| <[u8; 32]>::try_from(h).ok())
            .ok_or_else(|| format!("{hash:?} is not a hash (64 hex digits)"))?;
        Ok(Self { seq, hash })
    }
}

impl std::fmt::Display for JournalHead {
    /// `SEQ:HASH`, the form `--expect-head` takes back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.seq, hex::encode(self.hash))
    }
}

/// What a store records about its journal's ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalHeads {
    /// The highest seq ever assigned and that record's hash: the next
    /// record is numbered after it and chained to it, even if rows were
    /// deleted since.
    pub head: JournalHead,
    /// The newest record the start-up check verified, if any: the next
    /// check starts there.
    pub verified: Option<JournalHead>,
}

/// A record to append, before the store numbers, chains and signs it.
#[derive(Debug, Clone, PartialEq)]
pub struct NewJournalEntry {
    /// Unix time in milliseconds when it happened.
    pub at_ms: u64,
    /// What happened: a kind of the fact vocabulary (`wfhost_policy::Fact`),
    /// e.g. "spawned", "exited", "cancel_committed", "recycled".
    pub kind: String,
    /// The deployment it concerns, if any.
    pub deployment: Option<String>,
    /// The details (origin, reason, pids, channel ids, the signed cancel…).
    pub body: serde_json::Value,
}

/// A stored record: numbered, chained to the one before, signed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRecord {
    /// Position in the journal, from 1, without gaps, never reused.
    pub seq: u64,
    /// Unix time in milliseconds when it happened.
    pub at_ms: u64,
    /// What happened.
    pub kind: String,
    /// The deployment it concerns, if any.
    pub deployment: Option<String>,
    /// The details, as the exact JSON text that was signed.
    pub body: String,
    /// `hash` of the previous record ([`GENESIS_HASH`] for the first).
    pub prev_hash: [u8; 32],
    /// SHA-256 of this record's signing bytes: what the next record chains to.
    pub hash: [u8; 32],
    /// The key that signed it.
    pub key_id: KeyId,
    /// ed25519 signature over the signing bytes.
    pub signature: Vec<u8>,
}

impl Signable for JournalRecord {
    const DOMAIN: &'static str = "wfhost/journal/v1";

    fn write_canonical(&self, out: &mut Canonical) {
        out.u64(self.seq)
            .u64(self.at_ms)
            .str(&self.kind)
            .opt_str(self.deployment.as_deref())
            .str(&self.body)
            .bytes(&self.prev_hash);
    }
}

impl JournalRecord {
    /// Numbers `entry` as `seq`, chains it to `prev_hash` and signs it with
    /// `key`: the record a store then writes in the same transaction in
    /// which it read `prev_hash`.
    pub fn seal(seq: u64, prev_hash: [u8; 32], entry: NewJournalEntry, key: &SigningKey) -> Self {
        let mut record = Self {
            seq,
            at_ms: entry.at_ms,
            kind: entry.kind,
            deployment: entry.deployment,
            // A `Value`'s map keys are strings, so this cannot fail.
            body: entry.body.to_string(),
            prev_hash,
            hash: [0; 32],
            key_id: KeyId::of(&key.verifying_key()),
            signature: Vec::new(),
        };
        let bytes = signing_bytes(&record);
        record.hash = Sha256::digest(&bytes).into();
        record.signature = key.sign(&bytes).to_bytes().to_vec();
        record
    }

    /// The record that follows `head`: numbered after it, chained to it,
    /// signed with `key`. Stores call this inside the transaction that read
    /// `head`, so concurrent appends still make one chain.
    pub fn next(head: JournalHead, entry: NewJournalEntry, key: &SigningKey) -> Self {
        Self::seal(head.seq.saturating_add(1), head.hash, entry, key)
    }

    /// The hash the record's fields call for: equal to `hash` unless the
    /// record was edited.
    pub fn computed_hash(&self) -> [u8; 32] {
        Sha256::digest(signing_bytes(self)).into()
    }

    /// Its seq and hash.
    pub fn head(&self) -> JournalHead {
        JournalHead {
            seq: self.seq,
            hash: self.hash,
        }
    }
}

#[cfg(test)]
mod tests;
