//! The one `impl Store` both backends share: every method hands its
//! arguments to the function of the same name in the backend's modules
//! `children`, `journal`, `mail`, `mail_admin` and `events`, so a backend is its SQL and
//! nothing else.

/// Implements `Store` for `$backend` by calling, in the invoking module,
/// `children::{record, forget, all}`, `journal::{append, read, heads,
/// set_verified}`, `mail::{enqueue, take, ack, replay, replay_all,
/// prune_done, counts, done_ids}`, `mail_admin::{list, item, payload,
/// retry, purge}` and `events::{append, after, prune, last_seq}`.
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

            fn enqueue_mail_many(
                &mut self,
                offers: &[$crate::store::Offer],
            ) -> Result<
                Vec<Result<$crate::store::Accepted, $crate::store::StoreError>>,
                $crate::store::StoreError,
            > {
                mail::enqueue_many(self, offers)
            }

            fn take_mail(
                &mut self,
                deployment: &str,
                holder: &$crate::store::Holder,
                limit: usize,
                at_ms: u64,
            ) -> Result<Vec<$crate::store::MailItem>, $crate::store::StoreError> {
                mail::take(self, deployment, holder, limit, at_ms)
            }

            fn ack_mail(
                &mut self,
                deployment: &str,
                holder: &$crate::store::Holder,
                id: u64,
                outcome: &str,
                at_ms: u64,
            ) -> Result<bool, $crate::store::StoreError> {
                mail::ack(self, deployment, holder, id, outcome, at_ms)
            }

            fn ack_mail_many(
                &mut self,
                deployment: &str,
                acks: &[$crate::store::AckOf],
                at_ms: u64,
            ) -> Result<Vec<bool>, $crate::store::StoreError> {
                mail::ack_many(self, deployment, acks, at_ms)
            }

            fn replay_mail(
                &mut self,
                deployment: &str,
                holder: &$crate::store::Holder,
                ending: &$crate::store::Ending,
                max_deliveries: u32,
            ) -> Result<$crate::store::Replayed, $crate::store::StoreError> {
                mail::replay(self, deployment, holder, ending, max_deliveries)
            }

            fn replay_all_mail(&mut self, at_ms: u64) -> Result<u64, $crate::store::StoreError> {
                mail::replay_all(self, at_ms)
            }

            fn prune_done_mail(
                &mut self,
                done_before_ms: u64,
            ) -> Result<u64, $crate::store::StoreError> {
                mail::prune_done(self, done_before_ms)
            }

            fn list_mail(
                &mut self,
                query: &$crate::store::MailQuery,
            ) -> Result<$crate::store::MailPage, $crate::store::StoreError> {
                mail_admin::list(self, query)
            }

            fn mail_item(
                &mut self,
                id: u64,
            ) -> Result<Option<$crate::store::MailView>, $crate::store::StoreError> {
                mail_admin::item(self, id)
            }

            fn mail_payload(
                &mut self,
                id: u64,
                offset: u64,
                len: usize,
            ) -> Result<Option<Vec<u8>>, $crate::store::StoreError> {
                mail_admin::payload(self, id, offset, len)
            }

            fn retry_dead_mail(
                &mut self,
                deployment: &str,
                id: Option<u64>,
                by: &str,
                at_ms: u64,
            ) -> Result<$crate::store::Retried, $crate::store::StoreError> {
                mail_admin::retry(self, deployment, id, by, at_ms)
            }

            fn purge_dead_mail(
                &mut self,
                deployment: Option<&str>,
                dead_before_ms: u64,
            ) -> Result<Vec<(String, u64)>, $crate::store::StoreError> {
                mail_admin::purge(self, deployment, dead_before_ms)
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
