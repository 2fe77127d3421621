//! The deployment's task. Its loop waits for the next thing to arrive (a
//! frame or the exit of a replica's child, a cancel's journal commit, an
//! operator's request, a deadline), hands it to the replica it concerns
//! (whose [`Life`](wfhost_policy::Life) decides) or to the crew (what
//! spans replicas: rolling and overlapping recycles, scaling), carries out
//! what they decide, writes the mail the store is owed, and spreads the
//! inbox over the replicas that take mail. Every decision is a machine's;
//! this file does the I/O.

mod act;
mod arrive;
mod asks;
mod gather;
mod inbox;
mod lease;
mod replica;
mod slots;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::time::sleep_until;
use wfhost_ipc::Event;
use wfhost_policy::crew::{self, Crew};
use wfhost_policy::life::Answer;

use super::child::Arrived;
use super::mail::writes::{self, Writes};
use super::timer;
use super::{Ask, ConfigSlot, Waiter};
use crate::config::DeploymentConfig;
use crate::deployment::policy_tick::Watchlist;
use crate::shared::Shared;
use crate::status::{ReplicaView, Role, State, Status};
use crate::store::rooms::Room;
use replica::{Parts, Raw, Replica};

/// Longest reason or kind text taken from a child.
const MAX_REASON_CHARS: usize = 512;

/// Frames handled in a row before the task yields, so a child flooding
/// its channel delays no other deployment and not the control socket.
const FRAMES_PER_TURN: u32 = 64;

/// Most arrivals handled in one turn before the state is settled (and
/// what they owe the store written in one commit).
const GATHERED_PER_TURN: usize = 32;

/// Whether `arrival` may be handled in the turn of the one before it:
/// anything but what ends a child's work (its Drained, a recycle request,
/// the end of its channel or process, a handshake).
fn gathered(arrival: &Arrival) -> bool {
    match arrival {
        Arrival::Replica(_, Raw::Child(Arrived::Frame(Ok(Some(event))))) => !matches!(
            event,
            Event::Drained | Event::RecycleRequest { .. } | Event::Hello(_) | Event::Ready
        ),
        Arrival::Replica(_, Raw::Child(_) | Raw::Exit(_)) => false,
        Arrival::Replica(_, Raw::Commit(_)) | Arrival::Ask(Some(_)) | Arrival::Wake => true,
        Arrival::Ask(None) => false,
    }
}

/// What arrived for the deployment.
enum Arrival {
    /// For the replica at this position.
    Replica(usize, Raw),
    Ask(Option<Ask>),
    Wake,
}

/// One deployment's task.
pub struct Driver {
    id: String,
    parts: Parts,
    asks: mpsc::Receiver<Ask>,
    crew: Crew<Waiter>,
    /// By index.
    replicas: Vec<Replica>,
    /// Mail writes owed to the store.
    writes: Writes,
    crew_inputs: VecDeque<crew::Input<Waiter>>,
    crew_actions: VecDeque<crew::Action<Waiter>>,
    asks_open: bool,
    stopping: bool,
    /// Where the next poll of the replicas starts, so a flooding one
    /// cannot starve the others.
    turn: usize,
    /// Facts the replicas recorded, counted in status when it is next
    /// published (with the state they led to, in one update).
    counted: Vec<(wfhost_policy::Fact, u64)>,
    /// The replicas' answers, sent once the status says what they say.
    answers: Vec<(Waiter, Result<Answer, String>)>,
    /// A fleet lease was renewed: every child hears the new deadline.
    lease_due: bool,
    /// The fleet lease is gone: nothing owed is kept for the store.
    lease_lost: bool,
    /// What arrived while a turn gathered, waiting for the settling: it
    /// is handled first next turn.
    stashed: Option<Arrival>,
    /// Room in the children's windows that senders' writes may fill.
    room: Arc<Room>,
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.parts.shared.sends.rooms.close(&self.id, &self.room);
    }
}

impl Driver {
    /// A task for `cfg`; its replicas are spawned when it runs.
    pub fn new(
        cfg: Arc<DeploymentConfig>,
        slot: ConfigSlot,
        shared: Arc<Shared>,
        watchlist: Arc<Watchlist>,
        asks: mpsc::Receiver<Ask>,
        me: mpsc::WeakSender<Ask>,
        status: Arc<Mutex<Status>>,
    ) -> Self {
        let (crew, first) = Crew::new(cfg.replicas, cfg.recycle.overlap);
        let room = shared.sends.rooms.open(&cfg.id);
        Self {
            room,
            id: cfg.id.clone(),
            parts: Parts {
                slot,
                shared,
                watchlist,
                me,
                status,
            },
            asks,
            crew,
            replicas: Vec::new(),
            writes: Writes::default(),
            crew_inputs: VecDeque::new(),
            crew_actions: first.into(),
            asks_open: true,
            stopping: false,
            turn: 0,
            answers: Vec::new(),
            lease_due: false,
            lease_lost: false,
            stashed: None,
            counted: Vec::new(),
        }
    }

    /// Lives the deployment's life until it is stopped.
    pub async fn run(mut self) {
        let mut frames_in_a_row = 0;
        loop {
            self.settle().await;
            if self.stopping && self.replicas.is_empty() {
                // What the store would not take by now is the stopping
                // supervisor's to keep for the next start (not a fenced
                // host's: its acknowledgements must never count).
                let acks = self.writes.take_acks();
                if self.lease_lost {
                    if !acks.is_empty() {
                        tracing::warn!(deployment = %self.id, acks = acks.len(),
                            "the lease was lost: acknowledgements not yet written are dropped; the new owner delivers that mail again");
                    }
                } else {
                    self.shared()
                        .unwritten_acks(writes::unwritten(&self.id, acks));
                }
                return;
            }
            let arrival = match self.stashed.take() {
                Some(arrival) => arrival,
                None => self.next().await,
            };
            if matches!(arrival, Arrival::Replica(_, Raw::Child(_))) {
                frames_in_a_row += 1;
                if frames_in_a_row >= FRAMES_PER_TURN {
                    frames_in_a_row = 0;
                    tokio::task::yield_now().await;
                }
            } else {
                frames_in_a_row = 0;
            }
            self.handle(arrival).await;
            // A child's frames that have already arrived are handled before
            // the state is settled, so what they owe the store (a start and
            // its end, the acks of several children) goes in one commit.
            // What ends a child's work (its Drained, a recycle request, its
            // exit) waits for the next turn, after the settling, so an end
            // the child reported before it drained or exited is written
            // before that is told.
            // Gathered frames count as frames in a row: a flooding child
            // still yields every FRAMES_PER_TURN.
            for _ in 1..GATHERED_PER_TURN {
                if frames_in_a_row >= FRAMES_PER_TURN {
                    break;
                }
                let Some(more) = self.ready_now().await else {
                    break;
                };
                if !gathered(&more) {
                    self.stashed = Some(more);
                    break;
                }
                if matches!(more, Arrival::Replica(_, Raw::Child(_))) {
                    frames_in_a_row += 1;
                }
                self.handle(more).await;
            }
        }
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.parts.shared
    }

    fn cfg(&self) -> Arc<DeploymentConfig> {
        self.parts
            .slot
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Carries out everything pending (the crew's actions, each replica's
    /// actions and inputs, what they tell the deployment), then what
    /// follows from the new state (mail writes and deliveries, cancel
    /// commits, status), then the answers.
    async fn settle(&mut self) {
        loop {
            self.settle_once().await;
            self.publish();
            // An operator told "done" reads a status that says so; the
            // crew's own answers may give it more to do.
            for (to, answer) in std::mem::take(&mut self.answers) {
                match to {
                    Waiter::Crew(index) => {
                        self.crew_inputs.push_back(slots::crew_heard(index, answer))
                    }
                    to => to.answer(answer),
                }
            }
            if self.crew_inputs.is_empty() {
                return;
            }
        }
    }

    async fn settle_once(&mut self) {
        loop {
            if let Some(action) = self.crew_actions.pop_front() {
                self.crew_act(action);
                continue;
            }
            if let Some(input) = self.crew_inputs.pop_front() {
                let actions = self.crew.on(input);
                self.crew_actions.extend(actions);
                continue;
            }
            let mut any = false;
            for r in &mut self.replicas {
                any |= r.settle().await;
            }
            self.collect();
            if any || !self.crew_actions.is_empty() || !self.crew_inputs.is_empty() {
                continue;
            }
            if !self.follow_up().await {
                return;
            }
        }
    }

    /// What the state asks for besides the machines' actions; true when
    /// that produced new inputs.
    async fn follow_up(&mut self) -> bool {
        self.send_leases().await;
        self.write_mail().await;
        let mut any = false;
        for r in &mut self.replicas {
            any |= r.follow_up();
        }
        self.deliver_mail().await;
        self.collect();
        any || self.replicas.iter().any(|r| !r.inputs.is_empty()) || !self.crew_inputs.is_empty()
    }

    /// The next thing to arrive if it already has, without waiting.
    async fn ready_now(&mut self) -> Option<Arrival> {
        tokio::select! {
            biased;
            arrival = self.next() => Some(arrival),
            () = std::future::ready(()) => None,
        }
    }

    /// Waits for the next thing to arrive.
    async fn next(&mut self) -> Arrival {
        let wake = self
            .replicas
            .iter()
            .filter_map(Replica::wake)
            .chain(self.writes.wake())
            .min();
        let exact = self.replicas.iter().filter_map(Replica::exact_wake).min();
        let n = self.replicas.len().max(1);
        self.turn = (self.turn + 1) % n;
        let turn = self.turn;
        let Self {
            replicas,
            asks,
            asks_open,
            ..
        } = self;
        let mut children: Vec<_> = replicas
            .iter_mut()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.wired.as_mut()?)))
            .map(|(i, w)| (i, Box::pin(w.next())))
            .collect();
        let shift = turn.min(children.len());
        children.rotate_left(shift);
        let child = std::future::poll_fn(|cx| {
            for (i, fut) in children.iter_mut() {
                if let Poll::Ready(raw) = fut.as_mut().poll(cx) {
                    return Poll::Ready((*i, raw));
                }
            }
            Poll::Pending
        });
        let sleep = async {
            match wake {
                Some(at) => sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        let exact = async {
            match exact {
                Some(at) => timer::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            (i, raw) = child => Arrival::Replica(i, raw),
            ask = asks.recv(), if *asks_open => Arrival::Ask(ask),
            () = sleep => Arrival::Wake,
            () = exact => Arrival::Wake,
        }
    }

    async fn handle(&mut self, arrival: Arrival) {
        match arrival {
            Arrival::Replica(i, raw) => {
                if let Some(r) = self.replicas.get_mut(i) {
                    r.handle(raw).await;
                }
            }
            Arrival::Ask(None) => {
                // Every handle is gone: nobody can stop it any more, so stop.
                self.asks_open = false;
                self.stop();
            }
            Arrival::Ask(Some(Ask::Answer {
                holder: Some(holder),
                id,
                key,
                value,
            })) => self.answer(&holder, id, &key, value).await,
            Arrival::Ask(Some(ask)) => self.ask(ask),
            Arrival::Wake => {
                for r in &mut self.replicas {
                    r.woke().await;
                }
            }
        }
    }

    /// The deployment's status: its counters, the serving replica's child
    /// as the deployment's, and every replica.
    fn publish(&mut self) {
        let now = Instant::now();
        let mut st = self.parts.status.lock().unwrap_or_else(|p| p.into_inner());
        for (fact, at_ms) in self.counted.drain(..) {
            st.count(&fact, at_ms);
        }
        st.store_error = self.writes.error.clone();
        st.acks_pending = self.writes.acks_owed();
        let roles: Vec<(u32, Role)> = self
            .crew
            .slots()
            .iter()
            .map(|s| {
                let role = if s.retiring {
                    Role::Retiring
                } else if s.replaces.is_some() {
                    Role::Successor
                } else {
                    Role::Serving
                };
                (s.index, role)
            })
            .collect();
        let role_of = |index| {
            roles
                .iter()
                .find(|(i, _)| *i == index)
                .map_or(Role::Retiring, |(_, r)| *r)
        };
        let primary = self
            .replicas
            .iter()
            .find(|r| role_of(r.index) == Role::Serving)
            .or_else(|| self.replicas.first());
        match primary {
            Some(r) => r.publish_into(&mut st, now),
            None => {
                // Every replica's life is over (the supervisor stops).
                if st.state != State::Exited {
                    st.state_since = Some(now);
                }
                st.state = State::Exited;
                st.deadline = None;
                st.drain_purpose = None;
                Replica::publish_none(&mut st);
            }
        }
        st.replicas = self
            .replicas
            .iter()
            .map(|r| r.view(role_of(r.index)))
            .collect::<Vec<ReplicaView>>();
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
