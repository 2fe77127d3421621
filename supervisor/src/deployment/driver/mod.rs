//! The deployment's task. Its loop waits for the next thing to arrive (a
//! frame or the exit of the live child, a cancel's journal commit, an
//! operator's request, a deadline), turns it into inputs of the
//! deployment's [`Life`], and carries out the actions the machine returns.
//! Every decision is the machine's; this file does the I/O.

mod act;
mod arrive;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::time::sleep_until;
use tracing::{error, info};
use wfhost_policy::format_duration;
use wfhost_policy::life::{Action, Input, Life, Misconduct, Request, Settings};
use wfhost_policy::liveness::Liveness;
use wfhost_policy::restart::RestartPolicy;

use super::cancel::{self, CancelQueue, Commit};
use super::child::{Arrived, LiveChild};
use super::drain::Budget;
use super::mail::{self, Dispatch};
use super::throttle::Throttle;
use super::writes::{Next, Replay, Writes};
use super::{Ask, ConfigSlot, Waiter};
use crate::config::DeploymentConfig;
use crate::observe::status::Status;
use crate::shared::Shared;

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
    /// The machine was told the child finished some work.
    worked_told: bool,
    /// How many step and custom facts it may publish.
    throttle: Throttle,
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
            worked_told: false,
            throttle: Throttle::new(Instant::now()),
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
    /// Mail writes owed to the store.
    writes: Writes,
    /// The supervisor is stopping this deployment: its children's ends do
    /// not count against the mail they held.
    stopping: bool,
    /// The last child's end, for the replay of its mail the machine asks for.
    ended: Option<Replay>,
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
            writes: Writes::default(),
            stopping: false,
            ended: None,
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
                // What the store would not take by now is the stopping
                // supervisor's to keep for the next start.
                self.shared
                    .unwritten_acks(&self.cfg.id, self.writes.take_acks());
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
        self.write_mail().await;
        let Some(w) = self.wired.as_mut() else {
            return false;
        };
        if w.io.stalled && !w.stall_told {
            w.stall_told = true;
            self.inputs.push_back(Input::Misbehaved(Misconduct::Hung));
            return true;
        }
        let now = Instant::now();
        if self.life.takes_mail() && self.writes.clear(now) {
            let took = mail::deliver(&mut w.dispatch, &mut w.io, &self.cfg, &self.shared).await;
            match took {
                Ok(()) => self.writes.took(),
                Err(e) => self.refused("taking mail from the inbox", e, now),
            }
        }
        let Some(w) = self.wired.as_mut() else {
            return !self.inputs.is_empty();
        };
        if w.commit.is_none() {
            w.commit = cancel::start_commit(&w.cancels, &self.shared, &self.cfg.id);
        }
        !self.inputs.is_empty()
    }

    /// Writes what this deployment owes the store, in order, until one is
    /// refused (then everything waits for the retry).
    async fn write_mail(&mut self) {
        let id = self.cfg.id.clone();
        loop {
            let now = Instant::now();
            let written = match self.writes.next(now) {
                None => return,
                Some(Next::Ack(ack)) => {
                    let (holder, mail, outcome) = (ack.holder.clone(), ack.id, ack.outcome.clone());
                    match mail::write_ack(&self.shared, &id, &holder, mail, &outcome).await {
                        Ok(landed) => {
                            // The window of the child that acked frees.
                            if let Some(w) = self
                                .wired
                                .as_mut()
                                .filter(|w| w.io.channel_id == holder.channel_id)
                                && landed
                            {
                                w.dispatch.acked();
                            }
                            Ok("a mail acknowledgement")
                        }
                        Err(e) => Err(("recording a mail acknowledgement", e)),
                    }
                }
                Some(Next::Replay(r)) => {
                    match mail::replay(&self.shared, &id, r, self.cfg.max_deliveries).await {
                        Ok(()) => Ok("the replay of unacknowledged mail"),
                        Err(e) => Err(("returning unacknowledged mail to the inbox", e)),
                    }
                }
            };
            match written {
                Ok(what) => {
                    if self.writes.error.is_some() {
                        info!(deployment = %id, "the store accepts mail writes again: {what} landed");
                    }
                    self.writes.landed();
                }
                Err((what, e)) => return self.refused(what, e, now),
            }
        }
    }

    /// A mail write the store refused: kept, retried, shown in status.
    fn refused(&mut self, what: &str, error: String, now: Instant) {
        let (attempt, delay) = self.writes.refused(error.clone(), now);
        if attempt == 1 || attempt.is_multiple_of(10) {
            error!(deployment = %self.cfg.id, attempt, retry_in = %format_duration(delay), error = %error,
                "the store refused {what}; it is kept and retried, nothing is lost");
        }
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
        let mut wakes = vec![self.life.deadline(), self.writes.wake()];
        if let Some(w) = &self.wired {
            let now = Instant::now();
            if let Some(l) = &w.liveness {
                wakes.push(Some(coalesced(
                    l.next_wake(now),
                    self.cfg.liveness_interval,
                )));
            }
            wakes.push(w.budget.deadline());
            wakes.push(w.throttle.report_at());
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
                self.stopping = true;
                self.inputs.push_back(Input::Request(Request::Stop));
            }
            Raw::Ask(Some(Ask::MailArrived)) => {
                if let Some(w) = self.wired.as_mut() {
                    w.dispatch.want();
                }
            }
            Raw::Ask(Some(Ask::Life(request))) => {
                self.stopping |= matches!(request, Request::Stop);
                self.inputs.push_back(Input::Request(request))
            }
            Raw::Child(arrived) => self.frame(arrived).await,
            Raw::Exit(status) => self.exited(status).await,
            Raw::Commit(result) => self.committed(result).await,
            Raw::Wake => self.woke().await,
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
