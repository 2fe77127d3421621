//! The children table, on every backend.

use super::Fixture;
use crate::store::ChildRecord;

fn child(deployment: &str, pid: u32) -> ChildRecord {
    ChildRecord {
        deployment: deployment.into(),
        pid,
        start_time: 123_456_789,
        channel_id: "9f".repeat(16),
        spawned_at_ms: 1_700_000_000_000,
    }
}

pub fn children_are_remembered_until_forgotten(f: &dyn Fixture) {
    let mut store = f.open();
    store.record_child(&child("b", 20)).unwrap();
    store.record_child(&child("a", 30)).unwrap();
    store.record_child(&child("a", 10)).unwrap();
    assert_eq!(
        store.children().unwrap(),
        [child("a", 10), child("a", 30), child("b", 20)]
    );
    // A reused pid replaces the stale record.
    store.record_child(&child("c", 20)).unwrap();
    // Forgetting needs the deployment too: a stale forget is harmless.
    store.forget_child("b", 20).unwrap();
    store.forget_child("a", 10).unwrap();
    assert_eq!(store.children().unwrap(), [child("a", 30), child("c", 20)]);
    drop(store);
    let mut reopened = f.open();
    assert_eq!(reopened.children().unwrap().len(), 2);
}
