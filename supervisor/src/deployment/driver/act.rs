//! A replica's machine's actions carried out, and what it shows: facts
//! recorded (and told to the deployment where its crew must hear them)
//! and the status projected from its life and its child.

use std::time::{Duration, Instant};

use tracing::{debug, error, info, warn};
use wfhost_ipc::{CancelOrigin, Control};
use wfhost_policy::life::{Action, DrainEnd, DrainPurpose, Escalation, Fresh, Input, KillWhy};
use wfhost_policy::liveness::Liveness;
use wfhost_policy::{Fact, format_duration};

use super::replica::{Replica, Told, Wired, settings};
use crate::clock::unix_ms;
use crate::deployment::child::LiveChild;
use crate::deployment::mail::settle;
use crate::deployment::mail::writes::Replay;
use crate::deployment::policy_tick::Watched;
use crate::deployment::{Waiter, cancel, recycle};
use crate::record;
use crate::status::{DrainView, ReplicaView, Role, State, Status};
use crate::store::Holder;

impl Replica {
    /// Carries out one of the machine's actions: one arm per action, kept
    /// as one table so what each action does is read in one place.
    pub(super) async fn act(&mut self, action: Action<Waiter>) {
        let now = Instant::now();
        match action {
            Action::Spawn { grants } => self.spawn(grants).await,
            Action::Dispatch => self.want_dispatch(),
            Action::Vet => self.vet().await,
            Action::SendDrain { purpose, budget } => self.send_drain(purpose, budget, now).await,
            Action::EndDrain { purpose, why } => self.end_drain(purpose, why, now),
            Action::Escalate(escalation) => self.escalate(escalation),
            Action::Terminate => self.terminate().await,
            Action::Kill(why) => self.kill(why),
            Action::Cancel { run, to } => self.operator_cancel(run, to),
            Action::ReplayMail => self.replay_mail(),
            // The deployment answers once its status says so.
            Action::Answer { to, answer } => self.answers.push((to, answer)),
            Action::Record(fact) => self.record_ending(fact),
            Action::RearmPolicy => self.rearm_policy(),
            Action::Started => self.shared.started.notify_one(),
            Action::Finish => self.finish(),
        }
    }

    /// The live child may take more mail.
    fn want_dispatch(&mut self) {
        if let Some(w) = self.wired.as_mut() {
            w.dispatch.want();
        }
    }

    /// Checks whether a recycle may go ahead; the machine hears the verdict.
    async fn vet(&mut self) {
        let vetted = recycle::vet(&self.cfg).await;
        self.inputs.push_back(Input::Vetted(vetted));
    }

    /// Starts the drain budget the machine gave and tells the child to drain.
    async fn send_drain(&mut self, purpose: DrainPurpose, budget: Duration, now: Instant) {
        let id = &self.label;
        let Some(w) = self.wired.as_mut() else { return };
        w.budget.begin_drain(now, budget);
        info!(deployment = %id, pid = w.io.pid, purpose = purpose.as_str(), budget = %format_duration(budget), "draining");
        let budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
        // A drain that starts with nothing to cancel starts paused.
        let paused = w.budget.transition(now).map(Fact::from);
        if let Err(e) = w.io.send(&self.cfg, Control::Drain { budget_ms }).await {
            debug!(deployment = %id, pid = w.io.pid, error = %e, "drain not sent");
        }
        if let Some(fact) = paused {
            self.record(fact);
        }
    }

    /// Ends the drain's budget (the live child's, else the one just
    /// reaped) and records how much of it was used.
    fn end_drain(&mut self, purpose: DrainPurpose, why: DrainEnd, now: Instant) {
        let budget = match self.wired.as_mut() {
            Some(w) => Some(&mut w.budget),
            None => self.retired.as_mut(),
        };
        let used = budget.map_or(Duration::ZERO, |b| b.end_drain(now));
        if why == DrainEnd::DeadlinePassed {
            warn!(deployment = %self.label, purpose = purpose.as_str(), "drain_deadline passed before the child drained; stopping it");
        }
        self.record(Fact::DrainEnded { purpose, why, used });
    }

    /// The budget ran out: a signed cancel of every run it names is queued
    /// for the journal (sent once committed).
    fn escalate(&mut self, escalation: Escalation) {
        let Some(w) = self.wired.as_mut() else { return };
        let (reason, signed) = cancel::for_escalation(&escalation, &self.shared.key, &self.cfg.id);
        warn!(deployment = %self.label, pid = w.io.pid, runs = %escalation.runs.join(", "), "{reason}; cancelling");
        for s in signed {
            w.cancels.push(cancel::Signed::Run(s), None);
        }
    }

    /// SIGTERM to the live child's process group.
    async fn terminate(&mut self) {
        let Some(w) = self.wired.as_mut() else { return };
        info!(deployment = %self.label, pid = w.io.pid, "stopping: SIGTERM to process group");
        w.io.terminate().await;
    }

    /// SIGKILL to the live child, logged with why.
    fn kill(&mut self, why: KillWhy) {
        let id = &self.label;
        let Some(w) = self.wired.as_ref() else { return };
        let pid = w.io.pid;
        match why {
            KillWhy::Misconduct(cause) => {
                error!(deployment = %id, pid, reason = %cause.describe(), "killing child")
            }
            KillWhy::Operator => warn!(deployment = %id, pid, "operator forced SIGKILL"),
            KillWhy::Overdue => {
                warn!(deployment = %id, pid, kill_timeout = %format_duration(self.cfg.kill_timeout),
                    "child did not exit after SIGTERM; sending SIGKILL")
            }
        }
        w.io.kill();
    }

    /// The ended child's unacknowledged mail is owed back to the inbox.
    fn replay_mail(&mut self) {
        if let Some(replay) = self.ended.take() {
            self.replays.push(replay);
        }
    }

    /// Records a fact; a child's end is also kept as the holder and cause
    /// of the mail replay the machine asks for just after.
    fn record_ending(&mut self, fact: Fact) {
        if let Fact::Exited {
            pid,
            channel_id,
            cause,
        } = &fact
        {
            let holder = Holder {
                channel_id: channel_id.clone(),
                pid: *pid,
            };
            let mut ending = settle::ending(cause, self.stopping, self.cfg.hold);
            if std::mem::take(&mut self.deadline_recycled) {
                ending.counts = false;
            }
            self.ended = Some(Replay { holder, ending });
        }
        self.record(fact)
    }

    /// The policy watches the live child's bounds again after a refused
    /// recycle.
    fn rearm_policy(&mut self) {
        if let Some(w) = self.wired.as_mut() {
            self.watchlist.rearm(w.io.pid);
            // A refused `max_mail` recycle asks again after as
            // many items more, not on every ack.
            if w.mail_bound_asked {
                w.mail_bound_asked = false;
                w.mail_done = 0;
            }
        }
    }

    /// The replica's life is over; its deployment hears so.
    fn finish(&mut self) {
        self.finished = true;
        self.told.push(Told::Finished);
    }

    /// Spawns the next child with the configuration in force now.
    pub(super) async fn spawn(&mut self, grants: Option<Fresh>) {
        self.cfg = self.slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.life.reconfigure(settings(&self.cfg));
        match LiveChild::spawn(&self.cfg, &self.shared, grants).await {
            Ok(io) => {
                self.status_mut().contained(io.containment());
                let (pid, channel_id) = (io.pid, io.channel_id.clone());
                self.wired = Some(Wired::new(io));
                self.inputs.push_back(Input::Spawned { pid, channel_id });
            }
            Err(e) => {
                error!(deployment = %self.label, reason = %e, "cannot start a child");
                self.inputs.push_back(Input::SpawnFailed(e));
            }
        }
    }

    /// An operator's signed cancel of one run, or of every run.
    pub(super) fn operator_cancel(&mut self, run: Option<String>, to: Waiter) {
        let Some(w) = self.wired.as_mut() else {
            return to.fail(format!("{} has no live child", self.label));
        };
        if let Some(r) = &run
            && let Err(in_flight) = w.budget.run_in_flight(r)
        {
            let listed = if in_flight.is_empty() {
                "none".to_owned()
            } else {
                in_flight.join(", ")
            };
            return to.fail(format!(
                "run {r:?} has no step in flight in {}; runs in flight: {listed}",
                self.label
            ));
        }
        let signed = cancel::sign(
            &self.shared.key,
            CancelOrigin::Operator,
            &self.cfg.id,
            run,
            "operator cancel".into(),
        );
        w.cancels.push(cancel::Signed::Run(signed), Some(to));
    }

    /// A cancel of mail item `id`, which this replica's child holds: a
    /// protocol-3 child is sent it once it is journaled, and its verdict
    /// awaited; a protocol-2 child has no such message (the store has
    /// recorded the cancel: if the child ends first, the item ends
    /// cancelled).
    pub(super) fn cancel_mail(&mut self, id: u64, reason: String, to: Waiter) {
        let Some(w) = self.wired.as_mut() else {
            return to.fail(format!("{}: no live child", self.label));
        };
        if w.io.protocol() < 3 {
            return to.verdict(crate::deployment::MailCancelAnswer {
                verdict: "not-acknowledged".into(),
                detail: format!(
                    "its child (pid {}) speaks protocol {}, which has no cancel of one item: the item runs on; if the child ends first, it ends cancelled",
                    w.io.pid,
                    w.io.protocol()
                ),
                journal_seq: None,
            });
        }
        let signed = cancel::sign_mail(
            &self.shared.key,
            CancelOrigin::Operator,
            &self.cfg.id,
            id,
            reason,
        );
        w.cancels.push(cancel::Signed::Mail(signed), Some(to));
    }

    /// Records a fact: logged, counted in status, journaled if it is a
    /// decision, published on the event log; what the crew must hear of
    /// it is told to the deployment.
    pub(super) fn record(&mut self, fact: Fact) {
        record::log(&self.label, &fact);
        match &fact {
            Fact::Ready { pid, .. } => {
                self.child_ready();
                self.told.push(Told::Ready { pid: *pid });
            }
            Fact::Restarting { after, .. } if self.successor && !self.life.ever_ready() => {
                self.told.push(Told::Refused {
                    why: format!(
                        "not recycled: the new child of {} never became ready: {after}",
                        self.label
                    ),
                })
            }
            Fact::Failed { last, .. } if self.successor && !self.life.ever_ready() => {
                self.told.push(Told::Refused {
                    why: format!("not recycled: {} failed: {last}", self.label),
                })
            }
            _ => {}
        }
        self.shared.record(Some(&self.cfg.id), &fact);
        // Counted in status with the state it leads to, in one update.
        self.counted.push((fact, unix_ms()));
    }

    /// The child is ready: pings begin and the policy watches it.
    pub(super) fn child_ready(&mut self) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        let now = Instant::now();
        w.liveness = Some(Liveness::new(
            self.cfg.liveness_interval,
            self.cfg.liveness_timeout,
            now,
        ));
        self.watchlist.add(Watched {
            deployment: self.label.clone(),
            pid: w.io.pid,
            started_at: w.io.started_at,
            grants_read_at: w.io.grants_read_at,
            bounds: recycle::bounds(&self.cfg),
            jitter: recycle::jitter(&w.io.channel_id),
            planned: recycle::planned(
                &self.cfg,
                recycle::jitter(&w.io.channel_id),
                std::time::SystemTime::now(),
            ),
            rss: std::sync::Mutex::new(w.io.rss_reader()),
            rss_bytes: w.rss.clone(),
            asks: self.me.clone(),
            asked: Default::default(),
        });
    }

    pub(super) fn status_mut(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copies the life's phase and the live child's facts into the
    /// deployment's status, as the deployment's own (this replica serves
    /// first).
    pub(super) fn publish_into(&self, st: &mut Status, now: Instant) {
        let state = State::of(self.life.phase());
        if st.state != state || st.state_since.is_none() {
            st.state_since = Some(now);
        }
        st.state = state;
        st.deadline = self.life.deadline();
        st.drain_purpose = self.life.phase().purpose();
        st.ever_ready |= self.life.ever_ready();
        let Some(w) = &self.wired else {
            return Self::publish_none(st);
        };
        if st.pid != Some(w.io.pid) {
            st.pid = Some(w.io.pid);
            st.channel_id = Some(w.io.channel_id.clone());
        }
        st.started_at = Some(w.io.started_at);
        st.grants_read_at = w.io.grants_read_at;
        let (view, steps, n) = DrainView::of(&w.budget, now, self.cfg.drain_timeout);
        st.drain = view;
        st.steps = steps;
        st.steps_in_flight = n;
        st.cancels_pending = w.cancels.len();
        if let Some(hello) = &w.io.hello {
            st.takes_mail = Some(hello.takes_mail);
            st.protocol = Some(hello.protocol);
            if st.implementation.as_deref() != Some(hello.implementation.as_str()) {
                st.implementation = Some(hello.implementation.clone());
            }
        }
    }

    /// No live child to show.
    pub(super) fn publish_none(st: &mut Status) {
        st.pid = None;
        st.channel_id = None;
        st.started_at = None;
        st.grants_read_at = None;
        st.drain.active = false;
        st.steps.clear();
        st.steps_in_flight = 0;
        st.cancels_pending = 0;
    }

    /// This replica as `status` lists it.
    pub(super) fn view(&self, role: Role) -> ReplicaView {
        let w = self.wired.as_ref();
        ReplicaView {
            index: self.index,
            role,
            state: State::of(self.life.phase()),
            pid: w.map(|w| w.io.pid),
            channel_id: w.map(|w| w.io.channel_id.clone()),
            started_at: w.map(|w| w.io.started_at),
            rss: w.map(|w| w.rss.clone()),
            in_hand: w.map_or(0, |w| w.dispatch.in_flight()),
            mail_done: w.map_or(0, |w| w.mail_done),
            steps_in_flight: w.map_or(0, |w| w.budget.steps().len()),
            draining: matches!(self.life.phase().name(), "draining"),
        }
    }
}
