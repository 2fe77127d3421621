//! Cells of draining: the drain itself, purposes merging (stop >
//! operator > recycle), its completion or deadline, and its budget
//! running out.

use std::time::Instant;

use super::*;
use crate::fact::Fact;

impl<W> Life<W> {
    /// Starts a drain from a ready child (a recycle goes through its check
    /// first; a check under way loses to a stronger purpose).
    pub(super) fn drain(&mut self, purpose: Purpose<W>, now: Instant, o: &mut Out<W>) {
        if let Purpose::Recycle(trigger) = purpose {
            return self.vet(trigger, o);
        }
        if let Phase::Ready { vetting } = &mut self.phase
            && let Some(lost) = vetting.take()
        {
            let why = format!(
                "not recycled: {} is being {}",
                self.id,
                being(purpose.kind())
            );
            self.refuse_all(lost.waiters, &why, o);
        }
        self.start_drain(purpose, now, o);
    }

    pub(super) fn start_drain(&mut self, purpose: Purpose<W>, now: Instant, o: &mut Out<W>) {
        let deadline = self.drain_deadline_for(purpose.kind(), now);
        let recycle = match &purpose {
            Purpose::Recycle(t) => Some((t.cause, t.reason.clone())),
            _ => None,
        };
        o.push(Action::Record(Fact::DrainStarted {
            pid: self.pid().unwrap_or(0),
            purpose: purpose.kind(),
            budget: self.settings.drain_timeout,
            recycle,
        }));
        o.push(Action::SendDrain {
            purpose: purpose.kind(),
            budget: self.settings.drain_timeout,
        });
        self.phase = Phase::Draining {
            purpose,
            deadline,
            drained: false,
        };
    }

    pub(super) fn drain_deadline_for(
        &self,
        purpose: DrainPurpose,
        now: Instant,
    ) -> Option<Instant> {
        match purpose {
            DrainPurpose::Operator => None,
            DrainPurpose::Stop | DrainPurpose::Recycle => {
                now.checked_add(self.settings.drain_deadline)
            }
        }
    }

    /// The answer to `wfhost drain` of a child that drains now.
    pub(super) fn say_draining(&mut self, to: W, o: &mut Out<W>) {
        let pid = self.pid().unwrap_or(0);
        let budget = crate::format::format_duration(self.settings.drain_timeout);
        let said = format!(
            "draining {} (pid {pid}) under a {budget} budget; it stays drained until `wfhost resume`",
            self.id
        );
        self.say(to, said, o);
    }

    /// A new reason to drain meets a drain under way: a stronger purpose
    /// takes over (keeping the budget, taking the earlier deadline), a
    /// second recycle joins the first, anything else is absorbed or refused.
    pub(super) fn merge_drain(&mut self, new: Purpose<W>, now: Instant, o: &mut Out<W>) {
        let new_deadline = self.drain_deadline_for(new.kind(), now);
        let Phase::Draining {
            purpose, deadline, ..
        } = &mut self.phase
        else {
            return;
        };
        let lost = match (purpose, new) {
            (Purpose::Recycle(current), Purpose::Recycle(joining)) => {
                current.waiters.extend(joining.waiters);
                None
            }
            (current, new) if new.kind() > current.kind() => {
                *deadline = match (new_deadline, *deadline) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (fresh, _) => fresh,
                };
                Some(std::mem::replace(current, new))
            }
            (_, new) => Some(new),
        };
        if let Some(Purpose::Recycle(trigger)) = lost {
            let now_for = self.phase.purpose().unwrap_or(DrainPurpose::Recycle);
            let why = format!(
                "not recycled: {} is being {} ({})",
                self.id,
                being(now_for),
                now_for.as_str()
            );
            self.refuse_all(trigger.waiters, &why, o);
        }
    }

    /// A request while the child is being stopped: a recycle joins one
    /// under way, a stop or drain takes it over, so nothing asked is lost.
    pub(super) fn merge_stopping(&mut self, new: Purpose<W>, to: Option<W>, o: &mut Out<W>) {
        let (Phase::Stopping { purpose, .. } | Phase::Closing { purpose, .. }) = &mut self.phase
        else {
            return;
        };
        let strength = new.kind();
        let (lost, refused) = match (purpose.as_mut(), new) {
            (Some(Purpose::Recycle(current)), Purpose::Recycle(joining)) => {
                current.waiters.extend(joining.waiters);
                (None, false)
            }
            (_, Purpose::Recycle(joining)) => (Some(joining), true),
            (Some(Purpose::Stop), Purpose::Operator) => (None, true),
            (_, new) => match purpose.replace(new) {
                Some(Purpose::Recycle(previous)) => (Some(previous), false),
                _ => (None, false),
            },
        };
        let id = &self.id;
        match (lost, refused) {
            (Some(joining), true) => self.refuse_all(joining.waiters, &self.busy("stopping"), o),
            (Some(previous), false) => {
                let why = format!("not recycled: {id} is being {}", being(strength));
                self.refuse_all(previous.waiters, &why, o);
            }
            (None, _) => {}
        }
        if let Some(to) = to {
            match refused {
                true => self.refuse(to, self.busy("stopping"), o),
                false => {
                    let said = format!("{id} stays drained once its child has stopped");
                    self.say(to, said, o);
                }
            }
        }
    }

    pub(super) fn child_drained(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Draining { drained, .. } = &mut self.phase {
            *drained = true;
        }
        self.drain_complete(now, o);
    }

    pub(super) fn steps_changed(&mut self, any: bool, now: Instant, o: &mut Out<W>) {
        if let Some(c) = self.child.as_mut() {
            c.steps_in_flight = any;
        }
        self.drain_complete(now, o);
    }

    /// A drain is over once the child said `Drained` and no step of any
    /// behaviour is left (wait steps are let finish): stop the child.
    pub(super) fn drain_complete(&mut self, now: Instant, o: &mut Out<W>) {
        let steps = self.child.as_ref().is_some_and(|c| c.steps_in_flight);
        if let Phase::Draining { drained: true, .. } = self.phase
            && !steps
        {
            self.end_drain(DrainEnd::Drained, o);
            self.terminate(Ending::Drained, now, o);
        }
    }

    pub(super) fn drain_deadline(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Draining {
            deadline: Some(d), ..
        } = self.phase
            && now >= d
        {
            self.end_drain(DrainEnd::DeadlinePassed, o);
            self.terminate(Ending::Stopped, now, o);
        }
    }

    /// Ends the budget of the drain under way (the child is stopped next).
    pub(super) fn end_drain(&mut self, why: DrainEnd, o: &mut Out<W>) {
        if let Phase::Draining { purpose, .. } = &self.phase {
            let purpose = purpose.kind();
            o.push(Action::EndDrain { purpose, why });
        }
    }

    /// The budget ran out: every run it names gets a signed cancel.
    pub(super) fn escalate(&mut self, escalation: Escalation, o: &mut Out<W>) {
        let fact = Fact::DrainEscalated {
            runs: escalation.runs.clone(),
            budget: escalation.budget,
        };
        o.push(Action::Escalate(escalation));
        o.push(Action::Record(fact));
    }

    pub(super) fn drain_without_child(&mut self, to: W, o: &mut Out<W>) {
        let said = format!("{} has no live child; it is drained now", self.id);
        self.say(to, said, o);
        let successor = self.take_successor();
        self.park_drained(None, successor, o);
    }
}

/// "stopped" or "drained", as a recycle refused by a drain's purpose says.
pub(super) fn being(purpose: DrainPurpose) -> &'static str {
    match purpose {
        DrainPurpose::Stop => "stopped",
        DrainPurpose::Operator | DrainPurpose::Recycle => "drained",
    }
}
