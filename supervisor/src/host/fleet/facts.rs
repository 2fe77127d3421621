//! Lease facts: logged at once, journaled and published on the lease
//! connection as soon as the database takes them.

use tracing::debug;
use wfhost_policy::Fact;

use super::Leases;
use crate::clock::unix_ms;
use crate::journal::NewJournalEntry;
use crate::record;
use crate::store::NewEvent;

impl Leases {
    /// Records a lease fact: logged, and journaled and published on the
    /// lease connection (not fenced: it is this host's account of the
    /// lease itself), now or once the database is back.
    pub(super) fn fact(&mut self, d: &str, fact: Fact) {
        record::log(d, &fact);
        self.facts.push_back((d.to_owned(), fact));
        self.round_now = true;
    }

    pub(super) async fn write_facts(&mut self) {
        while let Some((d, fact)) = self.facts.front().cloned() {
            let key = self.shared.key.clone();
            let at_ms = unix_ms();
            let entry = NewJournalEntry {
                at_ms,
                kind: fact.kind().to_owned(),
                deployment: Some(d.clone()),
                body: fact.body(),
            };
            let event = NewEvent {
                at_ms,
                deployment: Some(d),
                kind: fact.kind().to_owned(),
                body: fact.body(),
            };
            let written = self
                .call(move |s| {
                    use crate::store::{EventStore, JournalStore};
                    s.append_journal(&key, entry)?;
                    s.append_events(std::slice::from_ref(&event)).map(drop)
                })
                .await;
            match written {
                Some(Ok(())) => {
                    self.facts.pop_front();
                    self.shared.events_written();
                }
                Some(Err(e)) => return debug!(error = %e, "lease facts wait for the database"),
                None => return,
            }
        }
    }
}
