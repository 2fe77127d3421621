//! What a stopping supervisor could not write to its store (journal
//! records, events, mail acknowledgements: the store refused until the
//! end), kept in a file outside the store so nothing is lost in silence,
//! and written by the next start. The file goes to `state_dir` if it can,
//! else to `$RUNTIME_DIRECTORY`, else to the temp directory (named after
//! the state dir); if none takes it, every record is logged in full. The
//! supervisor then exits non-zero.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::journal::NewJournalEntry;
use crate::store::{NewEvent, Store};

/// Records the store never took.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Unwritten {
    /// Journal records, in order (they are signed when written).
    pub journal: Vec<Record>,
    /// Events, in order.
    pub events: Vec<Record>,
    /// Mail acknowledgements, in order.
    pub acks: Vec<AckRecord>,
}

/// A journal record or event as kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// When it happened (Unix ms).
    pub at_ms: u64,
    /// Its kind.
    pub kind: String,
    /// Its deployment.
    pub deployment: Option<String>,
    /// Its body.
    pub body: Value,
}

/// A mail acknowledgement as kept.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AckRecord {
    /// The deployment.
    pub deployment: String,
    /// The channel id of the child that held it (empty in files older
    /// than mail holders: such an ack matches nothing, and the item is
    /// delivered again).
    #[serde(default)]
    pub channel_id: String,
    /// That child's pid.
    #[serde(default)]
    pub pid: u32,
    /// The mail.
    pub id: u64,
    /// How processing ended, as stored.
    pub outcome: String,
    /// The item's result, as hex (absent from files older than results).
    #[serde(default)]
    pub result_hex: String,
    /// When it was acknowledged (Unix ms).
    pub at_ms: u64,
}

impl Unwritten {
    /// Nothing was left unwritten.
    pub fn is_empty(&self) -> bool {
        self.journal.is_empty() && self.events.is_empty() && self.acks.is_empty()
    }

    /// "3 journal records, 10 events and 2 mail acknowledgements".
    pub fn describe(&self) -> String {
        format!(
            "{} journal records, {} events and {} mail acknowledgements",
            self.journal.len(),
            self.events.len(),
            self.acks.len()
        )
    }
}

impl From<&NewJournalEntry> for Record {
    fn from(e: &NewJournalEntry) -> Self {
        Self {
            at_ms: e.at_ms,
            kind: e.kind.clone(),
            deployment: e.deployment.clone(),
            body: e.body.clone(),
        }
    }
}

impl From<&NewEvent> for Record {
    fn from(e: &NewEvent) -> Self {
        Self {
            at_ms: e.at_ms,
            kind: e.kind.clone(),
            deployment: e.deployment.clone(),
            body: e.body.clone(),
        }
    }
}

/// The file names this state dir's leftovers are kept under, in the
/// places they may be: `state_dir/unwritten-*.json`, and the same names
/// with the state dir's digest in the runtime and temp directories.
fn places(state_dir: &Path) -> Vec<(PathBuf, String)> {
    let digest = hex::encode(&Sha256::digest(state_dir.as_os_str().as_encoded_bytes())[..8]);
    let mut out = vec![(state_dir.to_path_buf(), "unwritten-".to_owned())];
    if let Some(dirs) = std::env::var_os("RUNTIME_DIRECTORY") {
        let dirs = dirs.to_string_lossy().into_owned();
        if let Some(first) = dirs.split(':').next().filter(|d| !d.is_empty()) {
            out.push((PathBuf::from(first), format!("wfhost-unwritten-{digest}-")));
        }
    }
    out.push((std::env::temp_dir(), format!("wfhost-unwritten-{digest}-")));
    out
}

/// Writes `left` to the first place that takes it (mode 0600: it may hold
/// payload-derived bodies); returns the file, or why no place took it.
pub fn keep(state_dir: &Path, left: &Unwritten, at_ms: u64) -> Result<PathBuf, String> {
    let text = serde_json::to_vec_pretty(left).map_err(|e| e.to_string())?;
    let mut errors = Vec::new();
    for (dir, prefix) in places(state_dir) {
        let path = dir.join(format!("{prefix}{at_ms}.json"));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| {
                f.write_all(&text)?;
                // Written is kept: a failed flush to disk is worth a line,
                // not another place (the kernel still has the bytes).
                if let Err(e) = f.sync_all() {
                    tracing::warn!(file = %path.display(), error = %e, "cannot flush the kept records to disk");
                }
                Ok(())
            });
        match written {
            Ok(()) => return Ok(path),
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                errors.push(format!("{}: {e}", path.display()));
            }
        }
    }
    Err(errors.join("; "))
}

/// Files a previous supervisor of `state_dir` left, oldest first.
pub fn found(state_dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for (dir, prefix) in places(state_dir) {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with(&prefix) && name.ends_with(".json") {
                files.push(e.path());
            }
        }
    }
    files.sort_by_key(|p| p.file_name().map(|n| n.to_owned()));
    files
}

/// Writes a kept file's records to the store (acknowledgements first,
/// before mail in processing is replayed at start-up, so nothing
/// acknowledged runs again), then renames it `*.recovered`. Returns what
/// was written.
pub fn recover(
    store: &mut dyn Store,
    key: &ed25519_dalek::SigningKey,
    file: &Path,
) -> Result<Unwritten, String> {
    let text = std::fs::read(file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
    let left: Unwritten = serde_json::from_slice(&text)
        .map_err(|e| format!("{} is not a file of unwritten records: {e}", file.display()))?;
    for a in &left.acks {
        let holder = crate::store::Holder {
            channel_id: a.channel_id.clone(),
            pid: a.pid,
        };
        let ack = crate::store::AckOf {
            holder,
            id: a.id,
            outcome: a.outcome.clone(),
            result: hex::decode(&a.result_hex).unwrap_or_default(),
        };
        store
            .ack_mail_many(&a.deployment, std::slice::from_ref(&ack), a.at_ms)
            .map_err(|e| e.to_string())?;
    }
    for r in &left.journal {
        let entry = NewJournalEntry {
            at_ms: r.at_ms,
            kind: r.kind.clone(),
            deployment: r.deployment.clone(),
            body: r.body.clone(),
        };
        store
            .append_journal(key, entry)
            .map_err(|e| e.to_string())?;
    }
    let events: Vec<NewEvent> = left
        .events
        .iter()
        .map(|r| NewEvent {
            at_ms: r.at_ms,
            deployment: r.deployment.clone(),
            kind: r.kind.clone(),
            body: r.body.clone(),
        })
        .collect();
    if !events.is_empty() {
        store.append_events(&events).map_err(|e| e.to_string())?;
    }
    let mut done = file.as_os_str().to_owned();
    done.push(".recovered");
    std::fs::rename(file, &done).map_err(|e| {
        format!(
            "wrote the records of {} but cannot rename it: {e}; remove it by hand, or its records are written again",
            file.display()
        )
    })?;
    Ok(left)
}
