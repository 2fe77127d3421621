//! The event log on every backend: numbered from one, paged by cursor
//! without gaps, pruned without reusing a seq, shared by connections.

use serde_json::json;

use super::Fixture;
use crate::store::{EventRecord, NewEvent, Store, StoreError};

/// Appends events numbered `from..to` in their body.
fn append_n(store: &mut dyn Store, from: u64, to: u64) -> Vec<u64> {
    (from..to)
        .map(|i| {
            let deployment = (i % 2 == 0).then_some("even");
            store
                .append_event(1_000 + i, deployment, "spawned", &json!({ "n": i }))
                .unwrap()
        })
        .collect()
}

fn seqs(events: &[EventRecord]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

pub fn events_are_numbered_from_one_and_read_back_whole(f: &dyn Fixture) {
    let mut store = f.open();
    assert_eq!(store.last_event_seq().unwrap(), 0);
    assert!(store.events_after(0, 10).unwrap().is_empty());
    assert_eq!(append_n(&mut *store, 0, 3), [1, 2, 3]);
    assert_eq!(store.last_event_seq().unwrap(), 3);
    let events = store.events_after(0, 10).unwrap();
    assert_eq!(
        events[0],
        EventRecord {
            seq: 1,
            at_ms: 1_000,
            deployment: Some("even".into()),
            kind: "spawned".into(),
            body: json!({ "n": 0 }),
        }
    );
    assert_eq!(events[1].deployment, None);
    assert_eq!(events[2].body, json!({ "n": 2 }));
    let line = serde_json::to_string(&events[1]).unwrap();
    assert_eq!(
        line,
        r#"{"seq":2,"at_ms":1001,"deployment":null,"kind":"spawned","body":{"n":1}}"#
    );
}

pub fn a_cursor_and_a_limit_page_through_the_log_without_gaps(f: &dyn Fixture) {
    let mut store = f.open();
    append_n(&mut *store, 0, 10);
    assert_eq!(seqs(&store.events_after(7, 100).unwrap()), [8, 9, 10]);
    assert_eq!(seqs(&store.events_after(2, 3).unwrap()), [3, 4, 5]);
    assert!(store.events_after(10, 5).unwrap().is_empty());
    assert!(store.events_after(u64::MAX, 5).unwrap().is_empty());
    assert!(store.events_after(0, 0).unwrap().is_empty());
    // Paging by cursor sees every event exactly once.
    let mut seen = Vec::new();
    let mut cursor = 0;
    loop {
        let page = store.events_after(cursor, 4).unwrap();
        let Some(last) = page.last() else { break };
        cursor = last.seq;
        seen.extend(seqs(&page));
    }
    assert_eq!(seen, (1..=10).collect::<Vec<_>>());
}

pub fn pruning_keeps_the_newest_and_seqs_are_never_reused(f: &dyn Fixture) {
    let mut store = f.open();
    append_n(&mut *store, 0, 10);
    assert_eq!(store.prune_events(20).unwrap(), 0);
    assert_eq!(store.prune_events(4).unwrap(), 6);
    assert_eq!(seqs(&store.events_after(0, 100).unwrap()), [7, 8, 9, 10]);
    assert_eq!(store.prune_events(4).unwrap(), 0);
    // Pruning everything still leaves the high-water mark.
    assert_eq!(store.prune_events(0).unwrap(), 4);
    assert!(store.events_after(0, 100).unwrap().is_empty());
    assert_eq!(store.last_event_seq().unwrap(), 10);
    assert_eq!(store.prune_events(u64::MAX).unwrap(), 0);
    assert_eq!(append_n(&mut *store, 10, 11), [11]);
    assert_eq!(store.prune_events(0).unwrap(), 1);
    drop(store);
    let mut store = f.open();
    assert_eq!(store.last_event_seq().unwrap(), 11);
    assert_eq!(append_n(&mut *store, 11, 12), [12]);
}

pub fn the_log_survives_a_reopen(f: &dyn Fixture) {
    let mut store = f.open();
    append_n(&mut *store, 0, 3);
    let before = store.events_after(0, 10).unwrap();
    drop(store);
    let mut store = f.open();
    assert_eq!(store.events_after(0, 10).unwrap(), before);
    assert_eq!(store.last_event_seq().unwrap(), 3);
    assert_eq!(append_n(&mut *store, 3, 4), [4]);
}

pub fn two_connections_share_one_sequence(f: &dyn Fixture) {
    let mut a = f.open();
    let mut b = f.open();
    let mut got = Vec::new();
    for i in 0..6 {
        let s = if i % 2 == 0 { &mut a } else { &mut b };
        got.push(s.append_event(i, None, "k", &json!(i)).unwrap());
    }
    assert_eq!(got, [1, 2, 3, 4, 5, 6]);
    assert_eq!(seqs(&b.events_after(0, 10).unwrap()), got);
}

pub fn a_mangled_body_is_reported_as_corruption_naming_the_event(f: &dyn Fixture) {
    let mut store = f.open();
    append_n(&mut *store, 0, 2);
    f.exec("UPDATE events SET body = '{not json' WHERE seq = 2");
    let err = store.events_after(0, 10).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(
        err.to_string().contains("event 2: body is not JSON"),
        "{err}"
    );
    // Reading before it still works.
    assert_eq!(seqs(&store.events_after(0, 1).unwrap()), [1]);
}

pub fn a_follower_misses_nothing_while_connections_append_at_once(f: &dyn Fixture) {
    const WRITERS: u64 = 3;
    const BATCHES: u64 = 20;
    const BATCH: u64 = 5;
    let total = WRITERS * BATCHES * BATCH;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let mut store = f.open();
            std::thread::spawn(move || {
                for b in 0..BATCHES {
                    let batch: Vec<NewEvent> = (0..BATCH)
                        .map(|i| NewEvent {
                            at_ms: w * 1_000_000 + b * 1_000 + i,
                            deployment: None,
                            kind: "k".into(),
                            body: json!(i),
                        })
                        .collect();
                    store.append_events(&batch).unwrap();
                }
            })
        })
        .collect();
    // A follower pages from its cursor while they write: a seq committed
    // after a larger one would be skipped for good.
    let mut follower = f.open();
    let mut seen = Vec::new();
    let mut cursor = 0;
    while !writers.iter().all(|w| w.is_finished()) {
        let page = follower.events_after(cursor, 7).unwrap();
        match page.last() {
            Some(last) => cursor = last.seq,
            None => std::thread::yield_now(),
        }
        seen.extend(page.iter().map(|e| e.seq));
    }
    for w in writers {
        w.join().unwrap();
    }
    seen.extend(
        follower
            .events_after(cursor, usize::MAX)
            .unwrap()
            .iter()
            .map(|e| e.seq),
    );
    assert_eq!(seen, (1..=total).collect::<Vec<_>>());
}
