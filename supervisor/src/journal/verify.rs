//! Checking a journal: every record's seq, chain link, hash and signature,
//! in order, record by record (so a long journal is checked page by page
//! in bounded memory), then its end against the head the store recorded,
//! which is how a cut tail is seen.

use ed25519_dalek::{Signature, VerifyingKey};
use thiserror::Error;
use wfhost_ipc::KeyId;
use wfhost_ipc::signed::signing_bytes;

use super::{JournalHead, JournalRecord};
use sha2::{Digest, Sha256};

/// How the journal is broken at a record.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum Breakage {
    /// Records are missing before this one.
    #[error("{}", missing_text(*.expected, *.found))]
    Missing {
        /// The seq that should have come next.
        expected: u64,
        /// The seq found instead.
        found: u64,
    },
    /// This seq repeats or goes backwards.
    #[error("seq {found} follows seq {previous} (a duplicate or reordering)")]
    OutOfOrder {
        /// The previous record's seq.
        previous: u64,
        /// This record's seq.
        found: u64,
    },
    /// `prev_hash` is not the previous record's hash.
    #[error(
        "it does not chain to the record before it (a deletion, insertion or reordering at this point)"
    )]
    ChainBroken,
    /// Signed by a key id not among the known keys.
    #[error("it is signed by unknown key {0}")]
    UnknownKey(KeyId),
    /// The fields no longer match the stored hash.
    #[error("it was edited: its contents no longer match its hash")]
    Edited,
    /// The signature does not verify under the named key.
    #[error("its signature does not verify (forged or edited)")]
    BadSignature,
    /// The newest records were deleted: the store had numbered up to
    /// `head`, the journal now ends before this seq.
    #[error("{}", cut_text(*.first, *.head))]
    TailCut {
        /// The first missing seq.
        first: u64,
        /// The highest seq the store ever assigned.
        head: u64,
    },
    /// A record beyond the head the store recorded: not appended by wfhost.
    #[error(
        "it lies beyond the journal's recorded head (record {head}): it was not appended by wfhost"
    )]
    BeyondHead {
        /// The recorded head's seq.
        head: u64,
    },
    /// A record with the right seq is not the one recorded or verified
    /// earlier (its hash differs).
    #[error("it is not the record {what} (its hash is {found}, expected {expected})")]
    Replaced {
        /// Which record it should have been ("recorded as the head").
        what: &'static str,
        /// Its hash, hex.
        found: String,
        /// The hash expected, hex.
        expected: String,
    },
    /// A record verified earlier is gone.
    #[error("record {seq}, {what}, is missing")]
    AnchorMissing {
        /// Its seq.
        seq: u64,
        /// Why it was expected ("verified at the last start").
        what: &'static str,
    },
}

/// "record 3 is missing" or "records 3 to 5 are missing".
fn missing_text(expected: u64, found: u64) -> String {
    let last = found.saturating_sub(1);
    if last <= expected {
        format!("record {expected} is missing (a deletion)")
    } else {
        format!("records {expected} to {last} are missing (a deletion)")
    }
}

/// "record 7 was cut …" or "records 5 to 7 were cut …".
fn cut_text(first: u64, head: u64) -> String {
    let which = if first >= head {
        format!("record {head} was")
    } else {
        format!("records {first} to {head} were")
    };
    format!(
        "{which} cut from the end of the journal (the store had numbered records up to {head}; new records are numbered after it)"
    )
}

/// The first broken record of a journal and why.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("journal broken at record {seq}: {problem}")]
pub struct JournalBroken {
    /// The seq of the first bad record (as stored).
    pub seq: u64,
    /// Why it is bad.
    pub problem: Breakage,
}

/// Checks records one at a time, in seq order.
pub struct Verifier<'k> {
    keys: Vec<(KeyId, &'k VerifyingKey)>,
    /// The last record that passed (seq 0 and genesis before the first).
    previous: JournalHead,
    /// A record verified earlier that must come first, unchanged.
    anchor: Option<(JournalHead, &'static str)>,
    checked: u64,
}

impl<'k> Verifier<'k> {
    /// Checks a whole journal from its first record.
    pub fn from_genesis(known: &'k [VerifyingKey]) -> Self {
        Self {
            keys: known.iter().map(|k| (KeyId::of(k), k)).collect(),
            previous: JournalHead::GENESIS,
            anchor: None,
            checked: 0,
        }
    }

    /// Checks a journal from `anchor`, a record verified earlier (`what`
    /// says when): the first record given must be it, unchanged; its
    /// signature is not checked again.
    pub fn from_anchor(known: &'k [VerifyingKey], anchor: JournalHead, what: &'static str) -> Self {
        let mut v = Self::from_genesis(known);
        v.anchor = Some((anchor, what));
        v
    }

    /// How many records passed (the anchor not counted).
    #[cfg(test)]
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// Checks the next record.
    pub fn check(&mut self, record: &JournalRecord) -> Result<(), JournalBroken> {
        let broken = |problem| JournalBroken {
            seq: record.seq,
            problem,
        };
        if let Some((anchor, what)) = self.anchor.take() {
            if record.seq != anchor.seq {
                return Err(JournalBroken {
                    seq: anchor.seq,
                    problem: Breakage::AnchorMissing {
                        seq: anchor.seq,
                        what,
                    },
                });
            }
            if record.computed_hash() != record.hash {
                return Err(broken(Breakage::Edited));
            }
            if record.hash != anchor.hash {
                return Err(broken(Breakage::Replaced {
                    what,
                    found: hex::encode(record.hash),
                    expected: hex::encode(anchor.hash),
                }));
            }
            self.previous = anchor;
            return Ok(());
        }
        let expected_seq = self.previous.seq.saturating_add(1);
        if record.seq > expected_seq {
            return Err(broken(Breakage::Missing {
                expected: expected_seq,
                found: record.seq,
            }));
        }
        if record.seq < expected_seq {
            return Err(broken(Breakage::OutOfOrder {
                previous: self.previous.seq,
                found: record.seq,
            }));
        }
        if record.prev_hash != self.previous.hash {
            return Err(broken(Breakage::ChainBroken));
        }
        let Some((_, key)) = self.keys.iter().find(|(id, _)| *id == record.key_id) else {
            return Err(broken(Breakage::UnknownKey(record.key_id)));
        };
        let bytes = signing_bytes(record);
        if <[u8; 32]>::from(Sha256::digest(&bytes)) != record.hash {
            return Err(broken(Breakage::Edited));
        }
        let signature: [u8; 64] = record
            .signature
            .as_slice()
            .try_into()
            .map_err(|_| broken(Breakage::BadSignature))?;
        key.verify_strict(&bytes, &Signature::from_bytes(&signature))
            .map_err(|_| broken(Breakage::BadSignature))?;
        self.previous = record.head();
        self.checked += 1;
        Ok(())
    }

    /// Checks that the journal ended where the store's `head` says it
    /// does; returns how many records passed.
    pub fn finish(self, head: &JournalHead) -> Result<u64, JournalBroken> {
        if let Some((anchor, what)) = self.anchor {
            return Err(JournalBroken {
                seq: anchor.seq,
                problem: Breakage::AnchorMissing {
                    seq: anchor.seq,
                    what,
                },
            });
        }
        let last = self.previous;
        if last.seq < head.seq {
            let first = last.seq.saturating_add(1);
            return Err(JournalBroken {
                seq: first,
                problem: Breakage::TailCut {
                    first,
                    head: head.seq,
                },
            });
        }
        if last.seq > head.seq {
            return Err(JournalBroken {
                seq: head.seq.saturating_add(1),
                problem: Breakage::BeyondHead { head: head.seq },
            });
        }
        if last.hash != head.hash {
            return Err(JournalBroken {
                seq: last.seq,
                problem: Breakage::Replaced {
                    what: "recorded as the journal's head",
                    found: hex::encode(last.hash),
                    expected: hex::encode(head.hash),
                },
            });
        }
        Ok(self.checked)
    }
}

/// Checks every signature and the whole chain of `records` (the full
/// journal, in seq order) against `trusted`; returns how many were checked.
#[cfg(test)]
pub fn verify(records: &[JournalRecord], trusted: &VerifyingKey) -> Result<u64, JournalBroken> {
    verify_with_keys(records, std::slice::from_ref(trusted))
}

/// [`verify`] against several known keys (after a key rotation): each
/// record is checked with the key its `key_id` names. The end is not
/// checked against a store's head: see [`Verifier::finish`].
#[cfg(test)]
pub fn verify_with_keys(
    records: &[JournalRecord],
    known: &[VerifyingKey],
) -> Result<u64, JournalBroken> {
    let mut v = Verifier::from_genesis(known);
    for record in records {
        v.check(record)?;
    }
    Ok(v.checked())
}
