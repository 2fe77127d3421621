//! One replica of a deployment: a slot of its crew living its own
//! [`Life`] with at most one live child at a time. It hears its child's
//! frames, exit and cancel commits and its own deadlines, and carries out
//! its machine's actions; what spans replicas (recycles across them, the
//! inbox, the store's mail writes) it hands to the deployment as
//! [`Told`] and owed writes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::mpsc;
use wfhost_policy::DrainBudget;
use wfhost_policy::life::{Action, Answer, Input, Life, Misconduct, RecycleCause, Settings};
use wfhost_policy::liveness::Liveness;
use wfhost_policy::restart::RestartPolicy;

use crate::config::DeploymentConfig;
use crate::deployment::cancel::{self, CancelQueue, Commit};
use crate::deployment::child::{Arrived, LiveChild};
use crate::deployment::mail::deadlines::Deadlines;
use crate::deployment::mail::questions::Held;
use crate::deployment::mail::verdicts::Verdicts;
use crate::deployment::mail::window::Dispatch;
use crate::deployment::mail::writes::{Replay, Report};
use crate::deployment::policy_tick::Watchlist;
use crate::deployment::throttle::Throttle;
use crate::deployment::{Ask, ConfigSlot, Waiter};
use crate::shared::Shared;
use crate::status::{RssCell, Status};

/// A live child with its bookkeeping.
pub(super) struct Wired {
    pub(super) io: LiveChild,
    /// Pings, once the child is ready.
    pub(super) liveness: Option<Liveness>,
    /// Its steps in flight and drain budget.
    pub(super) budget: DrainBudget,
    pub(super) cancels: CancelQueue,
    /// Cancels of its mail items awaiting its verdict.
    pub(super) verdicts: Verdicts,
    /// The deadlines of the mail items it holds.
    pub(super) deadlines: Deadlines,
    /// The mail items it holds, which it started, and their questions.
    pub(super) holding: Held,
    pub(super) commit: Option<Commit>,
    pub(super) dispatch: Dispatch,
    /// What the machine was last told about steps in flight.
    pub(super) steps_told: bool,
    /// The machine was told the child stopped reading its channel.
    pub(super) stall_told: bool,
    /// The machine was told the child finished some work.
    pub(super) worked_told: bool,
    /// How many step and custom facts it may publish.
    pub(super) throttle: Throttle,
    /// Mail it acknowledged (landed in the store), for `recycle.max_mail`.
    pub(super) mail_done: u64,
    /// Its `max_mail` recycle was asked for.
    pub(super) mail_bound_asked: bool,
    /// Its resident memory, written by the policy tick.
    pub(super) rss: RssCell,
    /// The fleet lease deadline it heard last (`Lease`), if any since it
    /// was ready.
    pub(super) lease_until: Option<std::time::Instant>,
    /// It outlived that deadline and was asked to be replaced.
    pub(super) lease_replaced: bool,
}

/// What arrived for a replica.
pub(super) enum Raw {
    Child(Arrived),
    Exit(std::io::Result<std::process::ExitStatus>),
    Commit(Result<u64, String>),
}

impl Wired {
    pub(super) fn new(io: LiveChild) -> Self {
        Self {
            io,
            liveness: None,
            budget: DrainBudget::new(),
            cancels: CancelQueue::default(),
            verdicts: Verdicts::default(),
            deadlines: Deadlines::default(),
            holding: Held::default(),
            commit: None,
            dispatch: Dispatch::default(),
            steps_told: false,
            stall_told: false,
            worked_told: false,
            throttle: Throttle::new(Instant::now()),
            mail_done: 0,
            mail_bound_asked: false,
            rss: RssCell::default(),
            lease_until: None,
            lease_replaced: false,
        }
    }

    /// The child's next frame, its exit, or a cancel's commit. Cancel-safe.
    pub(super) async fn next(&mut self) -> Raw {
        tokio::select! {
            arrived = self.io.next() => match arrived {
                Arrived::Exit(status) => Raw::Exit(status),
                other => Raw::Child(other),
            },
            result = cancel::wait_commit(&mut self.commit) => Raw::Commit(result),
        }
    }
}

/// What a replica tells its deployment.
#[derive(Debug)]
pub(super) enum Told {
    /// Its child became ready.
    Ready { pid: u32 },
    /// Its first child ended before it was ever ready (a successor the
    /// crew waits for that will not come up).
    Refused { why: String },
    /// Its child, or one of its bounds, asks for a recycle that the crew
    /// should carry out (with overlap).
    Recycle { cause: RecycleCause, reason: String },
    /// Its life is over.
    Finished,
}

/// A replica and its life.
pub(super) struct Replica {
    /// Its index (`DEP/INDEX`), never reused within the deployment.
    pub(super) index: u32,
    /// Its name in messages: the deployment id, with `/INDEX` once the
    /// deployment has more than one child.
    pub(super) label: String,
    /// The configuration its child started with.
    pub(super) cfg: Arc<DeploymentConfig>,
    pub(super) slot: ConfigSlot,
    pub(super) shared: Arc<Shared>,
    /// Every live child under the policy tick's eye.
    pub(super) watchlist: Arc<Watchlist>,
    pub(super) me: mpsc::WeakSender<Ask>,
    /// The deployment's status, where facts are counted.
    pub(super) status: Arc<Mutex<Status>>,
    pub(super) life: Life<Waiter>,
    pub(super) wired: Option<Wired>,
    /// The budget of the child just reaped, for the drain it ended.
    pub(super) retired: Option<DrainBudget>,
    pub(super) inputs: VecDeque<Input<Waiter>>,
    pub(super) actions: VecDeque<Action<Waiter>>,
    pub(super) finished: bool,
    /// For the deployment.
    pub(super) told: Vec<Told>,
    /// Acknowledgements to write, in order.
    pub(super) reports: Vec<Report>,
    /// Its child is being recycled because an item outlived its deadline:
    /// the other items it holds go back uncounted (the deadline's item
    /// failed on its own).
    pub(super) deadline_recycled: bool,
    /// Its gone children's unacknowledged mail, owed back to the inbox.
    pub(super) replays: Vec<Replay>,
    /// How its last child ended (from the `exited` fact its machine
    /// records just before it asks for the replay of that child's mail).
    pub(super) ended: Option<Replay>,
    /// The supervisor is stopping it: its child's end does not count
    /// against the mail it held.
    pub(super) stopping: bool,
    /// Started to replace another replica: until its child is ready, a
    /// child that ends refuses the crew's recycle (rather than restart).
    pub(super) successor: bool,
    /// Facts recorded since the status was last published, to count.
    pub(super) counted: Vec<(wfhost_policy::Fact, u64)>,
    /// Answers to send once the deployment's status is published.
    pub(super) answers: Vec<(Waiter, Result<Answer, String>)>,
}

/// The machine's settings from a deployment's config.
pub(super) fn settings(cfg: &DeploymentConfig) -> Settings {
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
            healthy_after: cfg.restart.healthy_after,
        },
    }
}

/// What a replica is built from: the deployment's shared parts.
pub(super) struct Parts {
    pub(super) slot: ConfigSlot,
    pub(super) shared: Arc<Shared>,
    pub(super) watchlist: Arc<Watchlist>,
    pub(super) me: mpsc::WeakSender<Ask>,
    pub(super) status: Arc<Mutex<Status>>,
}

impl Replica {
    /// Replica `index`; its first child is spawned when it settles.
    pub(super) fn new(index: u32, labelled: bool, parts: &Parts) -> Self {
        let cfg = parts.slot.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let label = if labelled {
            format!("{}/{index}", cfg.id)
        } else {
            cfg.id.clone()
        };
        let (life, first) = Life::new(label.clone(), settings(&cfg));
        Self {
            index,
            label,
            cfg,
            slot: parts.slot.clone(),
            shared: parts.shared.clone(),
            watchlist: parts.watchlist.clone(),
            me: parts.me.clone(),
            status: parts.status.clone(),
            life,
            wired: None,
            retired: None,
            inputs: VecDeque::new(),
            actions: first.into(),
            finished: false,
            told: Vec::new(),
            reports: Vec::new(),
            deadline_recycled: false,
            replays: Vec::new(),
            ended: None,
            stopping: false,
            answers: Vec::new(),
            counted: Vec::new(),
            successor: false,
        }
    }

    /// The live child's pid, if any.
    pub(super) fn pid(&self) -> Option<u32> {
        self.wired.as_ref().map(|w| w.io.pid)
    }

    /// Carries out every pending action and input of this replica; true
    /// when there was any.
    pub(super) async fn settle(&mut self) -> bool {
        let mut any = false;
        loop {
            if let Some(action) = self.actions.pop_front() {
                self.act(action).await;
            } else if let Some(input) = self.inputs.pop_front() {
                let actions = self.life.on(input, Instant::now());
                self.actions.extend(actions);
            } else {
                self.retired = None;
                return any;
            }
            any = true;
        }
    }

    /// What the child's state asks for besides the machine's actions (a
    /// stall to report, a cancel to commit); true when that produced new
    /// inputs.
    pub(super) fn follow_up(&mut self) -> bool {
        let Some(w) = self.wired.as_mut() else {
            return false;
        };
        if w.io.stalled && !w.stall_told {
            w.stall_told = true;
            self.inputs.push_back(Input::Misbehaved(Misconduct::Hung));
        }
        if w.commit.is_none() {
            w.commit = cancel::start_commit(&w.cancels, &self.shared, &self.cfg.id);
        }
        !self.inputs.is_empty()
    }

    /// The earliest of the deadlines operators measure: the machine's
    /// (a kill, a backoff, a drain deadline) and the drain budget's.
    pub(super) fn exact_wake(&self) -> Option<Instant> {
        let budget = self.wired.as_ref().and_then(|w| w.budget.deadline());
        [self.life.deadline(), budget].into_iter().flatten().min()
    }

    /// The earliest of its other deadlines: the child's pings, a flood's
    /// report, a cancel's retry.
    pub(super) fn wake(&self) -> Option<Instant> {
        let mut wakes = Vec::new();
        if let Some(w) = &self.wired {
            let now = Instant::now();
            if let Some(l) = &w.liveness {
                wakes.push(Some(super::coalesced(
                    l.next_wake(now),
                    self.cfg.liveness_interval,
                )));
            }
            wakes.push(w.throttle.report_at());
            wakes.push(w.verdicts.wake());
            wakes.push(w.deadlines.wake());
            if w.commit.is_none() {
                wakes.push(w.cancels.wake());
            }
        }
        wakes.into_iter().flatten().min()
    }

    /// Handles what arrived for it.
    pub(super) async fn handle(&mut self, raw: Raw) {
        match raw {
            Raw::Child(arrived) => self.frame(arrived).await,
            Raw::Exit(status) => self.exited(status).await,
            Raw::Commit(result) => self.committed(result).await,
        }
    }
}
