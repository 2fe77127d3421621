//! The journal on every backend: appends chain and survive reopening,
//! tampering through the database is named at the right record, a cut
//! tail never gets its numbers reused, and the start-up guard checks from
//! the last verified head.

use ed25519_dalek::SigningKey;
use serde_json::json;
use wfhost_ipc::KeyId;

use super::Fixture;
use crate::journal::{
    Breakage, GENESIS_HASH, JournalBroken, JournalHead, JournalRecord, NewJournalEntry, Verifier,
};
use crate::store::guard::{self, GuardError};
use crate::store::{Store, StoreError};

fn key(seed: u8) -> SigningKey {
    SigningKey::from_bytes(&[seed; 32])
}

fn entry(i: u64, deployment: &str) -> NewJournalEntry {
    NewJournalEntry {
        at_ms: 1_700_000_000_000 + i,
        kind: "recycle".into(),
        deployment: Some(deployment.into()),
        body: json!({ "origin": "operator", "n": i }),
    }
}

/// The fixture's store holding `n` journal records.
fn store_with(f: &dyn Fixture, n: u64, k: &SigningKey) -> Box<dyn Store> {
    let mut store = f.open();
    for i in 1..=n {
        store
            .append_journal(k, entry(i, if i % 2 == 0 { "even" } else { "odd" }))
            .unwrap();
    }
    store
}

/// Verifies the whole journal and its end against the store's head.
fn verify_store(store: &mut dyn Store, k: &SigningKey) -> Result<u64, JournalBroken> {
    let keys = [k.verifying_key()];
    let mut v = Verifier::from_genesis(&keys);
    for r in store.journal(None).unwrap() {
        v.check(&r)?;
    }
    v.finish(&store.journal_heads().unwrap().head)
}

/// An INSERT of `r` as raw SQL, as a forger with database access writes it.
fn insert_sql(f: &dyn Fixture, r: &JournalRecord) -> String {
    let text = |s: &str| format!("'{}'", s.replace('\'', "''"));
    format!(
        "INSERT INTO journal (seq, at_ms, kind, deployment, body, prev_hash, hash, key_id, signature)
         VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {})",
        r.seq,
        r.at_ms,
        text(&r.kind),
        r.deployment.as_deref().map_or("NULL".into(), text),
        text(&r.body),
        f.blob(&hex::encode(r.prev_hash)),
        f.blob(&hex::encode(r.hash)),
        f.blob(&hex::encode(r.key_id.0)),
        f.blob(&hex::encode(&r.signature)),
    )
}

pub fn appended_records_chain_verify_and_survive_a_reopen(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 3, &k);
    let records = store.journal(None).unwrap();
    assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), [1, 2, 3]);
    assert_eq!(records[0].prev_hash, GENESIS_HASH);
    assert_eq!(records[2].prev_hash, records[1].hash);
    assert_eq!(records[1].body, r#"{"n":2,"origin":"operator"}"#);
    assert_eq!(verify_store(&mut *store, &k), Ok(3));
    assert_eq!(store.journal_heads().unwrap().head, records[2].head());

    drop(store);
    let mut store = f.open();
    let fourth = store.append_journal(&k, entry(4, "even")).unwrap();
    assert_eq!(fourth.seq, 4);
    assert_eq!(fourth.prev_hash, records[2].hash);
    assert_eq!(verify_store(&mut *store, &k), Ok(4));
}

pub fn the_journal_filters_by_deployment_and_pages_by_seq(f: &dyn Fixture) {
    let mut store = store_with(f, 5, &key(1));
    let seqs = |records: Vec<JournalRecord>| records.iter().map(|r| r.seq).collect::<Vec<_>>();
    assert_eq!(seqs(store.journal(Some("odd")).unwrap()), [1, 3, 5]);
    assert!(store.journal(Some("none")).unwrap().is_empty());
    assert_eq!(seqs(store.journal_after(1, 2).unwrap()), [2, 3]);
    assert_eq!(seqs(store.journal_after(3, 100).unwrap()), [4, 5]);
    assert!(store.journal_after(5, 10).unwrap().is_empty());
    assert!(store.journal_after(u64::MAX, 10).unwrap().is_empty());
}

pub fn a_global_record_has_no_deployment(f: &dyn Fixture) {
    let k = key(1);
    let mut store = f.open();
    let entry = NewJournalEntry {
        at_ms: 1,
        kind: "config-reload".into(),
        deployment: None,
        body: json!({}),
    };
    store.append_journal(&k, entry).unwrap();
    assert_eq!(store.journal(None).unwrap()[0].deployment, None);
    assert_eq!(verify_store(&mut *store, &k), Ok(1));
}

pub fn editing_one_byte_of_a_body_is_detected(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 5, &k);
    f.exec("UPDATE journal SET body = replace(body, 'operator', 'operatos') WHERE seq = 3;");
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 3,
            problem: Breakage::Edited
        })
    );
}

pub fn deleting_a_middle_record_is_detected(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 5, &k);
    f.exec("DELETE FROM journal WHERE seq = 3;");
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 4,
            problem: Breakage::Missing {
                expected: 3,
                found: 4
            }
        })
    );
    // Closing the gap by renumbering breaks the chain instead.
    f.exec("UPDATE journal SET seq = 3 WHERE seq = 4; UPDATE journal SET seq = 4 WHERE seq = 5;");
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 3,
            problem: Breakage::ChainBroken
        })
    );
}

pub fn swapping_two_records_is_detected(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 5, &k);
    f.exec(
        "UPDATE journal SET seq = -2 WHERE seq = 2;
         UPDATE journal SET seq = 2 WHERE seq = 3;
         UPDATE journal SET seq = 3 WHERE seq = -2;",
    );
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 2,
            problem: Breakage::ChainBroken
        })
    );
}

pub fn a_forged_record_is_detected(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 3, &k);
    // Forged by another key, chained correctly, appended at the end.
    let forger = key(9);
    let last = store.journal(None).unwrap().pop().unwrap();
    let forged = JournalRecord::seal(4, last.hash, entry(4, "even"), &forger);
    f.exec(&insert_sql(f, &forged));
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 4,
            problem: Breakage::UnknownKey(KeyId::of(&forger.verifying_key()))
        })
    );
    // Claiming the real key's id: the signature gives it away.
    let mut claimed = forged.clone();
    claimed.key_id = KeyId::of(&k.verifying_key());
    claimed.hash = claimed.computed_hash();
    f.exec("DELETE FROM journal WHERE seq = 4;");
    f.exec(&insert_sql(f, &claimed));
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 4,
            problem: Breakage::BadSignature
        })
    );
    // Inserted in the middle, with the later records renumbered.
    f.exec("DELETE FROM journal WHERE seq = 4;");
    f.exec(
        "UPDATE journal SET seq = seq + 10 WHERE seq >= 2;
         UPDATE journal SET seq = seq - 9 WHERE seq >= 12;",
    );
    let mut middle = JournalRecord::seal(
        2,
        store.journal(None).unwrap()[0].hash,
        entry(2, "odd"),
        &forger,
    );
    middle.key_id = KeyId::of(&k.verifying_key());
    middle.hash = middle.computed_hash();
    f.exec(&insert_sql(f, &middle));
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 2,
            problem: Breakage::BadSignature
        })
    );
}

pub fn a_mangled_blob_is_reported_as_corruption_naming_the_record(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 2, &k);
    f.exec(&format!(
        "UPDATE journal SET hash = {} WHERE seq = 2;",
        f.blob("00")
    ));
    let err = store.journal(None).unwrap_err().to_string();
    assert!(
        err.contains("journal record 2: hash is 1 bytes, expected 32"),
        "{err}"
    );
    let err = store.append_journal(&k, entry(3, "odd")).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

pub fn a_negative_number_is_reported_as_corruption(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 1, &k);
    f.exec("UPDATE journal SET at_ms = -5;");
    let err = store.journal(None).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

pub fn appends_from_two_connections_stay_one_chain(f: &dyn Fixture) {
    let k = key(1);
    let mut a = f.open();
    let mut b = f.open();
    for i in 0..10 {
        let s = if i % 2 == 0 { &mut a } else { &mut b };
        s.append_journal(&k, entry(i, "odd")).unwrap();
    }
    assert_eq!(verify_store(&mut *a, &k), Ok(10));
    // From threads at once, too: the database serializes them.
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let mut s = f.open();
            let k = k.clone();
            std::thread::spawn(move || {
                for i in 0..10 {
                    s.append_journal(&k, entry(100 * t + i, "even")).unwrap();
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    assert_eq!(verify_store(&mut *a, &k), Ok(50));
}

pub fn a_cut_tail_never_gets_its_seqs_reused_and_verify_names_it(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 5, &k);
    let fifth = store.journal(None).unwrap()[4].head();
    f.exec("DELETE FROM journal WHERE seq >= 4;");
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 4,
            problem: Breakage::TailCut { first: 4, head: 5 }
        })
    );
    // Even after a reopen, the next record follows the head, not the rows.
    drop(store);
    let mut store = f.open();
    assert_eq!(store.journal_heads().unwrap().head, fifth);
    let next = store.append_journal(&k, entry(6, "even")).unwrap();
    assert_eq!((next.seq, next.prev_hash), (6, fifth.hash));
    assert_eq!(
        verify_store(&mut *store, &k),
        Err(JournalBroken {
            seq: 6,
            problem: Breakage::Missing {
                expected: 4,
                found: 6
            }
        })
    );
}

pub fn a_row_written_beside_wfhost_at_the_next_seq_is_refused(f: &dyn Fixture) {
    let k = key(1);
    let mut store = store_with(f, 2, &k);
    let last = store.journal(None).unwrap().pop().unwrap();
    let forged = JournalRecord::seal(3, last.hash, entry(3, "odd"), &key(9));
    f.exec(&insert_sql(f, &forged));
    let err = store.append_journal(&k, entry(3, "odd")).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("journal record 3 already exists though the journal's head is record 2"),
        "{err}"
    );
    // Nothing was written over it.
    assert_eq!(store.journal(None).unwrap()[2], forged);
}

pub fn the_verified_head_is_kept_across_reopens(f: &dyn Fixture) {
    let mut store = store_with(f, 2, &key(1));
    assert_eq!(store.journal_heads().unwrap().verified, None);
    let head = JournalHead {
        seq: 2,
        hash: store.journal(None).unwrap()[1].hash,
    };
    store.set_verified_head(head).unwrap();
    drop(store);
    let heads = f.open().journal_heads().unwrap();
    assert_eq!((heads.head, heads.verified), (head, Some(head)));
}

pub fn the_guard_checks_from_the_last_verified_head(f: &dyn Fixture) {
    let k = key(1);
    let public = k.verifying_key();
    let mut store = f.open();
    // An empty journal passes, and has nothing to anchor at.
    let empty = guard::check(&mut *store, &public).unwrap();
    assert_eq!((empty.head, empty.records), (JournalHead::GENESIS, 0));
    // More records than a page: all checked the first time.
    let n = crate::store::guard::PAGE as u64 + 5;
    for i in 1..=n {
        store.append_journal(&k, entry(i, "odd")).unwrap();
    }
    let first = guard::check(&mut *store, &public).unwrap();
    assert_eq!((first.head.seq, first.records, first.from), (n, n, None));
    assert_eq!(store.journal_heads().unwrap().verified, Some(first.head));
    // The next check starts at that head: only the new records.
    for i in 1..=3 {
        store.append_journal(&k, entry(n + i, "even")).unwrap();
    }
    let second = guard::check(&mut *f.open(), &public).unwrap();
    assert_eq!(second.from, Some(first.head));
    assert_eq!((second.head.seq, second.records), (n + 3, 3));
    // An edit before the anchor is for `journal verify`, not for a start.
    f.exec("UPDATE journal SET body = replace(body, 'operator', 'operatos') WHERE seq = 7;");
    assert_eq!(guard::check(&mut *store, &public).unwrap().records, 0);
    assert_eq!(verify_store(&mut *store, &k).unwrap_err().seq, 7);
}

pub fn the_guard_refuses_a_forged_record_and_an_edited_anchor(f: &dyn Fixture) {
    let k = key(1);
    let public = k.verifying_key();
    let mut store = store_with(f, 4, &k);
    guard::check(&mut *store, &public).unwrap();
    store.append_journal(&k, entry(5, "odd")).unwrap();
    // A forged record after the verified head: named, with what to do.
    let last = store.journal(None).unwrap().pop().unwrap();
    let forged = JournalRecord::seal(6, last.hash, entry(6, "even"), &key(9));
    f.exec(&insert_sql(f, &forged));
    let err = guard::check(&mut *store, &public).unwrap_err();
    let GuardError::Broken(broken) = &err else {
        panic!("{err}");
    };
    assert_eq!(broken.seq, 6);
    let msg = err.to_string();
    assert!(
        msg.contains("journal broken at record 6: it is signed by unknown key")
            && msg.contains("wfhost journal verify")
            && msg.contains("move the store aside"),
        "{msg}"
    );
    // The verified head did not move.
    assert_eq!(
        store.journal_heads().unwrap().verified.map(|h| h.seq),
        Some(4)
    );
    // The anchor itself edited.
    f.exec("DELETE FROM journal WHERE seq = 6;");
    f.exec("UPDATE journal SET body = replace(body, 'operator', 'operatos') WHERE seq = 4;");
    let err = guard::check(&mut *store, &public).unwrap_err().to_string();
    assert!(
        err.contains("journal broken at record 4: it was edited"),
        "{err}"
    );
    // The anchor deleted.
    f.exec("DELETE FROM journal WHERE seq = 4;");
    let err = guard::check(&mut *store, &public).unwrap_err().to_string();
    assert!(
        err.contains("record 4, verified by an earlier check, is missing"),
        "{err}"
    );
}
