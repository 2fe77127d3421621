//! Cells of a child's coming up: spawned, ready (with what was asked
//! meanwhile, and the recycle it completes), the ready deadline, restarts
//! after a backoff, resumes.

use std::time::Instant;

use super::*;
use crate::fact::Fact;

impl<W> Life<W> {
    pub(super) fn spawned(&mut self, pid: u32, channel_id: String, now: Instant, o: &mut Out<W>) {
        if let Phase::Starting { ready_by, .. } = &mut self.phase {
            *ready_by = now.checked_add(self.settings.ready_timeout);
        }
        o.push(Action::Record(Fact::Spawned {
            pid,
            channel_id: channel_id.clone(),
        }));
        self.child = Some(Child {
            pid,
            channel_id,
            spawned_at: now,
            was_ready: false,
            worked: false,
            spoke: false,
            steps_in_flight: false,
        });
    }

    pub(super) fn said_hello(&mut self) {
        if let Some(child) = self.child.as_mut() {
            child.spoke = true;
        }
    }

    pub(super) fn became_ready(&mut self, now: Instant, o: &mut Out<W>) {
        let (pending, recycling) =
            match std::mem::replace(&mut self.phase, Phase::Ready { vetting: None }) {
                Phase::Starting {
                    pending, recycling, ..
                } => (pending, recycling),
                _ => (None, None),
            };
        let Some(child) = self.child.as_mut() else {
            return;
        };
        child.was_ready = true;
        child.spoke = true;
        let (pid, channel_id) = (child.pid, child.channel_id.clone());
        o.push(Action::Record(Fact::Ready {
            pid,
            channel_id: channel_id.clone(),
        }));
        if !std::mem::replace(&mut self.ever_ready, true) {
            o.push(Action::Started);
        }
        if let Some(r) = recycling {
            o.push(Action::Record(Fact::Recycled {
                cause: r.trigger.cause,
                reason: r.trigger.reason.clone(),
                old_pid: r.old_pid,
                new_pid: pid,
                old_channel_id: r.old_channel_id,
                new_channel_id: channel_id,
            }));
            for to in r.trigger.waiters {
                o.push(Action::Answer {
                    to,
                    answer: Ok(Answer::Recycled { pid }),
                });
            }
        }
        o.push(Action::Dispatch);
        match pending {
            None | Some(Purpose::Stop) => {}
            Some(Purpose::Operator) => self.start_drain(Purpose::Operator, now, o),
            Some(Purpose::Recycle(trigger)) => self.vet(trigger, o),
        }
    }

    pub(super) fn ready_deadline(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Starting {
            ready_by: Some(by), ..
        } = self.phase
            && now >= by
        {
            self.kill(ExitCause::NotReady, o);
        }
    }

    pub(super) fn stop_starting(&mut self, now: Instant, o: &mut Out<W>) {
        self.terminate(Ending::Stopped, now, o);
        if let Phase::Stopping { purpose, .. } = &mut self.phase {
            *purpose = Some(Purpose::Stop);
        }
    }

    pub(super) fn drain_when_ready(&mut self, to: W, o: &mut Out<W>) {
        let id = self.id.clone();
        if let Phase::Starting { pending, .. } = &mut self.phase
            && let Some(Purpose::Recycle(trigger)) = pending.replace(Purpose::Operator)
        {
            let why = format!("not recycled: {id} is being drained");
            self.refuse_all(trigger.waiters, &why, o);
        }
        self.say(
            to,
            format!("{id} will drain as soon as its new child is ready"),
            o,
        );
    }

    /// Spawns a child (a recycle's successor with the grants it checked).
    pub(super) fn spawn(
        &mut self,
        grants: Option<Fresh>,
        recycling: Option<Recycling<W>>,
        o: &mut Out<W>,
    ) {
        self.phase = Phase::Starting {
            ready_by: None,
            pending: None,
            recycling,
        };
        o.push(Action::Spawn { grants });
    }

    pub(super) fn backoff_over(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Backoff { until, recycling } = &mut self.phase
            && now >= *until
        {
            // A delayed recycle's successor, or a crashed child's.
            let recycling = recycling.take();
            self.respawn_recycled(recycling, o);
        }
    }

    pub(super) fn resume(&mut self, to: W, o: &mut Out<W>) {
        let from = self.phase.name();
        o.push(Action::Record(Fact::Resumed { from }));
        self.restarts.reset();
        let said = format!("{} is starting a fresh child", self.id);
        self.say(to, said, o);
        let successor = self.take_successor();
        self.spawn(None, successor, o);
    }
}
