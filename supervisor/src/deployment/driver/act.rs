//! The machine's actions carried out, and what the deployment shows:
//! facts recorded and the status projected from the life and the child.

use std::time::{Duration, Instant};

use tracing::{debug, error, info, warn};
use wfhost_ipc::{CancelOrigin, Control};
use wfhost_policy::life::{Action, Fresh, Input, KillWhy};
use wfhost_policy::liveness::Liveness;
use wfhost_policy::{Fact, format_duration};

use super::{Driver, Wired, settings};
use crate::deployment::child::LiveChild;
use crate::deployment::mail;
use crate::deployment::writes::Replay;
use crate::deployment::{Waiter, cancel, recycle};
use crate::host::policy_tick::Watched;
use crate::observe::record;
use crate::observe::status::{State, Status};
use crate::procfs::RssReader;
use crate::shared::unix_ms;
use crate::store::Holder;

impl Driver {
    /// Carries out one of the machine's actions.
    pub(super) async fn act(&mut self, action: Action<Waiter>) {
        let now = Instant::now();
        let id = self.cfg.id.clone();
        match action {
            Action::Spawn { grants } => self.spawn(grants).await,
            Action::Dispatch => {
                if let Some(w) = self.wired.as_mut() {
                    w.dispatch.want();
                }
            }
            Action::Vet => {
                let vetted = recycle::vet(&self.cfg);
                self.inputs.push_back(Input::Vetted(vetted));
            }
            Action::SendDrain(purpose) => {
                let Some(w) = self.wired.as_mut() else { return };
                let budget = self.cfg.drain_timeout;
                w.budget.begin(now, budget);
                info!(deployment = %id, pid = w.io.pid, purpose = purpose.as_str(), budget = %format_duration(budget), "draining");
                let budget_ms = u64::try_from(budget.as_millis()).unwrap_or(u64::MAX);
                // A drain that starts with nothing to cancel starts paused.
                let paused = w.budget.transition(now);
                if let Err(e) = w.io.send(&self.cfg, Control::Drain { budget_ms }).await {
                    debug!(deployment = %id, pid = w.io.pid, error = %e, "drain not sent");
                }
                if let Some(fact) = paused {
                    self.record(fact);
                }
            }
            Action::EndDrain { purpose, why } => {
                let budget = match self.wired.as_mut() {
                    Some(w) => Some(&mut w.budget),
                    None => self.retired.as_mut(),
                };
                let used = budget.map_or(Duration::ZERO, |b| b.end(now));
                if why == "drain_deadline passed" {
                    warn!(deployment = %id, purpose = purpose.as_str(), "drain_deadline passed before the child drained; stopping it");
                }
                self.record(Fact::DrainEnded { purpose, why, used });
            }
            Action::Terminate => {
                let Some(w) = self.wired.as_mut() else { return };
                info!(deployment = %id, pid = w.io.pid, "stopping: SIGTERM to process group");
                w.io.terminate().await;
            }
            Action::Kill(why) => {
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
            Action::Cancel { run, to } => self.operator_cancel(run, to),
            Action::ReplayMail => {
                if let Some(replay) = self.ended.take() {
                    self.writes.replay(replay);
                }
            }
            Action::Answer { to, answer } => {
                // An operator told "done" reads a status that says so.
                self.publish();
                to.answer(answer)
            }
            Action::Record(fact) => {
                // The machine records a child's end just before it asks
                // for the replay of its mail: the replay's holder and cause.
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
                    let ending = mail::ending(cause, self.stopping);
                    self.ended = Some(Replay { holder, ending });
                }
                self.record(fact)
            }
            Action::RearmPolicy => {
                if let Some(w) = &self.wired {
                    self.shared.watchlist.rearm(w.io.pid);
                }
            }
            Action::Started => self.shared.started.notify_one(),
            Action::Finish => self.finished = true,
        }
    }

    /// Spawns the next child with the configuration in force now.
    pub(super) async fn spawn(&mut self, grants: Option<Fresh>) {
        self.cfg = self.slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.life.reconfigure(settings(&self.cfg));
        match LiveChild::spawn(&self.cfg, &self.shared, grants).await {
            Ok(io) => {
                let (pid, channel_id) = (io.pid, io.channel_id.clone());
                self.wired = Some(Wired::new(io));
                self.inputs.push_back(Input::Spawned { pid, channel_id });
            }
            Err(e) => {
                error!(deployment = %self.cfg.id, reason = %e, "cannot start a child");
                self.inputs.push_back(Input::SpawnFailed(e));
            }
        }
    }

    /// An operator's signed cancel of one run, or of every run.
    pub(super) fn operator_cancel(&mut self, run: Option<String>, to: Waiter) {
        let Some(w) = self.wired.as_mut() else {
            return to.fail(format!("{} has no live child", self.cfg.id));
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
                self.cfg.id
            ));
        }
        let signed = cancel::sign(
            &self.shared.key,
            CancelOrigin::Operator,
            &self.cfg.id,
            run,
            "operator cancel".into(),
        );
        w.cancels.push(signed, Some(to));
    }

    /// Records a fact: logged, counted in status, journaled if it is a
    /// decision, published on the event log.
    pub(super) fn record(&mut self, fact: Fact) {
        let id = self.cfg.id.clone();
        record::log(&id, &fact);
        if let Fact::Ready { .. } = fact {
            self.child_ready();
        }
        self.status_mut().count(&fact, unix_ms());
        self.shared.record(Some(&id), &fact);
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
        self.shared.watchlist.add(Watched {
            deployment: self.cfg.id.clone(),
            pid: w.io.pid,
            started_at: w.io.started_at,
            grants_read_at: w.io.grants_read_at,
            bounds: recycle::bounds(&self.cfg),
            jitter: recycle::jitter(&w.io.channel_id),
            rss: std::sync::Mutex::new(RssReader::open(w.io.pid).ok()),
            status: self.status.clone(),
            asks: self.me.clone(),
            asked: Default::default(),
        });
    }

    pub(super) fn status_mut(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copies the life's phase and the live child's facts into the status.
    pub(super) fn publish(&self) {
        let now = Instant::now();
        let mut st = self.status_mut();
        st.state = State::of(self.life.phase());
        st.store_error = self.writes.error.clone();
        st.acks_pending = self.writes.acks_owed();
        st.drain_purpose = self.life.phase().purpose();
        st.ever_ready = self.life.ever_ready();
        let Some(w) = &self.wired else {
            st.pid = None;
            st.channel_id = None;
            st.started_at = None;
            st.grants_read_at = None;
            st.rss_bytes = None;
            st.drain.active = false;
            st.steps.clear();
            st.steps_in_flight = 0;
            st.cancels_pending = 0;
            return;
        };
        if st.pid != Some(w.io.pid) {
            st.pid = Some(w.io.pid);
            st.channel_id = Some(w.io.channel_id.clone());
            st.rss_bytes = None;
        }
        st.started_at = Some(w.io.started_at);
        st.grants_read_at = w.io.grants_read_at;
        let (view, steps, n) = w.budget.view(now, self.cfg.drain_timeout);
        st.drain = view;
        st.steps = steps;
        st.steps_in_flight = n;
        st.cancels_pending = w.cancels.len();
        if let Some(hello) = &w.io.hello
            && st.implementation.as_deref() != Some(hello.implementation.as_str())
        {
            st.takes_mail = Some(hello.takes_mail);
            st.implementation = Some(hello.implementation.clone());
        } else if let Some(hello) = &w.io.hello {
            st.takes_mail = Some(hello.takes_mail);
        }
    }
}
