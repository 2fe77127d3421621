//! The deployment's task. Its loop waits for the next thing to arrive (a
//! frame or the exit of the live child, a cancel's journal commit, an
//! operator's request, a deadline), turns it into inputs of the
//! deployment's [`Life`], and carries out the actions the machine returns.
//! Every decision is the machine's; this file does the I/O.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::time::sleep_until;
use tracing::{debug, error, info, warn};
use wfhost_ipc::{CancelOrigin, Control, Event};
use wfhost_policy::life::{Action, Fresh, Input, KillWhy, Life, Misconduct, Request, Settings};
use wfhost_policy::liveness::Liveness;
use wfhost_policy::restart::RestartPolicy;
use wfhost_policy::{Fact, format_duration};

use super::cancel::{self, CancelQueue, Commit};
use super::child::{self, Arrived, Frame, LiveChild};
use super::drain::{self, Budget};
use super::mail::{self, Dispatch};
use super::{Ask, ConfigSlot, Waiter, recycle};
use crate::config::DeploymentConfig;
use crate::host::policy_tick::Watched;
use crate::observe::record;
use crate::observe::status::{State, Status};
use crate::procfs::RssReader;
use crate::shared::{Shared, unix_ms};

/// Longest reason or kind text taken from a child.
const MAX_REASON_CHARS: usize = 512;

/// Frames handled in a row before the task yields, so a child flooding
/// its channel delays no other deployment and not the control socket.
const FRAMES_PER_TURN: u32 = 64;

/// A live child with its bookkeeping.
struct Wired {
    io: LiveChild,
    /// Pings, once the child is ready.
    liveness: Option<Liveness>,
    budget: Budget,
    cancels: CancelQueue,
    commit: Option<Commit>,
    dispatch: Dispatch,
    /// What the machine was last told about steps in flight.
    steps_told: bool,
    /// The machine was told the child stopped reading its channel.
    stall_told: bool,
}

/// What arrived.
enum Raw {
    Child(Arrived),
    Exit(std::io::Result<std::process::ExitStatus>),
    Commit(Result<u64, String>),
    Ask(Option<Ask>),
    Wake,
}

impl Wired {
    fn new(io: LiveChild) -> Self {
        Self {
            io,
            liveness: None,
            budget: Budget::default(),
            cancels: CancelQueue::default(),
            commit: None,
            dispatch: Dispatch::default(),
            steps_told: false,
            stall_told: false,
        }
    }

    /// The child's next frame, its exit, or a cancel's commit. Cancel-safe.
    async fn next(&mut self) -> Raw {
        tokio::select! {
            arrived = self.io.next() => match arrived {
                Arrived::Exit(status) => Raw::Exit(status),
                other => Raw::Child(other),
            },
            result = cancel::wait_commit(&mut self.commit) => Raw::Commit(result),
        }
    }
}

/// One deployment's task.
pub struct Driver {
    cfg: Arc<DeploymentConfig>,
    slot: ConfigSlot,
    shared: Arc<Shared>,
    asks: mpsc::Receiver<Ask>,
    me: mpsc::WeakSender<Ask>,
    status: Arc<Mutex<Status>>,
    life: Life<Waiter>,
    wired: Option<Wired>,
    /// The budget of the child just reaped, for the drain it ended.
    retired: Option<Budget>,
    inputs: VecDeque<Input<Waiter>>,
    actions: VecDeque<Action<Waiter>>,
    asks_open: bool,
    finished: bool,
}

/// The machine's settings from a deployment's config.
fn settings(cfg: &DeploymentConfig) -> Settings {
    Settings {
        drain_timeout: cfg.drain_timeout,
        drain_deadline: cfg.drain_deadline,
        ready_timeout: cfg.ready_timeout,
        kill_timeout: cfg.kill_timeout,
        restart: RestartPolicy {
            backoff_initial: cfg.restart.backoff_initial,
            backoff_max: cfg.restart.backoff_max,
            max_restarts: cfg.restart.max_restarts,
            period: cfg.restart.period,
            healthy_after: RestartPolicy::default().healthy_after,
        },
    }
}

impl Driver {
    /// A task for `cfg`; its first child is spawned when it runs.
    pub fn new(
        cfg: Arc<DeploymentConfig>,
        slot: ConfigSlot,
        shared: Arc<Shared>,
        asks: mpsc::Receiver<Ask>,
        me: mpsc::WeakSender<Ask>,
        status: Arc<Mutex<Status>>,
    ) -> Self {
        let (life, first) = Life::new(cfg.id.clone(), settings(&cfg));
        Self {
            cfg,
            slot,
            shared,
            asks,
            me,
            status,
            life,
            wired: None,
            retired: None,
            inputs: VecDeque::new(),
            actions: first.into(),
            asks_open: true,
            finished: false,
        }
    }

    /// Lives the deployment's life until it is stopped.
    pub async fn run(mut self) {
        let mut frames_in_a_row = 0;
        loop {
            self.settle().await;
            if self.finished {
                return;
            }
            let raw = self.next().await;
            if matches!(raw, Raw::Child(_)) {
                frames_in_a_row += 1;
                if frames_in_a_row >= FRAMES_PER_TURN {
                    frames_in_a_row = 0;
                    tokio::task::yield_now().await;
                }
            } else {
                frames_in_a_row = 0;
            }
            self.handle(raw).await;
        }
    }

    /// Carries out every pending action and input, then what follows from
    /// the new state (mail, cancel commits, status).
    async fn settle(&mut self) {
        loop {
            if let Some(action) = self.actions.pop_front() {
                self.act(action).await;
            } else if let Some(input) = self.inputs.pop_front() {
                let actions = self.life.on(input, Instant::now());
                self.actions.extend(actions);
            } else {
                self.retired = None;
                if !self.follow_up().await {
                    break;
                }
            }
        }
        self.publish();
    }

    /// What the state asks for besides the machine's actions; true when
    /// that produced new inputs.
    async fn follow_up(&mut self) -> bool {
        let Some(w) = self.wired.as_mut() else {
            return false;
        };
        if w.io.stalled && !w.stall_told {
            w.stall_told = true;
            self.inputs.push_back(Input::Misbehaved(Misconduct::Hung));
            return true;
        }
        if self.life.takes_mail() {
            mail::deliver(&mut w.dispatch, &mut w.io, &self.cfg, &self.shared).await;
        }
        if w.commit.is_none() {
            w.commit = cancel::start_commit(&w.cancels, &self.shared, &self.cfg.id);
        }
        !self.inputs.is_empty()
    }

    /// Waits for the next thing to arrive.
    async fn next(&mut self) -> Raw {
        let wake = self.wake();
        let Self {
            wired,
            asks,
            asks_open,
            ..
        } = self;
        let child = async {
            match wired {
                Some(w) => w.next().await,
                None => std::future::pending().await,
            }
        };
        let sleep = async {
            match wake {
                Some(at) => sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            raw = child => raw,
            ask = asks.recv(), if *asks_open => Raw::Ask(ask),
            () = sleep => Raw::Wake,
        }
    }

    /// The earliest deadline: the machine's, the child's pings, its drain
    /// budget, a cancel's retry.
    fn wake(&self) -> Option<Instant> {
        let mut wakes = vec![self.life.deadline()];
        if let Some(w) = &self.wired {
            let now = Instant::now();
            if let Some(l) = &w.liveness {
                wakes.push(Some(coalesced(
                    l.next_wake(now),
                    self.cfg.liveness_interval,
                )));
            }
            wakes.push(w.budget.deadline());
            if w.commit.is_none() {
                wakes.push(w.cancels.wake());
            }
        }
        wakes.into_iter().flatten().min()
    }

    async fn handle(&mut self, raw: Raw) {
        match raw {
            Raw::Ask(None) => {
                // Every handle is gone: nobody can stop it any more, so stop.
                self.asks_open = false;
                self.inputs.push_back(Input::Request(Request::Stop));
            }
            Raw::Ask(Some(Ask::MailArrived)) => {
                if let Some(w) = self.wired.as_mut() {
                    w.dispatch.want();
                }
            }
            Raw::Ask(Some(Ask::Life(request))) => self.inputs.push_back(Input::Request(request)),
            Raw::Child(arrived) => self.frame(arrived).await,
            Raw::Exit(status) => self.exited(status).await,
            Raw::Commit(result) => self.committed(result).await,
            Raw::Wake => self.woke().await,
        }
    }

    async fn frame(&mut self, arrived: Arrived) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        match w.io.frame(&self.cfg, arrived).await {
            Frame::Handshake => {}
            Frame::Ready => self.inputs.push_back(Input::Ready),
            Frame::Closed => {
                debug!(deployment = %self.cfg.id, pid = w.io.pid, "child closed its control channel");
                self.inputs.push_back(Input::ChannelClosed)
            }
            Frame::Violation(v) => self
                .inputs
                .push_back(Input::Misbehaved(Misconduct::Violation(v))),
            Frame::Event(event) => self.event(event).await,
        }
    }

    /// One event of a live child: bookkeeping, facts, and what the machine
    /// must hear of it.
    async fn event(&mut self, event: Event) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        let now = Instant::now();
        let id = &self.cfg.id;
        let pid = w.io.pid;
        let mut facts = Vec::new();
        match event {
            Event::Pong { nonce } => {
                if let Some(l) = w.liveness.as_mut() {
                    l.on_pong(nonce, now);
                }
            }
            Event::StepStarted { run, step, drain } => {
                match w.budget.step_started(&run, &step, drain, now) {
                    Ok(()) => facts.push(Fact::StepStarted { run, step, drain }),
                    Err(v) => self
                        .inputs
                        .push_back(Input::Misbehaved(Misconduct::Violation(v))),
                }
            }
            Event::StepFinished { run, step, outcome } => {
                w.budget.step_finished(&run, &step, now);
                facts.push(Fact::StepFinished { run, step, outcome });
            }
            Event::RunTerminal { run, outcome } => {
                w.budget.run_terminal(&run, now);
                facts.push(Fact::RunTerminal { run, outcome });
            }
            Event::MailAck {
                id: mail_id,
                outcome,
            } => {
                if mail::record_ack(&self.shared, id, mail_id, &outcome).await {
                    w.dispatch.acked();
                }
            }
            Event::Drained => {
                facts.push(Fact::ChildDrained { pid });
                self.inputs.push_back(Input::Drained);
            }
            Event::RecycleRequest { reason } => {
                let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
                info!(deployment = %id, pid, reason = %reason, "the child asked to be recycled");
                self.inputs.push_back(Input::RecycleAsked(reason));
            }
            Event::Custom { kind, bytes } => {
                let kind = kind.chars().take(MAX_REASON_CHARS).collect();
                facts.push(Fact::Custom {
                    kind,
                    bytes: bytes.len(),
                });
            }
            // The handshake's frames are taken by `LiveChild::frame`.
            Event::Hello(_) | Event::Ready => {}
        }
        let any = w.budget.steps_in_flight();
        if any != w.steps_told {
            w.steps_told = any;
            self.inputs.push_back(Input::StepsInFlight(any));
        }
        facts.extend(w.budget.transition(now));
        for fact in facts {
            self.record(fact);
        }
    }

    /// The child exited: what it wrote last still counts, then the machine
    /// hears it was reaped.
    async fn exited(&mut self, status: std::io::Result<std::process::ExitStatus>) {
        for event in match self.wired.as_mut() {
            Some(w) => w.io.leftover_events().await,
            None => Vec::new(),
        } {
            self.event(event).await;
        }
        let Some(mut w) = self.wired.take() else {
            return;
        };
        w.io.reap_group();
        w.cancels
            .abandon("the child ended before the cancel was committed");
        self.shared.watchlist.remove(w.io.pid);
        self.shared.forget_child(&self.cfg.id, w.io.pid);
        self.retired = Some(w.budget);
        self.inputs
            .push_back(Input::Reaped(child::exit_status(status)));
    }

    /// A cancel's commit ended: only once it is durable is the cancel sent.
    /// A refusal is retried with backoff and shown in status.
    async fn committed(&mut self, result: Result<u64, String>) {
        let journal_error = result.as_ref().err().cloned();
        self.status_mut().journal_error = journal_error;
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        let id = &self.cfg.id;
        match result {
            Ok(seq) => {
                let Some(p) = w.cancels.committed() else {
                    return;
                };
                info!(deployment = %id, pid = w.io.pid, journal_seq = seq, run = p.signed.record.run.as_deref().unwrap_or("every run"),
                    origin = p.signed.record.origin.as_str(), "cancel committed to the journal; sending it");
                let fact = Fact::CancelCommitted {
                    cancel: cancel::journal_body(&p.signed),
                    journal_seq: Some(seq),
                };
                self.shared.publish(Some(id), &fact);
                let sent = w.io.send(&self.cfg, Control::Cancel(p.signed)).await;
                if let Some(Waiter::Journaled(tx)) = p.reply {
                    let _ = tx.send(sent.map(|()| seq).map_err(|e| {
                        format!("committed as journal record {seq}, but not delivered: {e}")
                    }));
                }
            }
            Err(e) => {
                let (attempt, delay) = w.cancels.refused(Instant::now());
                error!(deployment = %id, pid = w.io.pid, attempt, retry_in = %format_duration(delay), error = %e,
                    "the journal refused a signed cancel; it is not sent until committed; retrying");
            }
        }
    }

    /// A deadline passed: the machine's, a ping, a drain budget.
    async fn woke(&mut self) {
        let now = Instant::now();
        if self.life.deadline().is_some_and(|d| now >= d) {
            self.inputs.push_back(Input::Tick);
        }
        let pinging = matches!(self.life.phase().name(), "ready" | "draining");
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        if let Some(l) = w.liveness.as_mut().filter(|_| pinging) {
            if l.hung(now) {
                self.inputs.push_back(Input::Misbehaved(Misconduct::Hung));
            } else if let Some(nonce) = l.ping_due(now)
                && let Err(e) = w.io.send(&self.cfg, Control::Ping { nonce }).await
            {
                debug!(deployment = %self.cfg.id, pid = w.io.pid, error = %e, "ping not sent");
            }
        }
        if let Some(escalation) = w.budget.poll(now) {
            let (reason, signed) =
                drain::escalation_cancels(&escalation, &self.shared.key, &self.cfg.id);
            warn!(deployment = %self.cfg.id, pid = w.io.pid, runs = %escalation.runs.join(", "), "{reason}; cancelling");
            for s in signed {
                w.cancels.push(s, None);
            }
            self.record(Fact::DrainEscalated {
                runs: escalation.runs,
                budget: escalation.budget,
            });
        }
    }

    /// Carries out one of the machine's actions.
    async fn act(&mut self, action: Action<Waiter>) {
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
                if let Err(e) = w.io.send(&self.cfg, Control::Drain { budget_ms }).await {
                    debug!(deployment = %id, pid = w.io.pid, error = %e, "drain not sent");
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
            Action::ReplayMail => mail::replay(&self.shared, &id).await,
            Action::Answer { to, answer } => {
                // An operator told "done" reads a status that says so.
                self.publish();
                to.answer(answer)
            }
            Action::Record(fact) => self.record(fact),
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
    async fn spawn(&mut self, grants: Option<Fresh>) {
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
    fn operator_cancel(&mut self, run: Option<String>, to: Waiter) {
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
    fn record(&mut self, fact: Fact) {
        let id = self.cfg.id.clone();
        record::log(&id, &fact);
        if let Fact::Ready { .. } = fact {
            self.child_ready();
        }
        self.status_mut().count(&fact, unix_ms());
        self.shared.record(Some(&id), &fact);
    }

    /// The child is ready: pings begin and the policy watches it.
    fn child_ready(&mut self) {
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

    fn status_mut(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Copies the life's phase and the live child's facts into the status.
    fn publish(&self) {
        let now = Instant::now();
        let mut st = self.status_mut();
        st.state = State::of(self.life.phase());
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

/// `at` rounded up to the next tenth of `interval` counted from one
/// process-wide origin, so the pings of children that share an interval
/// fall due together and go out in one wake-up (their pongs then come back
/// together too): an idle supervisor wakes a few times a second instead of
/// twice per child per interval. A ping or a hung verdict is at most a
/// tenth of the interval late.
fn coalesced(at: Instant, interval: Duration) -> Instant {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    let slot = (interval / 10).as_nanos().max(1);
    let since = at.saturating_duration_since(origin).as_nanos();
    let rounded = since.div_ceil(slot) * slot;
    let late = u64::try_from(rounded - since).unwrap_or(u64::MAX);
    at + Duration::from_nanos(late)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wakes_are_coalesced_into_tenths_of_the_interval() {
        let interval = Duration::from_secs(10);
        let now = Instant::now();
        let mut slots = std::collections::BTreeSet::new();
        for ms in (0..1000).step_by(7) {
            let at = now + Duration::from_millis(ms);
            let woken = coalesced(at, interval);
            assert!(woken >= at, "never early");
            assert!(woken - at <= interval / 10, "at most a tenth late");
            slots.insert(woken);
        }
        // 143 wakes within one second fall into at most two slots.
        assert!(slots.len() <= 2, "{slots:?}");
        assert_eq!(coalesced(now, Duration::ZERO), now, "no interval, no delay");
    }
}
