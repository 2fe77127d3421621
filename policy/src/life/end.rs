//! Cells of a child's end: SIGTERM and SIGKILL, misconduct, a closed
//! channel, the exit, and what follows it (stop, drained, recycle, crash).

use std::time::Instant;

use super::*;
use crate::fact::Fact;
use crate::restart::RestartDecision;

/// What a child leaves of the phase it was in when it is stopped or ends.
pub(super) struct Left<W> {
    /// The drain's purpose, which decides what follows its exit.
    pub(super) purpose: Option<Purpose<W>>,
    /// A drain whose budget still runs.
    pub(super) open_drain: Option<DrainPurpose>,
    /// What was asked of it while it started.
    pub(super) pending: Option<Purpose<W>>,
    /// The recycle it was to complete.
    pub(super) recycling: Option<Recycling<W>>,
}

impl<W> Life<W> {
    /// SIGTERM with the drain's purpose; SIGKILL after `kill_timeout`. A
    /// drain's budget was ended just before, if there was one.
    pub(super) fn terminate(&mut self, ending: Ending, now: Instant, o: &mut Out<W>) {
        let left = self.leave(o);
        o.push(Action::Terminate);
        self.phase = Phase::Stopping {
            purpose: left.purpose,
            kill_at: now.checked_add(self.settings.kill_timeout),
            ending,
            open_drain: None,
            pending: left.pending,
            recycling: left.recycling,
        };
    }

    /// Takes the phase's data as the child leaves it: a recycle still
    /// being checked is refused, since the child it would replace is
    /// ending anyway.
    pub(super) fn leave(&mut self, o: &mut Out<W>) -> Left<W> {
        let mut left = Left {
            purpose: None,
            open_drain: None,
            pending: None,
            recycling: None,
        };
        match std::mem::replace(&mut self.phase, Phase::Exited) {
            Phase::Draining { purpose, .. } => {
                left.open_drain = Some(purpose.kind());
                left.purpose = Some(purpose);
            }
            Phase::Stopping {
                purpose,
                open_drain,
                pending,
                recycling,
                ..
            } => {
                left = Left {
                    purpose,
                    open_drain,
                    pending,
                    recycling,
                }
            }
            Phase::Closing {
                purpose,
                open_drain,
                ..
            } => {
                left.purpose = purpose;
                left.open_drain = open_drain;
            }
            Phase::Starting {
                pending, recycling, ..
            } => {
                left.pending = pending;
                left.recycling = recycling;
            }
            Phase::Ready {
                vetting: Some(trigger),
            } => {
                let why = format!("not recycled: the child of {} is ending", self.id);
                self.refuse_all(trigger.waiters, &why, o);
            }
            Phase::Backoff { recycling, .. } | Phase::Drained { recycling } => {
                left.recycling = recycling
            }
            Phase::Ready { vetting: None } | Phase::Failed | Phase::Exited => {}
        }
        left
    }

    /// The recycle whose successor the phase holds, taken out of it.
    pub(super) fn take_successor(&mut self) -> Option<Recycling<W>> {
        match &mut self.phase {
            Phase::Starting { recycling, .. }
            | Phase::Stopping { recycling, .. }
            | Phase::Backoff { recycling, .. }
            | Phase::Drained { recycling } => recycling.take(),
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
    /// what follows the exit, and its budget runs until then.
    pub(super) fn kill(&mut self, cause: ExitCause, o: &mut Out<W>) {
        let left = self.leave(o);
        o.push(Action::Kill(match cause {
            ExitCause::Killed => KillWhy::Operator,
            ref other => KillWhy::Misconduct(other.clone()),
        }));
        self.phase = Phase::Stopping {
            purpose: left.purpose,
            kill_at: None,
            ending: Ending::Killed(cause),
            open_drain: left.open_drain,
            pending: left.pending,
            recycling: left.recycling,
        };
    }

    pub(super) fn force_kill(&mut self, o: &mut Out<W>) {
        if let Phase::Stopping { kill_at, .. } = &mut self.phase {
            *kill_at = None;
        }
        o.push(Action::Kill(KillWhy::Operator));
    }

    pub(super) fn closing(&mut self, now: Instant, o: &mut Out<W>) {
        let left = self.leave(o);
        let kill_at = now.checked_add(self.settings.kill_timeout).unwrap_or(now);
        self.phase = Phase::Closing {
            purpose: left.purpose,
            kill_at,
            open_drain: left.open_drain,
        };
    }

    pub(super) fn kill_deadline(&mut self, now: Instant, o: &mut Out<W>) {
        match &mut self.phase {
            Phase::Stopping { kill_at, .. } if kill_at.is_some_and(|at| now >= at) => {
                *kill_at = None;
                o.push(Action::Kill(KillWhy::Overdue));
            }
            Phase::Closing {
                purpose,
                kill_at,
                open_drain,
            } if now >= *kill_at => {
                let (purpose, open_drain) = (purpose.take(), open_drain.take());
                let cause =
                    ExitCause::Violation("closed its control channel but did not exit".into());
                o.push(Action::Kill(KillWhy::Misconduct(cause.clone())));
                self.phase = Phase::Stopping {
                    purpose,
                    kill_at: None,
                    ending: Ending::Killed(cause),
                    open_drain,
                    pending: None,
                    recycling: None,
                };
            }
            _ => {}
        }
    }

    /// The child was reaped: why it ended, read from the phase, decides
    /// what follows. An exit during a drain, or after one, is the drain's
    /// end, not a crash; a child that ended without ever saying Hello is
    /// named as such.
    pub(super) fn reaped(&mut self, status: ExitStatus, now: Instant, o: &mut Out<W>) {
        let cause = match &self.phase {
            Phase::Stopping { ending, .. } => match ending {
                Ending::Killed(cause) => cause.clone(),
                Ending::Drained => ExitCause::Drained(status),
                Ending::Stopped => ExitCause::Stopped(status),
            },
            Phase::Draining { .. }
            | Phase::Closing {
                purpose: Some(_), ..
            } => ExitCause::Drained(status),
            _ => ExitCause::Exited(status),
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
        let left = self.leave(o);
        if let Some(purpose) = left.open_drain {
            o.push(Action::EndDrain {
                purpose,
                why: DrainEnd::ChildExited,
            });
        }
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
        let pending = match left.pending {
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
        match (left.purpose, pending) {
            (Some(Purpose::Stop), _) => self.finish(true, left.recycling, o),
            (Some(Purpose::Operator), _) | (None, Some(DrainPurpose::Operator)) => {
                self.park_drained(pid, left.recycling, o)
            }
            (Some(Purpose::Recycle(trigger)), _) => {
                let spawned_at = child.as_ref().map_or(now, |c| c.spawned_at);
                // A child that asks before doing any work may be looping.
                let asked_by_idle_child = trigger.cause == RecycleCause::Child
                    && !child.as_ref().is_some_and(|c| c.worked);
                let recycling = Recycling {
                    trigger,
                    old_pid: pid,
                    old_channel_id: child.map(|c| c.channel_id),
                };
                if asked_by_idle_child {
                    self.child_recycled(recycling, spawned_at, now, o);
                } else {
                    self.self_recycles.reset();
                    self.respawn_recycled(Some(recycling), o);
                }
            }
            (None, _) => self.crashed(cause, child, left.recycling, now, o),
        }
    }

    /// An end nobody asked for: the restart policy decides.
    pub(super) fn crashed(
        &mut self,
        cause: ExitCause,
        child: Option<Child>,
        recycling: Option<Recycling<W>>,
        now: Instant,
        o: &mut Out<W>,
    ) {
        let description = cause.describe();
        if let Some(r) = recycling {
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
                    Some(until) if !delay.is_zero() => {
                        self.phase = Phase::Backoff {
                            until,
                            recycling: None,
                        }
                    }
                    _ => self.spawn(None, None, o),
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

    pub(super) fn park_drained(
        &mut self,
        pid: Option<u32>,
        recycling: Option<Recycling<W>>,
        o: &mut Out<W>,
    ) {
        o.push(Action::Record(Fact::Drained { pid }));
        self.phase = Phase::Drained { recycling };
    }

    /// The task ends; a drained deployment stays shown as drained.
    pub(super) fn finish(&mut self, exited: bool, recycling: Option<Recycling<W>>, o: &mut Out<W>) {
        if exited {
            self.phase = Phase::Exited;
        }
        if let Some(r) = recycling {
            let why = format!("not recycled: {} is being stopped", self.id);
            self.refuse_all(r.trigger.waiters, &why, o);
        }
        o.push(Action::Finish);
    }
}
