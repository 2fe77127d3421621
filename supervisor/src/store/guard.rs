//! The journal guards itself (issue 13): before a supervisor appends to a
//! journal it checks it, from the head the last check verified (so a start
//! stays fast on a long journal; the first start checks it all) to the
//! end, and refuses a broken chain or a forged record. The head, seq and
//! hash, is logged at start and at stop so logs kept elsewhere anchor it:
//! `wfhost journal verify --expect-head SEQ:HASH` then shows whether the
//! journal still holds it unchanged.

use std::time::{Duration, Instant};

use ed25519_dalek::VerifyingKey;
use thiserror::Error;
use tracing::{error, info};

use super::{Store, StoreError};
use crate::journal::{Breakage, JournalBroken, JournalHead, Verifier};

/// Records read per page while checking.
pub const PAGE: usize = 1024;

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The journal's head: the newest record, now verified.
    pub head: JournalHead,
    /// Where the check started (the head an earlier check verified).
    pub from: Option<JournalHead>,
    /// How many records it verified.
    pub records: u64,
    /// How long it took.
    pub took: Duration,
}

/// Why a check did not pass.
#[derive(Debug, Error)]
pub enum GuardError {
    /// The store could not be read.
    #[error("cannot check the journal: {0}")]
    Store(#[from] StoreError),
    /// The journal is broken at a record.
    #[error("{}", refusal(.0))]
    Broken(JournalBroken),
}

/// The operator's message for a broken journal: what, where, what next.
fn refusal(broken: &JournalBroken) -> String {
    let rotated = match broken.problem {
        Breakage::UnknownKey(_) => format!(
            "\n  help: if the signing key was replaced after record {} was written, start once with the old key and stop cleanly (the stop verifies the journal), then switch keys",
            broken.seq
        ),
        _ => String::new(),
    };
    format!(
        "the journal is broken, so the supervisor does not append to it: {broken}\n  \
         help: see it with `wfhost journal verify --config CONFIG` and keep a copy of the store for investigation; \
         to run anyway, move the store aside (for SQLite: wfhost.db with its -wal and -shm files in state_dir) \
         and the supervisor starts a new journal, and a new inbox, there{rotated}"
    )
}

/// Verifies the journal of `store` with `key` from the last verified
/// head to its end, and records its head as verified.
#[cfg(test)]
pub fn check(store: &mut dyn Store, key: &VerifyingKey) -> Result<Checked, GuardError> {
    check_keys(store, std::slice::from_ref(key))
}

/// [`check`] with every key that may have signed (a fleet's hosts each
/// sign with their own): each record is checked with the key it names.
/// The head is read once the records are: hosts that append meanwhile
/// are caught up with, and a record beyond the head is still seen.
pub fn check_keys(store: &mut dyn Store, keys: &[VerifyingKey]) -> Result<Checked, GuardError> {
    let started = Instant::now();
    let from = store.journal_heads()?.verified.filter(|v| v.seq > 0);
    let mut verifier = match from {
        Some(anchor) => Verifier::from_anchor(keys, anchor, "verified by an earlier check"),
        None => Verifier::from_genesis(keys),
    };
    let mut after = from.map_or(0, |v| v.seq - 1);
    let heads = loop {
        let read = after;
        loop {
            let page = store.journal_after(after, PAGE)?;
            for record in &page {
                verifier.check(record).map_err(GuardError::Broken)?;
                after = record.seq;
            }
            if page.len() < PAGE {
                break;
            }
        }
        let heads = store.journal_heads()?;
        // Caught up, or nothing more to read (the end was cut).
        if after >= heads.head.seq || after == read {
            break heads;
        }
    };
    let records = verifier.finish(&heads.head).map_err(GuardError::Broken)?;
    if heads.head.seq > 0 && heads.verified != Some(heads.head) {
        store.set_verified_head(heads.head)?;
    }
    Ok(Checked {
        head: heads.head,
        from,
        records,
        took: started.elapsed(),
    })
}

/// The start-up check: call once the store is open, before anything is
/// appended; an error is the reason to refuse to start. Logs the head.
pub fn check_at_start(store: &mut dyn Store, key: &VerifyingKey) -> Result<Checked, GuardError> {
    check_at_start_keys(store, std::slice::from_ref(key))
}

/// [`check_at_start`] with every key that may have signed.
pub fn check_at_start_keys(
    store: &mut dyn Store,
    keys: &[VerifyingKey],
) -> Result<Checked, GuardError> {
    let checked = check_keys(store, keys)?;
    info!(
        head = %checked.head,
        from_seq = checked.from.map_or(0, |h| h.seq),
        records = checked.records,
        took_ms = checked.took.as_millis() as u64,
        "journal verified at start; its head is seq:hash"
    );
    Ok(checked)
}

/// At stop, once the last record is written: verifies what this run
/// appended with every key that may have signed (so the next start need
/// not), and logs the head so logs kept
/// elsewhere anchor it. Never fails: a problem is logged, and the next
/// start refuses.
pub fn log_head_at_stop_keys(store: &mut dyn Store, keys: &[VerifyingKey]) {
    match check_keys(store, keys) {
        Ok(checked) => info!(
            head = %checked.head,
            records = checked.records,
            took_ms = checked.took.as_millis() as u64,
            "journal verified at stop; its head is seq:hash"
        ),
        Err(e) => error!(error = %e, "the journal did not verify at stop"),
    }
}
