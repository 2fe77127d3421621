//! The stable JSON shape of `wfhost status --json` (DESIGN §8).

use std::time::Instant;

use wfhost_policy::life::DrainPurpose;

use super::{ReplicaView, RssCell, State, Status, ms};

impl ReplicaView {
    fn to_json(&self, now: Instant) -> serde_json::Value {
        serde_json::json!({
            "index": self.index,
            "role": self.role,
            "state": self.state,
            "pid": self.pid,
            "channel_id": self.channel_id,
            "uptime_ms": self.started_at.map(|t| now.saturating_duration_since(t).as_millis() as u64),
            "rss_bytes": self.rss.as_ref().and_then(RssCell::get),
            "in_hand": self.in_hand,
            "mail_done": self.mail_done,
            "steps_in_flight": self.steps_in_flight,
            "draining": self.draining,
        })
    }
}

impl Status {
    /// The stable JSON shape of `wfhost status --json` (DESIGN §8), with
    /// `mail` counts supplied from the store.
    pub fn to_json(&self, now: Instant, mail: &crate::store::MailCounts) -> serde_json::Value {
        // Mail waiting for a child that is being replaced: delivered in
        // order once the new child is installed.
        let buffered = if self.state == State::Ready {
            0
        } else {
            mail.inbox
        };
        let since =
            |t: Option<Instant>| t.map(|t| now.saturating_duration_since(t).as_millis() as u64);
        let until = |t: Option<Instant>| t.map(|t| ms(t.saturating_duration_since(now)));
        serde_json::json!({
            "id": self.id,
            "state": self.state,
            "pid": self.pid,
            "channel_id": self.channel_id,
            "uptime_ms": since(self.started_at),
            "rss_bytes": self.rss_bytes(),
            "grants_age_ms": since(self.grants_read_at),
            "restarts": self.restarts,
            "recycles": self.recycles,
            "escalations": self.escalations,
            "violations": self.violations,
            "last_recycle": self.last_recycle,
            "drain": {
                "active": self.drain.active,
                "budget_ms": self.drain.budget_ms(),
                "used_ms": self.drain.used_ms(now),
                "escalated": self.drain.escalated,
                "purpose": self.drain_purpose.map(DrainPurpose::as_str),
                "budget": self.drain.budget_state(now).as_str(),
            },
            "cancels_pending": self.cancels_pending,
            "journal_error": self.journal_error,
            "store_error": self.store_error,
            "acks_pending": self.acks_pending,
            "steps": self.steps,
            "steps_in_flight": self.steps_in_flight,
            "mail": {
                "inbox": mail.inbox,
                "processing": mail.processing,
                "working": mail.working,
                "buffered": buffered,
                "done": mail.done,
                "dead": mail.dead,
                "interrupted": mail.interrupted,
                "awaiting": mail.awaiting,
                "questions_open": mail.questions_open,
                "oldest_question_at_ms": mail.oldest_question_at_ms,
            },
            "last_exit": self.last_exit,
            "last_exit_brief": self.last_exit_brief,
            "last_exit_at_ms": self.last_exit_at_ms,
            "implementation": self.implementation,
            "protocol": self.protocol,
            "takes_mail": self.takes_mail,
            "replicas": self.replicas.iter().map(|r| r.to_json(now)).collect::<Vec<_>>(),
            "containment": self.containment,
            "cgroup": self.cgroup,
            "limits_not_applied": self.limits_not_applied,
            "since_ms": since(self.state_since),
            "next_in_ms": until(self.deadline),
            "why": self.why(now),
        })
    }
}
