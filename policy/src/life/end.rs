//! Cells of a child's end: SIGTERM and SIGKILL, misconduct, a closed
//! channel, the exit, and what follows it (stop, drained, recycle, crash).

use std::time::Instant;

use super::*;
use crate::fact::Fact;
use crate::restart::RestartDecision;

impl<W> Life<W> {
    /// SIGTERM with the drain's purpose; SIGKILL after `kill_timeout`.
    pub(super) fn terminate(&mut self, now: Instant, o: &mut Out<W>) {
        let purpose = self.take_purpose(o);
        self.terminated = true;
        o.push(Action::Terminate);
        self.phase = Phase::Stopping {
            purpose,
            kill_at: now.checked_add(self.settings.kill_timeout),
        };
    }

    /// Takes the phase's purpose as the child leaves it: what was asked
    /// of a starting child waits for its end; a recycle still being checked
    /// is refused, since the child it would replace is ending anyway.
    pub(super) fn take_purpose(&mut self, o: &mut Out<W>) -> Option<Purpose<W>> {
        match std::mem::replace(&mut self.phase, Phase::Exited) {
            Phase::Draining { purpose, .. } => Some(purpose),
            Phase::Stopping { purpose, .. } | Phase::Closing { purpose, .. } => purpose,
            Phase::Starting { pending, .. } => {
                self.start_pending = pending;
                None
            }
            Phase::Ready {
                vetting: Some(trigger),
            } => {
                let why = format!("not recycled: the child of {} is ending", self.id);
                self.refuse_all(trigger.waiters, &why, o);
                None
            }
            _ => None,
        }
    }

    pub(super) fn misbehaved(&mut self, m: Misconduct, o: &mut Out<W>) {
        let cause = match m {
            Misconduct::Violation(v) => ExitCause::Violation(v),
            Misconduct::Hung => ExitCause::Hung,
        };
        self.kill(cause, o);
    }

    /// SIGKILL now, for `cause`; the drain's purpose (if any) still decides
    /// what follows the exit.
    pub(super) fn kill(&mut self, cause: ExitCause, o: &mut Out<W>) {
        let purpose = self.take_purpose(o);
        o.push(Action::Kill(match cause {
            ExitCause::Killed => KillWhy::Operator,
            ref other => KillWhy::Misconduct(other.clone()),
        }));
        self.kill_cause = Some(cause);
        self.phase = Phase::Stopping {
            purpose,
            kill_at: None,
        };
    }

    pub(super) fn force_kill(&mut self, o: &mut Out<W>) {
        if let Phase::Stopping { kill_at, .. } = &mut self.phase {
            *kill_at = None;
        }
        o.push(Action::Kill(KillWhy::Operator));
    }

    pub(super) fn closing(&mut self, now: Instant, o: &mut Out<W>) {
        let purpose = self.take_purpose(o);
        let kill_at = now.checked_add(self.settings.kill_timeout).unwrap_or(now);
        self.phase = Phase::Closing { purpose, kill_at };
    }

    pub(super) fn kill_deadline(&mut self, now: Instant, o: &mut Out<W>) {
        match &mut self.phase {
            Phase::Stopping { kill_at, .. } if kill_at.is_some_and(|at| now >= at) => {
                *kill_at = None;
                o.push(Action::Kill(KillWhy::Overdue));
            }
            Phase::Closing { purpose, kill_at } if now >= *kill_at => {
                let purpose = purpose.take();
                let cause =
                    ExitCause::Violation("closed its control channel but did not exit".into());
                o.push(Action::Kill(KillWhy::Misconduct(cause.clone())));
                self.kill_cause = Some(cause);
                self.phase = Phase::Stopping {
                    purpose,
                    kill_at: None,
                };
            }
            _ => {}
        }
    }

    /// The child was reaped: why it ended decides what follows. An exit
    /// during a drain, or after one, is the drain's end, not a crash; a
    /// child that ended without ever saying Hello is named as such.
    pub(super) fn reaped(&mut self, status: ExitStatus, now: Instant, o: &mut Out<W>) {
        let draining = match &self.phase {
            Phase::Draining { .. } => true,
            Phase::Closing { purpose, .. } => purpose.is_some(),
            _ => false,
        };
        let cause = match self.kill_cause.take() {
            Some(cause) => cause,
            None if self.drained_out => ExitCause::Drained(status),
            None if self.terminated => ExitCause::Stopped(status),
            None if draining => ExitCause::Drained(status),
            None => ExitCause::Exited(status),
        };
        let silent = self.child.as_ref().is_some_and(|c| !c.spoke);
        let cause = match cause {
            c @ (ExitCause::Exited(_) | ExitCause::NotReady | ExitCause::Violation(_))
                if silent =>
            {
                ExitCause::Silent(Box::new(c))
            }
            c => c,
        };
        self.ended(cause, now, o);
    }

    pub(super) fn ended(&mut self, cause: ExitCause, now: Instant, o: &mut Out<W>) {
        let purpose = self.take_purpose(o);
        let pending = self.start_pending.take();
        self.end_drain(DrainEnd::ChildExited, o);
        self.terminated = false;
        self.drained_out = false;
        self.steps_in_flight = false;
        let child = self.child.take();
        if let Some(c) = &child {
            o.push(Action::Record(Fact::Exited {
                pid: c.pid,
                channel_id: c.channel_id.clone(),
                cause: cause.clone(),
            }));
        }
        o.push(Action::ReplayMail);
        let pid = child.as_ref().map(|c| c.pid);
        // A recycle asked for while this child started waited for it.
        let pending = match pending {
            Some(Purpose::Recycle(trigger)) => {
                let why = format!(
                    "not recycled: the new child (pid {}) of {} never became ready: {}",
                    pid.unwrap_or(0),
                    self.id,
                    cause.describe()
                );
                self.refuse_all(trigger.waiters, &why, o);
                None
            }
            other => other.map(|p| p.kind()),
        };
        match (purpose, pending) {
            (Some(Purpose::Stop), _) => self.finish(true, o),
            (Some(Purpose::Operator), _) | (None, Some(DrainPurpose::Operator)) => {
                self.park_drained(pid, o)
            }
            (Some(Purpose::Recycle(trigger)), _) => {
                let spawned_at = child.as_ref().map_or(now, |c| c.spawned_at);
                // A child that asks before doing any work may be looping.
                let asked_by_idle_child = trigger.cause == RecycleCause::Child
                    && !child.as_ref().is_some_and(|c| c.worked);
                self.recycling = Some(Recycling {
                    trigger,
                    old_pid: pid,
                    old_channel_id: child.map(|c| c.channel_id),
                });
                if asked_by_idle_child {
                    self.child_recycled(spawned_at, now, o);
                } else {
                    self.self_recycles.reset();
                    self.respawn_recycled(o);
                }
            }
            (None, _) => self.crashed(cause, child, now, o),
        }
    }

    /// A child that asks to be recycled without having done any work is
    /// held to the restart policy as a crash is (in a count of its own): if
    /// it does so again soon after every start (before `healthy_after`), its
    /// successor comes after a growing delay, and more than `max_restarts`
    /// such requests within the period fail the deployment instead of
    /// recycling in a tight loop. One that served `healthy_after` or longer
    /// asked for an ordinary recycle, and clears the count.
    pub(super) fn child_recycled(&mut self, spawned_at: Instant, now: Instant, o: &mut Out<W>) {
        let policy = self.settings.restart;
        if now.saturating_duration_since(spawned_at) >= policy.healthy_after {
            self.self_recycles.reset();
            return self.respawn_recycled(o);
        }
        match self.self_recycles.on_exit(&policy, spawned_at, now) {
            RestartDecision::Restart { delay, attempt } if !delay.is_zero() => {
                o.push(Action::Record(Fact::RecycleDelayed { delay, attempt }));
                match now.checked_add(delay) {
                    Some(until) => self.phase = Phase::Backoff { until },
                    None => self.respawn_recycled(o),
                }
            }
            RestartDecision::Restart { .. } => self.respawn_recycled(o),
            RestartDecision::GiveUp { restarts, period } => {
                let last = format!(
                    "the child asked to be recycled {restarts} times within {}",
                    crate::format::format_duration(period)
                );
                if let Some(r) = self.recycling.take() {
                    let why = format!("not recycled: {}: {last}", self.id);
                    self.refuse_all(r.trigger.waiters, &why, o);
                }
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
    pub(super) fn respawn_recycled(&mut self, o: &mut Out<W>) {
        let grants = self
            .recycling
            .as_ref()
            .and_then(|r| r.trigger.grants.clone());
        self.spawn(grants, o);
    }

    /// An end nobody asked for: the restart policy decides.
    pub(super) fn crashed(
        &mut self,
        cause: ExitCause,
        child: Option<Child>,
        now: Instant,
        o: &mut Out<W>,
    ) {
        let description = cause.describe();
        if let Some(r) = self.recycling.take() {
            let why = format!("the new child of {} failed: {description}", self.id);
            self.refuse_all(r.trigger.waiters, &why, o);
        }
        let spawned_at = child.map_or(now, |c| c.spawned_at);
        match self
            .restarts
            .on_exit(&self.settings.restart, spawned_at, now)
        {
            RestartDecision::Restart { delay, attempt } => {
                o.push(Action::Record(Fact::Restarting {
                    attempt,
                    delay,
                    after: description,
                }));
                // A zero delay must not wait for a timer's next tick.
                match now.checked_add(delay) {
                    Some(until) if !delay.is_zero() => self.phase = Phase::Backoff { until },
                    _ => self.spawn(None, o),
                }
            }
            RestartDecision::GiveUp { restarts, period } => {
                o.push(Action::Record(Fact::Failed {
                    restarts,
                    period,
                    last: description,
                }));
                self.phase = Phase::Failed;
                o.push(Action::Started);
            }
        }
    }

    pub(super) fn park_drained(&mut self, pid: Option<u32>, o: &mut Out<W>) {
        o.push(Action::Record(Fact::Drained { pid }));
        self.phase = Phase::Drained;
    }

    /// The task ends; a drained deployment stays shown as drained.
    pub(super) fn finish(&mut self, exited: bool, o: &mut Out<W>) {
        if exited {
            self.phase = Phase::Exited;
        }
        if let Some(r) = self.recycling.take() {
            let why = format!("not recycled: {} is being stopped", self.id);
            self.refuse_all(r.trigger.waiters, &why, o);
        }
        o.push(Action::Finish);
    }
}
