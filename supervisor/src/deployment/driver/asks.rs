//! What the deployment is asked (by operators, the policy tick, the
//! host), routed to the crew (recycles, scaling) or to the replicas; a
//! request to every replica is split by `Request::split`, so its waiter is
//! answered once and a new request needs nothing here.

use wfhost_policy::crew::{self, Which};
use wfhost_policy::life::{Input, RecycleCause, Request};

use super::{Driver, gather};
use crate::deployment::{Ask, MailCancelAnswer, Waiter};

impl Driver {
    /// Stops every replica for good; the crew adds none from now on.
    pub(super) fn stop(&mut self) {
        self.stopping = true;
        let answers = self.crew.stop();
        self.crew_actions.extend(answers);
        for r in &mut self.replicas {
            r.stopping = true;
            r.inputs.push_back(Input::Request(Request::Stop));
        }
    }

    /// The lease is gone: SIGKILL every child's tree now, then stop for
    /// good (the machines see the kill and the exits).
    fn lease_lost(&mut self) {
        self.lease_lost = true;
        // Its mail writes the store refused were fenced: nothing waits for
        // the store, so status does not say it refuses writes.
        let health = &self.shared().backlog.health;
        health.accepted(&format!("mail of {}", self.id));
        for r in &mut self.replicas {
            if let Some(w) = r.wired.as_ref() {
                w.io.kill();
            }
        }
        self.stop();
        for r in &mut self.replicas {
            r.inputs.push_back(Input::Request(Request::Kill));
        }
    }

    /// An operator's, the policy's or the host's request.
    pub(super) fn ask(&mut self, ask: Ask) {
        match ask {
            // (An answer for a held item is sent by `Driver::handle`.)
            Ask::MailArrived | Ask::Answer { .. } => self.mail_waits(),
            Ask::LeaseRenewed => self.lease_due = true,
            Ask::LeaseLost => self.lease_lost(),
            Ask::Life(Request::Stop) => self.stop(),
            Ask::Life(Request::Recycle {
                cause,
                reason,
                waiter,
            }) => self.recycle(Which::All, cause, reason, waiter),
            Ask::Recycle {
                which,
                cause,
                reason,
                waiter,
            } => self.recycle(which, cause, reason, waiter),
            Ask::ForChild { pid, request } => match request {
                Request::Recycle {
                    cause,
                    reason,
                    waiter,
                } => match self.replicas.iter().find(|r| r.pid() == Some(pid)) {
                    Some(r) => {
                        let which = Which::One(r.index);
                        self.recycle(which, cause, reason, waiter);
                    }
                    None => {
                        if let Some(w) = waiter {
                            w.fail(format!("{}: no live child has pid {pid}", self.id));
                        }
                    }
                },
                other => {
                    if let Some(r) = self.replicas.iter_mut().find(|r| r.pid() == Some(pid)) {
                        r.inputs.push_back(Input::Request(other));
                    }
                }
            },
            Ask::Reconfigured { recycle } => {
                let cfg = self.cfg();
                let scaled = self.crew.reconfigure(cfg.replicas, cfg.recycle.overlap);
                self.crew_actions.extend(scaled);
                if recycle {
                    self.recycle(
                        Which::All,
                        RecycleCause::Operator,
                        "config reload".into(),
                        None,
                    );
                }
            }
            Ask::Life(Request::Cancel { run, waiter }) => self.cancel(run, waiter),
            Ask::CancelMail {
                holder,
                id,
                reason,
                waiter,
            } => {
                let held_by = self
                    .replicas
                    .iter_mut()
                    .find(|r| r.wired.as_ref().is_some_and(|w| w.io.channel_id == holder));
                match held_by {
                    Some(r) => r.cancel_mail(id, reason, waiter),
                    // Its child ended meanwhile: the store cancels it.
                    None => waiter.verdict(MailCancelAnswer {
                        verdict: "ended".into(),
                        detail: "its child has ended; the item ends cancelled".into(),
                        journal_seq: None,
                    }),
                }
            }
            Ask::Life(other) => self.ask_every_replica(other),
        }
    }

    pub(super) fn recycle(
        &mut self,
        which: Which,
        cause: RecycleCause,
        reason: String,
        waiter: Option<Waiter>,
    ) {
        if self.stopping {
            if let Some(w) = waiter {
                w.fail(format!(
                    "{}: not recycled: the supervisor is stopping",
                    self.id
                ));
            }
            return;
        }
        self.crew_inputs.push_back(crew::Input::Recycle {
            which,
            cause,
            reason,
            waiter,
        });
    }

    /// A cancel of one run goes to the replica running it; of every run,
    /// to every replica.
    pub(super) fn cancel(&mut self, run: Option<String>, to: Waiter) {
        if let Some(run) = &run
            && let Some(r) = self.replicas.iter_mut().find(|r| {
                r.wired
                    .as_ref()
                    .is_some_and(|w| w.budget.run_in_flight(run).is_ok())
            })
        {
            r.inputs.push_back(Input::Request(Request::Cancel {
                run: Some(run.clone()),
                waiter: to,
            }));
            return;
        }
        // Unknown runs are refused by a replica, with the runs in flight.
        self.ask_every_replica(Request::Cancel { run, waiter: to });
    }

    /// A drain, resume, kill or cancel of every replica, answered once
    /// when all have answered.
    pub(super) fn ask_every_replica(&mut self, request: Request<Waiter>) {
        if self.replicas.is_empty() {
            if let Some(w) = request.into_waiter() {
                w.fail(format!("{} has no replica running", self.id));
            }
            return;
        }
        let parts = request.split(self.replicas.len(), gather::fan_out);
        for (r, part) in self.replicas.iter_mut().zip(parts) {
            r.inputs.push_back(Input::Request(part));
        }
    }
}
