//! `wfhost journal verify` and `wfhost journal show`: check and list the
//! signed journal in a supervisor's store. Both read the store directly
//! (not through the control socket), so they work while the supervisor is
//! down, and they never create a store that does not exist.

use crate::clock::rfc3339_ms;
use std::io::Write;
use std::path::{Path, PathBuf};

use ed25519_dalek::VerifyingKey;
use wfhost_ipc::KeyId;
use wfhost_ipc::key::public_from_hex;

use crate::config;
use crate::exit;
use crate::journal::{JournalHead, JournalRecord, Verifier};
use crate::signing_key;
use crate::store::guard::PAGE;
use crate::store::{Backend, Store};

/// Journal subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check every signature and the hash chain; name the first bad record.
    #[command(
        after_help = "Exit status: 0 if every record verifies (and, with --expect-head, \
the saved head is present and unchanged), 1 if the journal is broken, cannot be read, \
or lacks the saved head, 2 on a usage or config error."
    )]
    Verify(VerifyArgs),
    /// List journal records as a table, or as JSON lines with --json.
    Show(ShowArgs),
}

/// Which store to read: from the supervisor's config, or a state directory.
#[derive(Debug, clap::Args)]
#[group(required = true, multiple = true)]
pub struct Location {
    /// The supervisor's config file: gives state_dir, signing_key and
    /// [store] url (a PostgreSQL store).
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The supervisor's state directory: read the SQLite store there
    /// (overrides the config's state_dir and [store] url).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

/// Arguments of `wfhost journal verify`.
#[derive(Debug, clap::Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub location: Location,
    /// The signing key file whose public half verifies the journal
    /// (default: the config's signing_key, else STATE_DIR/supervisor.key).
    #[arg(long, value_name = "PATH", conflicts_with = "public_key")]
    pub key: Option<PathBuf>,
    /// Verify with this public key (64 hex chars, as `wfhost keygen`
    /// prints it) instead of reading the private key file.
    #[arg(long, value_name = "HEX")]
    pub public_key: Option<String>,
    /// A head saved earlier (as `verify` and the supervisor's start and
    /// stop logs print it): check that record SEQ is still there with this
    /// hash, so a cut or rewritten tail shows.
    #[arg(long, value_name = "SEQ:HASH", value_parser = JournalHead::parse)]
    pub expect_head: Option<JournalHead>,
}

/// Arguments of `wfhost journal show`.
#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub location: Location,
    /// Print one JSON object per record and line, with hashes and signature.
    #[arg(long)]
    pub json: bool,
    /// Only records of this deployment.
    #[arg(long, value_name = "ID")]
    pub deployment: Option<String>,
}

/// Runs a journal subcommand.
pub fn run(cmd: Command) -> u8 {
    let result = match cmd {
        Command::Verify(args) => verify(&args),
        Command::Show(args) => show(&args),
    };
    match result {
        Ok(code) => code,
        Err(Failure { code, message }) => {
            eprintln!("{message}");
            code
        }
    }
}

/// An error to print and the exit code that goes with it.
struct Failure {
    code: u8,
    message: String,
}

impl Failure {
    fn failed(e: impl std::fmt::Display) -> Self {
        Self {
            code: exit::FAILED,
            message: format!("error: {e}"),
        }
    }
}

/// Where the store and the key are: the state directory, the configured
/// signing key (when a config was given) and the store's backend.
fn locate(location: &Location) -> Result<(PathBuf, Option<PathBuf>, Backend), Failure> {
    let usage = |e: config::ConfigError| Failure {
        code: exit::USAGE,
        message: e.to_string(),
    };
    let cfg = match &location.config {
        Some(path) => Some((
            config::locations_of(path).map_err(usage)?,
            config::store_url_of(path).map_err(usage)?,
        )),
        None => None,
    };
    let configured_key = cfg.as_ref().and_then(|(c, _)| c.signing_key.clone());
    let (state_dir, backend) = match (&location.state_dir, cfg) {
        (Some(dir), _) => (dir.clone(), Backend::Sqlite(dir.clone())),
        (None, Some((cfg, url))) => {
            let backend = Backend::of(&cfg.state_dir, url.as_deref());
            (cfg.state_dir, backend)
        }
        // clap requires one of the two.
        (None, None) => {
            return Err(Failure {
                code: exit::USAGE,
                message: "error: say which journal: pass --config PATH or --state-dir DIR".into(),
            });
        }
    };
    Ok((state_dir, configured_key, backend))
}

/// The store, never created.
fn open(backend: &Backend) -> Result<Box<dyn Store>, Failure> {
    backend.open_existing().map_err(Failure::failed)
}

/// The public key to verify with.
fn trusted_key(
    args: &VerifyArgs,
    state_dir: &Path,
    configured: Option<PathBuf>,
) -> Result<VerifyingKey, Failure> {
    if let Some(hex) = &args.public_key {
        return public_from_hex(hex).map_err(|e| Failure {
            code: exit::USAGE,
            message: format!(
                "error: --public-key: {e}\n  help: pass the 64 hex chars `wfhost keygen` printed"
            ),
        });
    }
    let path = args
        .key
        .clone()
        .or(configured)
        .unwrap_or_else(|| state_dir.join(signing_key::DEFAULT_KEY_FILE));
    signing_key::load(&path)
        .map(|k| k.verifying_key())
        .map_err(|e| {
            Failure::failed(format!(
                "{e}\n  help: or verify with the public key alone: --public-key HEX"
            ))
        })
}

fn verify(args: &VerifyArgs) -> Result<u8, Failure> {
    let (state_dir, configured, backend) = locate(&args.location)?;
    let mut store = open(&backend)?;
    let key = trusted_key(args, &state_dir, configured)?;
    // A fleet's hosts each sign with their own key, registered in the store.
    let hosts = crate::fleet::open::registered_keys(&backend).map_err(Failure::failed)?;
    let mut keys = vec![key];
    keys.extend(hosts.iter().map(|h| h.key).filter(|k| *k != key));
    let checked = check(&mut *store, &keys, args.expect_head)?;
    let db = backend.describe();
    let verdict = match &checked.verdict {
        Ok(n) => {
            let noun = if *n == 1 { "record" } else { "records" };
            println!("journal ok: {n} {noun}");
            println!("key id: {}", KeyId::of(&key));
            for h in &hosts {
                println!("host {}: key id {}", h.host, KeyId::of(&h.key));
            }
            if checked.head.seq > 0 {
                // A cut or rewritten tail with the head row rewritten to
                // match cannot be seen from the store alone; a head kept
                // elsewhere makes it visible.
                let head = checked.head;
                println!("head: seq {} hash {}", head.seq, hex::encode(head.hash));
                println!("save this head and check it later with --expect-head {head}");
            }
            Ok(())
        }
        Err(broken) => Err(format!(
            "error: {broken}\n  help: {db} was tampered with or damaged at this record (every record before it verified); keep a copy of it for investigation"
        )),
    };
    let expected = match (args.expect_head, &checked.expected) {
        (None, _) => Ok(()),
        (Some(want), Some(found)) if found.hash == want.hash => {
            println!("expected head {}: present and unchanged", want.seq);
            Ok(())
        }
        (Some(want), Some(found)) => Err(format!(
            "error: expected head {want}: record {} has changed: its hash is now {}",
            want.seq,
            hex::encode(found.hash)
        )),
        (Some(want), None) if !checked.read_all => Err(format!(
            "error: expected head {want}: not reached: the journal is broken before record {}",
            want.seq
        )),
        (Some(want), None) => Err(format!(
            "error: expected head {want}: record {} is missing (the journal's head is record {}): its tail was cut or replaced",
            want.seq, checked.head.seq
        )),
    };
    let errors: Vec<String> = [verdict, expected]
        .into_iter()
        .filter_map(Result::err)
        .collect();
    if errors.is_empty() {
        Ok(exit::OK)
    } else {
        Err(Failure {
            code: exit::FAILED,
            message: errors.join("\n"),
        })
    }
}

/// What checking a whole journal found.
struct Check {
    /// The head the store recorded.
    head: JournalHead,
    /// How many records verified, or the first broken one.
    verdict: Result<u64, crate::journal::JournalBroken>,
    /// The stored record at the expected head's seq, if it was reached.
    expected: Option<JournalHead>,
    /// Whether every record was read (not stopped at a broken one).
    read_all: bool,
}

/// Verifies every record page by page (bounded memory on a long
/// journal), then the end against the store's head, noting the record at
/// `expect`'s seq on the way.
fn check(
    store: &mut dyn Store,
    keys: &[VerifyingKey],
    expect: Option<JournalHead>,
) -> Result<Check, Failure> {
    let mut verifier = Verifier::from_genesis(keys);
    let mut expected = None;
    let mut after = 0;
    // The head is read once the records are, and reading goes on while
    // other hosts append: a record beyond the head is still seen.
    let outcome = 'reading: loop {
        let read = after;
        loop {
            let page = store.journal_after(after, PAGE).map_err(Failure::failed)?;
            for record in &page {
                if expect.is_some_and(|e| e.seq == record.seq) {
                    expected = Some(record.head());
                }
                if let Err(broken) = verifier.check(record) {
                    let heads = store.journal_heads().map_err(Failure::failed)?;
                    break 'reading (heads, Err(broken), false);
                }
                after = record.seq;
            }
            if page.len() < PAGE {
                break;
            }
        }
        let heads = store.journal_heads().map_err(Failure::failed)?;
        if after >= heads.head.seq || after == read {
            break (heads, Ok(()), true);
        }
    };
    let (heads, checked, read_all) = outcome;
    let verdict = checked.and_then(|()| verifier.finish(&heads.head));
    Ok(Check {
        head: heads.head,
        verdict,
        expected,
        read_all,
    })
}

fn show(args: &ShowArgs) -> Result<u8, Failure> {
    let (_, _, backend) = locate(&args.location)?;
    let records = open(&backend)?
        .journal(args.deployment.as_deref())
        .map_err(Failure::failed)?;
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) just ends the listing.
    let _ = if args.json {
        write_json(&mut out, &records)
    } else {
        write_table(&mut out, &records)
    };
    if records.is_empty() && !args.json {
        eprintln!(
            "the journal has no records{}",
            match &args.deployment {
                Some(d) => format!(" for deployment {d:?}"),
                None => String::new(),
            }
        );
    }
    Ok(exit::OK)
}

fn write_json(out: &mut impl Write, records: &[JournalRecord]) -> std::io::Result<()> {
    for r in records {
        let body = serde_json::from_str::<serde_json::Value>(&r.body)
            .unwrap_or_else(|_| serde_json::Value::String(r.body.clone()));
        let line = serde_json::json!({
            "seq": r.seq,
            "at_ms": r.at_ms,
            "time": rfc3339_ms(r.at_ms),
            "kind": r.kind,
            "deployment": r.deployment,
            "body": body,
            "prev_hash": hex::encode(r.prev_hash),
            "hash": hex::encode(r.hash),
            "key_id": r.key_id.to_string(),
            "signature": hex::encode(&r.signature),
        });
        writeln!(out, "{line}")?;
    }
    out.flush()
}

/// Longest body shown in the table; `--json` shows it whole.
const TABLE_BODY_CHARS: usize = 160;

fn write_table(out: &mut impl Write, records: &[JournalRecord]) -> std::io::Result<()> {
    let rows: Vec<[String; 5]> = records
        .iter()
        .map(|r| {
            [
                r.seq.to_string(),
                rfc3339_ms(r.at_ms),
                printable(&r.kind, 40),
                r.deployment
                    .as_deref()
                    .map_or_else(|| "-".to_string(), |d| printable(d, 64)),
                printable(&r.body, TABLE_BODY_CHARS),
            ]
        })
        .collect();
    let header = ["SEQ", "TIME", "KIND", "DEPLOYMENT", "BODY"];
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        let mut s = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i == 4 {
                s.push_str(cell);
            } else {
                s.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        s
    };
    writeln!(out, "{}", line(header))?;
    for row in &rows {
        writeln!(out, "{}", line(row.each_ref().map(String::as_str)))?;
    }
    out.flush()
}

/// `text` safe for a terminal (control characters escaped) and cut to
/// `max` characters.
pub fn printable(text: &str, max: usize) -> String {
    let mut s = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            s.push('…');
            break;
        }
        if c.is_control() {
            s.extend(c.escape_default());
        } else {
            s.push(c);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use ed25519_dalek::SigningKey;
    use serde_json::json;

    use super::*;
    use crate::journal::{GENESIS_HASH, NewJournalEntry};

    #[test]
    fn table_cells_are_escaped_and_cut() {
        assert_eq!(printable("a\u{1b}[31mb", 100), "a\\u{1b}[31mb");
        assert_eq!(printable("abcdef", 3), "abc…");
    }

    fn record(deployment: Option<&str>) -> JournalRecord {
        JournalRecord::seal(
            1,
            GENESIS_HASH,
            NewJournalEntry {
                at_ms: 0,
                kind: "spawn".into(),
                deployment: deployment.map(Into::into),
                body: json!({"pid": 42}),
            },
            &SigningKey::from_bytes(&[1; 32]),
        )
    }

    #[test]
    fn the_table_has_a_header_and_one_row_per_record() {
        let mut out = Vec::new();
        write_table(&mut out, &[record(Some("billing")), record(None)]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("SEQ  TIME"), "{text}");
        assert!(
            lines[1].contains("1970-01-01T00:00:00.000Z  spawn  billing     {\"pid\":42}"),
            "{text}"
        );
        assert!(
            lines[2].contains("spawn  -           {\"pid\":42}"),
            "{text}"
        );
    }

    #[test]
    fn json_lines_carry_every_field() {
        let mut out = Vec::new();
        write_json(&mut out, &[record(Some("billing"))]).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["seq"], 1);
        assert_eq!(v["kind"], "spawn");
        assert_eq!(v["deployment"], "billing");
        assert_eq!(v["body"]["pid"], 42);
        assert_eq!(v["time"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["prev_hash"], "0".repeat(64));
        assert_eq!(v["signature"].as_str().map(str::len), Some(128));
        assert_eq!(v["key_id"].as_str().map(str::len), Some(16));
    }
}
