//! Between the crew and the replicas: what replicas tell (their readiness,
//! their recycle asks, their end) goes to the crew; what the crew decides
//! (add, recycle, retire a replica; a successor that took over) is done.

use tracing::info;
use wfhost_policy::Fact;
use wfhost_policy::crew::{self, Which};
use wfhost_policy::life::{Answer, Input, RecycleCause, Request};

use super::Driver;
use super::replica::{Replica, Told};
use crate::deployment::Waiter;

impl Driver {
    /// Takes what the replicas owe the store and tell the deployment.
    pub(super) fn collect(&mut self) {
        let mut told = Vec::new();
        for r in &mut self.replicas {
            for report in r.reports.drain(..) {
                self.writes.report(report);
            }
            for replay in r.replays.drain(..) {
                self.writes.replay(replay);
            }
            told.extend(r.told.drain(..).map(|t| (r.index, t)));
            self.answers.append(&mut r.answers);
            self.counted.append(&mut r.counted);
        }
        for (index, t) in told {
            self.told(index, t);
        }
        self.replicas.retain(|r| !r.finished);
    }

    /// What a replica told: the crew hears of it.
    pub(super) fn told(&mut self, index: u32, told: Told) {
        let input = match told {
            Told::Ready { pid } => crew::Input::Ready { index, pid },
            Told::Refused { why } => crew::Input::Refused { index, why },
            Told::Recycle { cause, reason } => crew::Input::Recycle {
                which: Which::One(index),
                cause,
                reason,
                waiter: None,
            },
            Told::Finished => crew::Input::Ended { index },
        };
        self.crew_inputs.push_back(input);
    }

    /// Carries out one of the crew's actions.
    pub(super) fn crew_act(&mut self, action: crew::Action<Waiter>) {
        match action {
            crew::Action::Add { index } => {
                let labelled = index > 1 || self.cfg().replicas > 1;
                let mut r = Replica::new(index, labelled, &self.parts);
                r.successor = self
                    .crew
                    .slots()
                    .iter()
                    .any(|s| s.index == index && s.replaces.is_some());
                self.replicas.push(r);
            }
            crew::Action::Recycle {
                index,
                cause,
                reason,
            } => {
                if let Some(r) = self.replica(index) {
                    r.inputs.push_back(Input::Request(Request::Recycle {
                        cause,
                        reason,
                        waiter: Some(Waiter::Crew(index)),
                    }));
                }
            }
            crew::Action::Replaced {
                old,
                new,
                cause,
                reason,
            } => self.replaced(old, new, cause, reason),
            crew::Action::Retire { index } => {
                if let Some(r) = self.replica(index) {
                    info!(deployment = %r.label, pid = r.pid(), "retiring this replica: drain, then stop");
                    r.inputs.push_back(Input::Request(Request::Stop));
                }
            }
            crew::Action::Answer { to, answer } => {
                self.publish();
                to.recycled(answer);
            }
        }
    }

    /// An overlapping recycle's successor took over: the recycle is done,
    /// and journaled as one, old child to new.
    pub(super) fn replaced(&mut self, old: u32, new: u32, cause: RecycleCause, reason: String) {
        let (old_pid, old_channel_id) = self
            .replica(old)
            .and_then(|r| r.wired.as_ref())
            .map_or((None, None), |w| {
                (Some(w.io.pid), Some(w.io.channel_id.clone()))
            });
        let Some(r) = self.replica(new) else { return };
        let Some(w) = r.wired.as_ref() else { return };
        let fact = Fact::Recycled {
            cause,
            reason,
            old_pid,
            new_pid: w.io.pid,
            old_channel_id,
            new_channel_id: w.io.channel_id.clone(),
        };
        r.record(fact);
    }

    pub(super) fn replica(&mut self, index: u32) -> Option<&mut Replica> {
        self.replicas.iter_mut().find(|r| r.index == index)
    }
}

/// What the crew hears of a replica's answer to the recycle it asked of it.
pub(super) fn crew_heard(index: u32, answer: Result<Answer, String>) -> crew::Input<Waiter> {
    match answer {
        Ok(Answer::Recycled { pid }) => crew::Input::Recycled { index, pid },
        Ok(other) => crew::Input::Refused {
            index,
            why: format!("unexpected answer {other:?}"),
        },
        Err(why) => crew::Input::Refused { index, why },
    }
}
