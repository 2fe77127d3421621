//! Cells of a recycle: the successor's check before the drain, a
//! recycle asked of a starting child, and the successor spawned once the
//! old child is gone (a looping child's held to the restart policy). The
//! drain between them is `drain.rs`'s; the `recycled` fact is recorded
//! when the successor is ready (`start.rs`).

use std::time::Instant;

use super::*;
use crate::fact::Fact;
use crate::restart::RestartDecision;

impl<W> Life<W> {
    /// A recycle from a ready child: first check that a successor could
    /// start; a second recycle meanwhile joins the first.
    pub(super) fn vet(&mut self, trigger: Trigger<W>, o: &mut Out<W>) {
        match &mut self.phase {
            Phase::Ready {
                vetting: Some(current),
            } => current.waiters.extend(trigger.waiters),
            Phase::Ready { vetting } => {
                *vetting = Some(trigger);
                o.push(Action::Vet);
            }
            _ => {}
        }
    }

    pub(super) fn vetted(
        &mut self,
        result: Result<Option<Fresh>, String>,
        now: Instant,
        o: &mut Out<W>,
    ) {
        let Phase::Ready { vetting } = &mut self.phase else {
            return;
        };
        let Some(mut trigger) = vetting.take() else {
            return;
        };
        match result {
            Ok(grants) => {
                trigger.grants = grants;
                self.start_drain(Purpose::Recycle(trigger), now, o);
            }
            Err(error) => {
                let pid = self.pid().unwrap_or(0);
                o.push(Action::Record(Fact::RecycleRefused {
                    pid,
                    cause: trigger.cause,
                    reason: trigger.reason.clone(),
                    error: error.clone(),
                }));
                if matches!(trigger.cause, RecycleCause::Bound(_)) {
                    o.push(Action::RearmPolicy);
                }
                let why = format!(
                    "not recycled: {error}; {} keeps running on pid {pid}",
                    self.id
                );
                self.refuse_all(trigger.waiters, &why, o);
            }
        }
    }

    pub(super) fn recycle_when_ready(&mut self, trigger: Trigger<W>, o: &mut Out<W>) {
        let id = self.id.clone();
        let Phase::Starting { pending, .. } = &mut self.phase else {
            return;
        };
        match pending {
            None => *pending = Some(Purpose::Recycle(trigger)),
            Some(Purpose::Recycle(current)) => current.waiters.extend(trigger.waiters),
            Some(_) => {
                let why =
                    format!("not recycled: {id} will drain as soon as its new child is ready");
                self.refuse_all(trigger.waiters, &why, o);
            }
        }
    }

    /// A child that asks to be recycled without having done any work is
    /// held to the restart policy as a crash is (in a count of its own): if
    /// it does so again soon after every start (before `healthy_after`), its
    /// successor comes after a growing delay, and more than `max_restarts`
    /// such requests within the period fail the deployment instead of
    /// recycling in a tight loop. One that served `healthy_after` or longer
    /// asked for an ordinary recycle, and clears the count.
    pub(super) fn child_recycled(
        &mut self,
        recycling: Recycling<W>,
        spawned_at: Instant,
        now: Instant,
        o: &mut Out<W>,
    ) {
        let policy = self.settings.restart;
        if now.saturating_duration_since(spawned_at) >= policy.healthy_after {
            self.self_recycles.reset();
            return self.respawn_recycled(Some(recycling), o);
        }
        match self.self_recycles.on_exit(&policy, spawned_at, now) {
            RestartDecision::Restart { delay, attempt } if !delay.is_zero() => {
                o.push(Action::Record(Fact::RecycleDelayed { delay, attempt }));
                match now.checked_add(delay) {
                    Some(until) => {
                        self.phase = Phase::Backoff {
                            until,
                            recycling: Some(recycling),
                        }
                    }
                    None => self.respawn_recycled(Some(recycling), o),
                }
            }
            RestartDecision::Restart { .. } => self.respawn_recycled(Some(recycling), o),
            RestartDecision::GiveUp { restarts, period } => {
                let last = format!(
                    "the child asked to be recycled {restarts} times within {}",
                    crate::format::format_duration(period)
                );
                let why = format!("not recycled: {}: {last}", self.id);
                self.refuse_all(recycling.trigger.waiters, &why, o);
                o.push(Action::Record(Fact::Failed {
                    restarts,
                    period,
                    last,
                }));
                self.phase = Phase::Failed;
                o.push(Action::Started);
            }
        }
    }

    /// Spawns the successor of a recycle, with the grants it checked.
    pub(super) fn respawn_recycled(&mut self, recycling: Option<Recycling<W>>, o: &mut Out<W>) {
        let grants = recycling.as_ref().and_then(|r| r.trigger.grants.clone());
        self.spawn(grants, recycling, o);
    }
}
