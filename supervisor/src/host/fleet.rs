//! The host's side of a fleet (DESIGN §10b): one task, the lease loop,
//! that runs exactly the deployments whose leases this host holds. Every
//! `lease_renew` it heartbeats and renews all its leases in one statement,
//! then reads the fleet and carries out what `fleet::rules::plan` decides:
//! it takes free leases up to its fair share (starting each deployment's
//! task once the previous owner's unacknowledged mail is back in the
//! inbox) and hands off what is above it. A lease found gone (not
//! renewed, or a write refused by the fence) kills that deployment's
//! children at once; a host that cannot renew stops everything it holds
//! by its monotonic clock before any lease can run out. A graceful stop
//! drains each deployment and releases its lease as soon as its child is
//! gone, so another host takes it at once. Notifications wake it for
//! released leases, new mail, events and requests forwarded to it.

mod serve;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio::time::sleep_until;
use tracing::{debug, error, info, warn};
use wfhost_policy::Fact;
use wfhost_policy::life::Request;

use super::{Registry, ReloadSummary};
use crate::config::DeploymentConfig;
use crate::deployment::{Ask, DeploymentHandle};
use crate::fleet::db::Db;
use crate::fleet::rules::{self, Claim, Mine};
use crate::fleet::{Command, Fleet};
use crate::journal::NewJournalEntry;
use crate::observe::record;
use crate::shared::{Shared, unix_ms};
use crate::store::fence::Held;
use crate::store::postgres::listen::Heard;
use crate::store::{MailCounts, NewEvent};

/// What the loop does with a lease it holds.
enum State {
    /// Its deployment runs here.
    Running,
    /// Its deployment is being stopped; the lease is released (handed to
    /// `to`, if any) once its task has ended.
    Leaving {
        why: &'static str,
        to: Option<String>,
        reply: Option<oneshot::Sender<Result<i64, String>>>,
    },
    /// The lease is gone: its task is being killed; nothing is released.
    Lost,
}

/// A held lease and its deployment's task.
struct Entry {
    epoch: i64,
    /// When it was taken (database ms).
    acquired_ms: i64,
    handle: DeploymentHandle,
    state: State,
    /// The status snapshot last stored with the lease.
    status_sent: Option<String>,
}

/// The lease loop.
pub struct Leases {
    fleet: Arc<Fleet>,
    shared: Arc<Shared>,
    registry: Registry,
    db: Db,
    commands: mpsc::UnboundedReceiver<Command>,
    refusals: mpsc::UnboundedReceiver<String>,
    heard: mpsc::UnboundedReceiver<Heard>,
    held: BTreeMap<String, Entry>,
    tasks: JoinSet<String>,
    /// Deployments left alone until then (database ms).
    cooldown: BTreeMap<String, i64>,
    /// The database's clock at the last read, and when that was here.
    clock: (i64, Instant),
    stopping: bool,
    joined: Instant,
    next_round: Instant,
    round_now: bool,
    wake: Option<Instant>,
    renew_failing: bool,
    listening: bool,
    /// Lease facts not yet written (the database was away).
    facts: VecDeque<(String, Fact)>,
    serving: serve::Serving,
}

/// The channels the loop listens on.
pub const CHANNELS: &[&str] = &[
    "wfhost_mail",
    "wfhost_events",
    "wfhost_lease",
    "wfhost_request",
    "wfhost_answer",
];

impl Leases {
    /// The loop of `fleet`, on its lease connection `db`.
    pub fn new(
        fleet: Arc<Fleet>,
        shared: Arc<Shared>,
        registry: Registry,
        db: Db,
        commands: mpsc::UnboundedReceiver<Command>,
        refusals: mpsc::UnboundedReceiver<String>,
        heard: mpsc::UnboundedReceiver<Heard>,
    ) -> Self {
        let now = Instant::now();
        Self {
            serving: serve::Serving::default(),
            fleet,
            shared,
            registry,
            db,
            commands,
            refusals,
            heard,
            held: BTreeMap::new(),
            tasks: JoinSet::new(),
            cooldown: BTreeMap::new(),
            clock: (unix_ms() as i64, now),
            stopping: false,
            joined: now,
            next_round: now,
            round_now: false,
            wake: None,
            renew_failing: false,
            listening: false,
            facts: VecDeque::new(),
        }
    }

    /// Runs until the host has stopped and released everything it held.
    pub async fn run(mut self) {
        info!(host = %self.fleet.host(), ttl = ?self.fleet.timing.ttl, renew = ?self.fleet.timing.renew, "joined the fleet");
        loop {
            let wake = [Some(self.next_round), self.wake, self.first_deadline()]
                .into_iter()
                .flatten()
                .min()
                .unwrap_or(self.next_round);
            tokio::select! {
                Some(command) = self.commands.recv() => self.command(command),
                Some(deployment) = self.refusals.recv() => self.refused(deployment),
                Some(ended) = self.tasks.join_next(), if !self.tasks.is_empty() => {
                    match ended {
                        Ok(deployment) => self.ended(deployment).await,
                        Err(e) => error!(error = %e, "a deployment task ended abnormally"),
                    }
                }
                Some(heard) = self.heard.recv() => self.hear(heard),
                () = sleep_until(tokio::time::Instant::from_std(wake)) => {}
            }
            self.fence_overdue();
            if self.round_now || Instant::now() >= self.next_round {
                self.round().await;
            }
            if self.stopping && self.held.is_empty() && self.tasks.is_empty() {
                self.leave().await;
                return;
            }
        }
    }

    /// The earliest self-fence deadline of a lease acted on.
    fn first_deadline(&self) -> Option<Instant> {
        self.held
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Lost))
            .filter_map(|(d, _)| self.fleet.fence.deadline(d))
            .min()
    }

    /// The database's clock now, as estimated from the last read.
    fn db_now(&self) -> i64 {
        let (at_ms, at) = self.clock;
        at_ms.saturating_add(crate::fleet::ms(at.elapsed()))
    }

    /// Runs `f` on the lease connection; while it waits (a partition can
    /// hold it for a whole TTL), every lease past its deadline is still
    /// fenced on time.
    async fn call<T: Send + 'static>(
        &mut self,
        f: impl FnOnce(&mut crate::store::PostgresStore) -> T + Send + 'static,
    ) -> Option<T> {
        let db = self.db.clone();
        self.guarded(db.call(f)).await.ok()
    }

    /// Awaits `work` (a database call) while fencing every lease whose
    /// deadline passes meanwhile.
    async fn guarded<F: std::future::Future>(&mut self, work: F) -> F::Output {
        tokio::pin!(work);
        loop {
            let deadline = self.first_deadline();
            let fence = async {
                match deadline {
                    Some(at) => sleep_until(tokio::time::Instant::from_std(at)).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                done = &mut work => return done,
                () = fence => self.fence_overdue(),
            }
        }
    }

    /// Stops acting on every lease past its self-fence deadline.
    fn fence_overdue(&mut self) {
        let now = Instant::now();
        let overdue: Vec<String> = self
            .held
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Lost))
            .filter(|(d, _)| self.fleet.fence.deadline(d).is_none_or(|at| at <= now))
            .map(|(d, _)| d.clone())
            .collect();
        let after = self.fleet.timing.fence_after();
        for d in overdue {
            self.lose(
                &d,
                format!(
                    "self-fenced: no renewal succeeded within {} (lease_ttl - lease_renew), so it stopped before its lease could run out",
                    wfhost_policy::format_duration(after)
                ),
            );
        }
    }

    /// One round: renew, then (unless stopping) read the fleet and take or
    /// hand off leases as the rules say.
    async fn round(&mut self) {
        let started = Instant::now();
        self.round_now = false;
        self.next_round = started + self.fleet.timing.renew;
        self.renew().await;
        self.write_facts().await;
        self.serve_requests();
        // Hosts starting together see each other's heartbeat first.
        if self.stopping || started < self.joined + self.fleet.timing.renew {
            return;
        }
        let read_at = Instant::now();
        let Some(Ok(view)) = self.call(|s| s.fleet_view()).await else {
            return;
        };
        self.clock = (view.now_ms, read_at);
        let mine = self.mine();
        let plan = rules::plan(&view, &mine, &self.fleet.timing);
        self.wake = plan.wake_ms.map(|at| {
            let ahead = u64::try_from(at.saturating_sub(view.now_ms)).unwrap_or(0);
            read_at + Duration::from_millis(ahead)
        });
        // Taking many leases (each a takeover and a replay) must not hold
        // back the renewal of those held: past half a renewal, the rest
        // wait for the next round, which comes at once and renews first.
        for (d, claim) in plan.acquire {
            if started.elapsed() >= self.fleet.timing.renew / 2 {
                self.round_now = true;
                break;
            }
            self.acquire(d, claim).await;
        }
        for d in plan.shed {
            info!(deployment = %d, host = %self.fleet.host(), "above this host's fair share: handing it off");
            self.hand_off(&d, "shed", None, None);
        }
    }

    /// What the rules need to know of this host.
    fn mine(&mut self) -> Mine {
        let now = self.db_now();
        self.cooldown.retain(|_, until| *until > now);
        Mine {
            host: self.fleet.host().to_owned(),
            configured: self.fleet.deployments(),
            held: self
                .held
                .iter()
                .filter(|(_, e)| !matches!(e.state, State::Lost))
                .map(|(d, e)| (d.clone(), e.acquired_ms))
                .collect(),
            cooldown: self.cooldown.clone(),
            busy: self
                .held
                .iter()
                .filter(|(_, e)| matches!(e.state, State::Lost))
                .map(|(d, _)| d.clone())
                .collect(),
            stopping: self.stopping,
        }
    }

    /// Heartbeats and renews every lease acted on, in one statement.
    async fn renew(&mut self) {
        let now = std::time::Instant::now();
        let held: Vec<(String, i64, Option<String>)> = self
            .held
            .iter()
            .filter(|(_, e)| !matches!(e.state, State::Lost))
            .map(|(d, e)| {
                let snapshot = snapshot(&e.handle, now);
                let changed = (e.status_sent.as_ref() != Some(&snapshot)).then_some(snapshot);
                (d.clone(), e.epoch, changed)
            })
            .collect();
        let pairs: Vec<(String, i64)> = held.iter().map(|(d, e, _)| (d.clone(), *e)).collect();
        let (host, ttl, stopping) = (
            self.fleet.host().to_owned(),
            self.fleet.ttl_ms(),
            self.stopping,
        );
        let sent: Vec<(String, Option<String>)> = held
            .iter()
            .map(|(d, _, s)| (d.clone(), s.clone()))
            .collect();
        let started = Instant::now();
        let renewed = self
            .call(move |s| s.fleet_renew(&host, ttl, &held, stopping))
            .await;
        let renewed = match renewed {
            Some(Ok(r)) => r,
            Some(Err(e)) => return self.renew_failed(&e.to_string()),
            None => return self.renew_failed("the lease connection's thread is gone"),
        };
        if self.renew_failing {
            self.renew_failing = false;
            info!(host = %self.fleet.host(), "the database renews leases again");
        }
        debug!(
            leases = pairs.len(),
            renewed = renewed.len(),
            took_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX),
            "leases renewed"
        );
        let until = self.fleet.timing.deadline(started);
        self.fleet.fence.renewed(&renewed, until);
        for d in rules::lost(&pairs, &renewed) {
            self.lose(&d, "its lease was not renewed: another host took it over, or it ran out in the database".into());
        }
        for (d, status) in sent {
            if let Some(e) = self.held.get_mut(&d)
                && matches!(e.state, State::Running | State::Leaving { .. })
            {
                if status.is_some() {
                    e.status_sent = status;
                }
                tell(&e.handle, Ask::LeaseRenewed);
            }
        }
    }

    fn renew_failed(&mut self, error: &str) {
        if !self.renew_failing {
            self.renew_failing = true;
            // Left out while it holds no lease.
            let at = self
                .first_deadline()
                .map(|at| crate::fleet::ms(at.saturating_duration_since(Instant::now())));
            error!(host = %self.fleet.host(), error, self_fence_in_ms = at,
                "cannot renew this host's leases; it keeps trying, and stops every deployment it holds before its leases can run out");
        }
    }

    /// Takes `d`'s lease by `claim`; once the previous owner's
    /// unacknowledged mail is back in the inbox, starts its task.
    async fn acquire(&mut self, d: String, claim: Claim) {
        let Some(cfg) = self.fleet.config(&d) else {
            return;
        };
        let (host, id, ttl, grace) = (
            self.fleet.host().to_owned(),
            d.clone(),
            self.fleet.ttl_ms(),
            self.fleet.grace_ms(),
        );
        let how = claim.how();
        let started = Instant::now();
        let taken = self
            .call(move |s| s.fleet_acquire(&host, &id, &claim, ttl, grace))
            .await;
        let acquired = match taken {
            Some(Ok(Some(a))) => a,
            Some(Ok(None)) => return debug!(deployment = %d, "another host took the lease first"),
            Some(Err(e)) => return warn!(deployment = %d, error = %e, "cannot take the lease"),
            None => return,
        };
        let until = self.fleet.timing.deadline(started);
        self.fleet.fence.hold(
            &d,
            Held {
                epoch: acquired.epoch,
                until,
            },
        );
        let (id, fence, at) = (d.clone(), self.fleet.fence.clone(), unix_ms());
        let replayed = self
            .call(move |s| s.fleet_return_mail(&fence, &id, at))
            .await;
        match replayed {
            Some(Ok(n)) if n > 0 => {
                info!(deployment = %d, items = n, "mail the previous owner left unacknowledged returned to the inbox")
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                warn!(deployment = %d, error = %e, "cannot return the previous owner's unacknowledged mail to the inbox; it returns when this host next takes the lease")
            }
            None => warn!(deployment = %d, "the lease connection's thread is gone"),
        }
        let (handle, join) = DeploymentHandle::start(cfg, self.shared.clone());
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(d.clone(), handle.clone());
        let name = d.clone();
        self.tasks.spawn(async move {
            let _ = join.await;
            name
        });
        let epoch = acquired.epoch;
        self.held.insert(
            d.clone(),
            Entry {
                epoch,
                acquired_ms: self.db_now(),
                handle,
                state: State::Running,
                status_sent: None,
            },
        );
        self.fact(
            &d,
            Fact::LeaseAcquired {
                host: self.fleet.host().to_owned(),
                epoch: epoch.unsigned_abs(),
                how,
                from: acquired.previous,
            },
        );
    }

    /// Stops `d` here for good and releases its lease once its task ends.
    fn hand_off(
        &mut self,
        d: &str,
        why: &'static str,
        to: Option<String>,
        reply: Option<oneshot::Sender<Result<i64, String>>>,
    ) {
        let Some(e) = self.held.get_mut(d) else {
            if let Some(r) = reply {
                let _ = r.send(Err(format!("{d} does not run on this host")));
            }
            return;
        };
        if !matches!(e.state, State::Running) {
            if let Some(r) = reply {
                let _ = r.send(Err(format!("{d} is already being stopped on this host")));
            }
            return;
        }
        e.state = State::Leaving { why, to, reply };
        tell(&e.handle, Ask::Life(Request::Stop));
    }

    /// `d`'s lease is gone: every write for it is refused from now on,
    /// requests for it go to its new owner, its children are killed.
    fn lose(&mut self, d: &str, why: String) {
        let Some(e) = self.held.get_mut(d) else {
            return;
        };
        if matches!(e.state, State::Lost) {
            return;
        }
        self.fleet.fence.release(d);
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(d);
        // At once, from here: the deployment's task may be waiting on a
        // store that cannot answer (a partition). They are this process's
        // unreaped children, so their pids cannot have been reused.
        for pid in live_pids(&e.handle) {
            let killed = wfhost_process::kill_tree(pid);
            debug!(deployment = %d, pid, descendants = killed, "lease lost: child's tree SIGKILLed");
        }
        tell(&e.handle, Ask::LeaseLost);
        if let State::Leaving { reply: Some(r), .. } = std::mem::replace(&mut e.state, State::Lost)
        {
            let _ = r.send(Err(format!(
                "{d}'s lease was lost before it was handed off: {why}"
            )));
        }
        let epoch = e.epoch.unsigned_abs();
        let until = self
            .db_now()
            .saturating_add(crate::fleet::ms(self.fleet.timing.cooldown()));
        self.cooldown.insert(d.to_owned(), until);
        let host = self.fleet.host().to_owned();
        self.fact(d, Fact::LeaseLost { host, epoch, why });
    }

    /// A write for `d` was refused by the fence.
    fn refused(&mut self, d: String) {
        self.lose(
            &d,
            "a write for it was refused by the fence: this host no longer holds its lease".into(),
        );
    }

    /// `d`'s task ended: its lease is released (unless it was lost), once
    /// everything the task wrote has reached the store.
    async fn ended(&mut self, d: String) {
        let d = d.as_str();
        let Some(e) = self.held.remove(d) else {
            return;
        };
        self.registry
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(d);
        let (why, to, reply) = match e.state {
            State::Lost => return,
            // Not asked by this loop: the supervisor is stopping.
            State::Running => {
                self.stopping = true;
                ("stop", None, None)
            }
            State::Leaving { why, to, reply } => (why, to, reply),
        };
        // The store thread writes in order: once this returns, so has
        // everything the task queued before it ended.
        let store = self.shared.store.clone();
        let _ = self.guarded(store.call(|_| ())).await;
        self.fleet.fence.release(d);
        let (host, id, epoch, ttl) = (
            self.fleet.host().to_owned(),
            d.to_owned(),
            e.epoch,
            self.fleet.ttl_ms(),
        );
        let target = to.clone();
        let released = self
            .call(move |s| s.fleet_release(&host, &id, epoch, target.as_deref(), ttl))
            .await;
        let answer = match released {
            Some(Ok(true)) => {
                let host = self.fleet.host().to_owned();
                let epoch_u = epoch.unsigned_abs();
                self.fact(
                    d,
                    Fact::LeaseReleased {
                        host,
                        epoch: epoch_u,
                        why,
                        to: to.clone(),
                    },
                );
                Ok(epoch)
            }
            Some(Ok(false)) => Err(format!("{d}'s lease was no longer this host's to release")),
            Some(Err(e)) => {
                warn!(deployment = %d, error = %e, "cannot release the lease; it runs out by itself and another host takes it then");
                Err(format!("cannot release {d}'s lease: {e}"))
            }
            None => Err("the lease connection's thread is gone".into()),
        };
        if why != "stop" {
            let until = self
                .db_now()
                .saturating_add(crate::fleet::ms(self.fleet.timing.cooldown()));
            self.cooldown.insert(d.to_owned(), until);
        }
        if let Some(r) = reply {
            let _ = r.send(answer);
        }
    }

    /// A command from the supervisor or the control socket.
    fn command(&mut self, command: Command) {
        match command {
            Command::Stop => self.stop(),
            Command::Move {
                deployment,
                to,
                reply,
            } => {
                if to == self.fleet.host() {
                    let _ = reply.send(Err(format!("{deployment} already runs on {to}")));
                    return;
                }
                info!(deployment = %deployment, to = %to, "handing off to another host");
                self.hand_off(&deployment, "move", Some(to), Some(reply));
            }
            Command::Reload { deployments, reply } => {
                let _ = reply.send(self.reload(&deployments));
            }
        }
    }

    /// Drains every deployment held; each lease is released as its task ends.
    fn stop(&mut self) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.round_now = true;
        let running: Vec<String> = self
            .held
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Running))
            .map(|(d, _)| d.clone())
            .collect();
        info!(host = %self.fleet.host(), deployments = running.len(), "leaving the fleet: draining every deployment held here, releasing each lease as its child is gone");
        for d in running {
            self.hand_off(&d, "stop", None, None);
        }
    }

    /// Applies a reload to the deployments held here.
    fn reload(&mut self, deployments: &[DeploymentConfig]) -> ReloadSummary {
        let before = self.fleet.deployments();
        self.fleet.configure(deployments);
        let mut summary = ReloadSummary::default();
        for d in deployments {
            if !before.contains(&d.id) {
                summary.added.push(d.id.clone());
            }
        }
        let held: Vec<String> = self.held.keys().cloned().collect();
        for id in held {
            match deployments.iter().find(|d| d.id == id) {
                None => {
                    summary.removed.push(id.clone());
                    self.hand_off(&id, "removed", None, None);
                }
                Some(new) => {
                    let Some(e) = self.held.get(&id) else {
                        continue;
                    };
                    if *e.handle.config() != *new {
                        let mut same = (*e.handle.config()).clone();
                        same.replicas = new.replicas;
                        same.recycle.overlap = new.recycle.overlap;
                        let recycle = same != *new;
                        e.handle.reconfigure(Arc::new(new.clone()));
                        tell(&e.handle, Ask::Reconfigured { recycle });
                        summary.changed.push(id.clone());
                    }
                }
            }
        }
        self.round_now = true;
        summary
    }

    /// What the listener heard.
    fn hear(&mut self, heard: Heard) {
        match heard {
            Heard::Note { channel, payload } => match channel.as_str() {
                "wfhost_mail" => {
                    if let Some(e) = self.held.get(&payload)
                        && matches!(e.state, State::Running)
                    {
                        tell(&e.handle, Ask::MailArrived);
                    }
                }
                "wfhost_events" => self.shared.events_written(),
                "wfhost_lease" => self.round_now = true,
                "wfhost_request" if payload == self.fleet.host() => self.serve_requests(),
                "wfhost_answer" => {
                    if let Ok(id) = payload.parse() {
                        self.fleet.answer_arrived(id);
                    }
                }
                _ => {}
            },
            Heard::Listening => {
                if self.listening {
                    info!("listening for the fleet's notifications again");
                }
                self.listening = true;
                // Whatever was notified meanwhile is gone: look.
                self.round_now = true;
                self.shared.events_written();
                for e in self.held.values() {
                    tell(&e.handle, Ask::MailArrived);
                }
                self.serve_requests();
            }
            Heard::Lost(error) => {
                if std::mem::take(&mut self.listening) {
                    warn!(error = %error, "lost the connection that listens for the fleet's notifications; reconnecting");
                }
            }
        }
    }

    /// Answers the requests forwarded to this host, each on a task of its
    /// own (a recycle can take a while).
    fn serve_requests(&mut self) {
        self.serving
            .start(&self.fleet, &self.shared, &self.registry);
    }

    /// Records a lease fact: logged, and journaled and published on the
    /// lease connection (not fenced: it is this host's account of the
    /// lease itself), now or once the database is back.
    fn fact(&mut self, d: &str, fact: Fact) {
        record::log(d, &fact);
        self.facts.push_back((d.to_owned(), fact));
        self.round_now = true;
    }

    async fn write_facts(&mut self) {
        while let Some((d, fact)) = self.facts.front().cloned() {
            let key = self.shared.key.clone();
            let at_ms = unix_ms();
            let entry = NewJournalEntry {
                at_ms,
                kind: fact.kind().to_owned(),
                deployment: Some(d.clone()),
                body: fact.body(),
            };
            let event = NewEvent {
                at_ms,
                deployment: Some(d),
                kind: fact.kind().to_owned(),
                body: fact.body(),
            };
            let written = self
                .call(move |s| {
                    use crate::store::Store;
                    s.append_journal(&key, entry)?;
                    s.append_events(std::slice::from_ref(&event)).map(drop)
                })
                .await;
            match written {
                Some(Ok(())) => {
                    self.facts.pop_front();
                    self.shared.events_written();
                }
                Some(Err(e)) => return debug!(error = %e, "lease facts wait for the database"),
                None => return,
            }
        }
    }

    /// Leaves the fleet (the host row goes) once nothing is held.
    async fn leave(&mut self) {
        self.write_facts().await;
        let host = self.fleet.host().to_owned();
        match self.call(move |s| s.fleet_leave(&host)).await {
            Some(Ok(())) => info!(host = %self.fleet.host(), "left the fleet"),
            Some(Err(e)) => {
                warn!(error = %e, "cannot remove this host from the fleet's hosts; it counts as gone once its heartbeat is older than lease_ttl")
            }
            None => {}
        }
    }
}

/// The pids of a deployment's live children.
fn live_pids(handle: &DeploymentHandle) -> Vec<u32> {
    handle.with_status(|s| {
        let mut pids: Vec<u32> = s
            .replicas
            .iter()
            .filter_map(|r| r.pid)
            .chain(s.pid)
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids
    })
}

/// Tells a deployment's task without waiting on its queue.
fn tell(handle: &DeploymentHandle, ask: Ask) {
    if let Err(mpsc::error::TrySendError::Full(ask)) = handle.asks.try_send(ask) {
        let handle = handle.clone();
        tokio::spawn(async move { handle.tell(ask).await });
    }
}

/// The status the owner stores with a lease for other hosts' `status`:
/// what changes rarely (state, pids, counts), not uptimes or budgets used.
fn snapshot(handle: &DeploymentHandle, now: Instant) -> String {
    let mut json = handle.with_status(|s| s.to_json(now, &MailCounts::default()));
    if let Some(map) = json.as_object_mut() {
        for volatile in [
            "uptime_ms",
            "rss_bytes",
            "grants_age_ms",
            "mail",
            "replicas",
        ] {
            map.remove(volatile);
        }
        if let Some(drain) = map.get_mut("drain").and_then(|d| d.as_object_mut()) {
            drain.remove("used_ms");
        }
    }
    json.to_string()
}
