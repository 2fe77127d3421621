//! The one `impl Store` both backends share: every method hands its
//! arguments to the function of the same name in the backend's modules
//! `children`, `journal`, `mail` and `events`, so a backend is its SQL and
//! nothing else.

/// Implements `Store` for `$backend` by calling, in the invoking module,
/// `children::{record, forget, all}`, `journal::{append, read, heads,
/// set_verified}`, `mail::{enqueue, take, ack, replay, prune_done, counts,
/// done_ids}` and `events::{append, after, prune, last_seq}`.
macro_rules! delegate_store {
    ($backend:ty) => {
        impl $crate::store::Store for $backend {
            fn record_child(
                &mut self,
                child: &$crate::store::ChildRecord,
            ) -> Result<(), $crate::store::StoreError> {
                children::record(self, child)
            }

            fn forget_child(
                &mut self,
                deployment: &str,
                pid: u32,
            ) -> Result<(), $crate::store::StoreError> {
                children::forget(self, deployment, pid)
            }

            fn children(
                &mut self,
            ) -> Result<Vec<$crate::store::ChildRecord>, $crate::store::StoreError> {
                children::all(self)
            }

            fn append_sealed(
                &mut self,
                seal: &dyn Fn($crate::journal::JournalHead) -> $crate::journal::JournalRecord,
            ) -> Result<$crate::journal::JournalRecord, $crate::store::StoreError> {
                journal::append(self, seal)
            }

            fn journal(
                &mut self,
                deployment: Option<&str>,
            ) -> Result<Vec<$crate::journal::JournalRecord>, $crate::store::StoreError> {
                journal::read(self, deployment, 0, usize::MAX)
            }

            fn journal_after(
                &mut self,
                after: u64,
                limit: usize,
            ) -> Result<Vec<$crate::journal::JournalRecord>, $crate::store::StoreError> {
                journal::read(self, None, after, limit)
            }

            fn journal_heads(
                &mut self,
            ) -> Result<$crate::journal::JournalHeads, $crate::store::StoreError> {
                journal::heads(self)
            }

            fn set_verified_head(
                &mut self,
                head: $crate::journal::JournalHead,
            ) -> Result<(), $crate::store::StoreError> {
                journal::set_verified(self, head)
            }

            fn enqueue_mail(
                &mut self,
                deployment: &str,
                key: Option<&str>,
                payload: &[u8],
                max_inbox: u64,
                at_ms: u64,
            ) -> Result<$crate::store::Accepted, $crate::store::StoreError> {
                mail::enqueue(self, deployment, key, payload, max_inbox, at_ms)
            }

            fn take_mail(
                &mut self,
                deployment: &str,
                limit: usize,
            ) -> Result<Vec<$crate::store::MailItem>, $crate::store::StoreError> {
                mail::take(self, deployment, limit)
            }

            fn ack_mail(
                &mut self,
                deployment: &str,
                id: u64,
                outcome: &str,
                at_ms: u64,
            ) -> Result<bool, $crate::store::StoreError> {
                mail::ack(self, deployment, id, outcome, at_ms)
            }

            fn replay_mail(&mut self, deployment: &str) -> Result<u64, $crate::store::StoreError> {
                mail::replay(self, Some(deployment))
            }

            fn replay_all_mail(&mut self) -> Result<u64, $crate::store::StoreError> {
                mail::replay(self, None)
            }

            fn prune_done_mail(
                &mut self,
                done_before_ms: u64,
            ) -> Result<u64, $crate::store::StoreError> {
                mail::prune_done(self, done_before_ms)
            }

            fn mail_counts(
                &mut self,
                deployment: &str,
            ) -> Result<$crate::store::MailCounts, $crate::store::StoreError> {
                mail::counts(self, deployment)
            }

            #[cfg(test)]
            fn mail_done_ids(
                &mut self,
                deployment: &str,
            ) -> Result<Vec<u64>, $crate::store::StoreError> {
                mail::done_ids(self, deployment)
            }

            fn append_events(
                &mut self,
                new: &[$crate::store::NewEvent],
            ) -> Result<Vec<u64>, $crate::store::StoreError> {
                events::append(self, new)
            }

            fn events_after(
                &mut self,
                after: u64,
                limit: usize,
            ) -> Result<Vec<$crate::store::EventRecord>, $crate::store::StoreError> {
                events::after(self, after, limit)
            }

            fn prune_events(&mut self, keep: u64) -> Result<u64, $crate::store::StoreError> {
                events::prune(self, keep)
            }

            #[cfg(test)]
            fn last_event_seq(&mut self) -> Result<u64, $crate::store::StoreError> {
                events::last_seq(self)
            }
        }
    };
}
pub(crate) use delegate_store;
