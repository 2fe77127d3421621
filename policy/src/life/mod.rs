//! A deployment's life as one pure state machine (DESIGN §3–§5).
//!
//! Everything that can happen to a deployment (its child's handshake,
//! drain reports, misconduct and exit; operator requests; timers; the
//! result of checking a recycle's successor) is an [`Input`]; [`Life::on`]
//! turns the phase and the input into a new phase and the [`Action`]s the
//! driver carries out. The table is the one `match` in [`Life::on`] (and
//! its request half in `Life::request`): each cell is a small named
//! function below it, and a pair that cannot happen, or that a phase
//! ignores, is written out as such. The machine never sleeps and never does
//! I/O: it is told the time, and it tells its next deadline.
//!
//! Waiters (`W`) are whatever the driver answers operators through; the
//! machine only holds them and hands them back in [`Action::Answer`].

mod types;

#[cfg(test)]
mod tests;

use std::time::Instant;

pub use types::*;

use crate::fact::Fact;
use crate::restart::{RestartDecision, RestartTracker};

/// The live child, as the machine knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Child {
    /// Its pid.
    pub pid: u32,
    /// The channel id minted for it.
    pub channel_id: String,
    /// When it was spawned.
    pub spawned_at: Instant,
    /// It completed its handshake.
    pub was_ready: bool,
}

/// A recycle whose old child is gone and whose new one is on its way.
#[derive(Debug)]
struct Recycling<W> {
    trigger: Trigger<W>,
    old_pid: Option<u32>,
    old_channel_id: Option<String>,
}

/// One deployment's life.
#[derive(Debug)]
pub struct Life<W> {
    id: String,
    settings: Settings,
    phase: Phase<W>,
    child: Option<Child>,
    /// Why the machine had the child killed, if it did.
    kill_cause: Option<ExitCause>,
    /// SIGTERM was sent on purpose: an exit is a stop, not a crash.
    terminated: bool,
    /// The purpose of the drain whose budget runs (until [`Action::EndDrain`]).
    draining_for: Option<DrainPurpose>,
    steps_in_flight: bool,
    /// What was asked of a child that ended before it was ready.
    start_pending: Option<Purpose<W>>,
    recycling: Option<Recycling<W>>,
    restarts: RestartTracker,
    ever_ready: bool,
}

type Out<W> = Vec<Action<W>>;

/// The phase without its data, for the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum P {
    Starting,
    Ready,
    Draining,
    Stopping,
    Closing,
    Backoff,
    Drained,
    Failed,
    Exited,
}

impl<W> Life<W> {
    /// A deployment whose first child is to be spawned now.
    pub fn new(id: impl Into<String>, settings: Settings) -> (Self, Out<W>) {
        let life = Self {
            id: id.into(),
            settings,
            phase: Phase::Starting {
                ready_by: None,
                pending: None,
            },
            child: None,
            kill_cause: None,
            terminated: false,
            draining_for: None,
            steps_in_flight: false,
            start_pending: None,
            recycling: None,
            restarts: RestartTracker::default(),
            ever_ready: false,
        };
        (life, vec![Action::Spawn { grants: None }])
    }

    /// The current phase.
    pub fn phase(&self) -> &Phase<W> {
        &self.phase
    }

    /// The live child, if any.
    pub fn child(&self) -> Option<&Child> {
        self.child.as_ref()
    }

    /// Whether mail may be delivered now.
    pub fn takes_mail(&self) -> bool {
        matches!(self.phase, Phase::Ready { .. })
    }

    /// Whether a child of this deployment has ever been ready.
    pub fn ever_ready(&self) -> bool {
        self.ever_ready
    }

    /// Settings for the decisions from now on (a reload).
    pub fn reconfigure(&mut self, settings: Settings) {
        self.settings = settings;
    }

    /// When [`Input::Tick`] is next due, if anything waits on the clock.
    pub fn deadline(&self) -> Option<Instant> {
        match &self.phase {
            Phase::Starting { ready_by, .. } => *ready_by,
            Phase::Draining { deadline, .. } => *deadline,
            Phase::Stopping { kill_at, .. } => *kill_at,
            Phase::Closing { kill_at, .. } => Some(*kill_at),
            Phase::Backoff { until } => Some(*until),
            Phase::Ready { .. } | Phase::Drained | Phase::Failed | Phase::Exited => None,
        }
    }

    fn kind(&self) -> P {
        match self.phase {
            Phase::Starting { .. } => P::Starting,
            Phase::Ready { .. } => P::Ready,
            Phase::Draining { .. } => P::Draining,
            Phase::Stopping { .. } => P::Stopping,
            Phase::Closing { .. } => P::Closing,
            Phase::Backoff { .. } => P::Backoff,
            Phase::Drained => P::Drained,
            Phase::Failed => P::Failed,
            Phase::Exited => P::Exited,
        }
    }

    /// The table: what each input does in each phase.
    pub fn on(&mut self, input: Input<W>, now: Instant) -> Out<W> {
        let mut out = Vec::new();
        let o = &mut out;
        use Input as I;
        match (self.kind(), input) {
            // A child comes up.
            (P::Starting, I::Spawned { pid, channel_id }) => self.spawned(pid, channel_id, now, o),
            (P::Starting, I::SpawnFailed(e)) => self.ended(ExitCause::SpawnFailed(e), now, o),
            (P::Starting, I::Ready) => self.became_ready(now, o),
            (P::Starting, I::Tick) => self.ready_deadline(now, o),
            // The child works, drains, asks.
            (P::Ready | P::Draining, I::RecycleAsked(reason)) => {
                let request = Request::Recycle {
                    cause: RecycleCause::Child,
                    reason,
                    waiter: None,
                };
                self.request(request, now, o)
            }
            (P::Ready, I::Vetted(result)) => self.vetted(result, now, o),
            (P::Draining, I::Drained) => self.child_drained(now, o),
            (P::Draining, I::StepsInFlight(any)) => self.steps_changed(any, now, o),
            (P::Draining, I::Tick) => self.drain_deadline(now, o),
            (_, I::StepsInFlight(any)) => self.steps_in_flight = any,
            // Misconduct and a child on its way out.
            (P::Starting | P::Ready | P::Draining | P::Closing, I::Misbehaved(m)) => {
                self.misbehaved(m, o)
            }
            (P::Ready | P::Draining, I::ChannelClosed) => self.closing(now, o),
            (P::Stopping | P::Closing, I::Tick) => self.kill_deadline(now, o),
            (
                P::Starting | P::Ready | P::Draining | P::Stopping | P::Closing,
                I::Reaped(status),
            ) => self.reaped(status, now, o),
            // No child.
            (P::Backoff, I::Tick) => self.backoff_over(now, o),
            // Operators.
            (_, I::Request(request)) => self.request(request, now, o),
            // What a phase cannot see happen, or ignores:
            // - a child is spawned, ready or failing to spawn only while starting;
            // - `Drained` counts only while draining (a late report of an
            //   ended drain changes nothing);
            // - a recycle's check that lost to a stronger purpose is dropped;
            // - a stopping child's misconduct or closed channel changes
            //   nothing: it is being stopped anyway (a starting child's
            //   closed channel ends its handshake as a violation);
            // - a child asks for a recycle only while it is ready;
            // - ticks with no deadline due.
            (
                _,
                I::Spawned { .. }
                | I::SpawnFailed(_)
                | I::Ready
                | I::Drained
                | I::Vetted(_)
                | I::Misbehaved(_)
                | I::ChannelClosed
                | I::RecycleAsked(_)
                | I::Reaped(_)
                | I::Tick,
            ) => {}
        }
        out
    }

    /// The request half of the table.
    fn request(&mut self, request: Request<W>, now: Instant, o: &mut Out<W>) {
        use Request as R;
        match (self.kind(), request) {
            (P::Starting, R::Stop) => self.stop_starting(now, o),
            (P::Ready, R::Stop) => self.drain(Purpose::Stop, now, o),
            (P::Draining, R::Stop) => self.merge_drain(Purpose::Stop, now, o),
            (P::Stopping | P::Closing, R::Stop) => self.merge_stopping(Purpose::Stop, None, o),
            (P::Backoff | P::Failed, R::Stop) => self.finish(true, o),
            (P::Drained, R::Stop) => self.finish(false, o),
            (P::Exited, R::Stop) => {}

            (P::Starting | P::Ready | P::Draining | P::Closing, R::Kill) => {
                self.kill(ExitCause::Killed, o)
            }
            (P::Stopping, R::Kill) => self.force_kill(o),
            (P::Backoff | P::Drained | P::Failed | P::Exited, R::Kill) => {}

            (P::Starting, R::Drain(to)) => self.drain_when_ready(to, o),
            (P::Ready | P::Draining, R::Drain(to)) => self.operator_drain(to, now, o),
            (P::Stopping | P::Closing, R::Drain(to)) => {
                self.merge_stopping(Purpose::Operator, Some(to), o)
            }
            (P::Backoff, R::Drain(to)) => self.drain_without_child(to, o),
            (P::Drained | P::Failed, R::Drain(to)) => {
                let state = self.phase.name();
                self.say(to, format!("{} is already {state}", self.id), o)
            }
            (P::Exited, R::Drain(to)) => self.refuse(to, self.busy("stopped"), o),

            (P::Drained | P::Failed, R::Resume(to)) => self.resume(to, o),
            (P::Ready | P::Draining, R::Resume(to)) => {
                let pid = self.pid().map_or_else(|| "?".into(), |p| p.to_string());
                self.refuse(
                    to,
                    format!("{} is not drained (pid {pid} is live)", self.id),
                    o,
                )
            }
            (P::Starting | P::Stopping | P::Closing | P::Backoff | P::Exited, R::Resume(to)) => {
                self.refuse(to, self.busy_here(), o)
            }

            (
                P::Starting,
                R::Recycle {
                    cause,
                    reason,
                    waiter,
                },
            ) => self.recycle_when_ready(Trigger::new(cause, reason, waiter), o),
            (
                P::Ready,
                R::Recycle {
                    cause,
                    reason,
                    waiter,
                },
            ) => self.vet(Trigger::new(cause, reason, waiter), o),
            (
                P::Draining,
                R::Recycle {
                    cause,
                    reason,
                    waiter,
                },
            ) => self.merge_drain(
                Purpose::Recycle(Trigger::new(cause, reason, waiter)),
                now,
                o,
            ),
            (
                P::Stopping | P::Closing,
                R::Recycle {
                    cause,
                    reason,
                    waiter,
                },
            ) => {
                let trigger = Trigger::new(cause, reason, waiter);
                self.merge_stopping(Purpose::Recycle(trigger), None, o)
            }
            (P::Backoff | P::Drained | P::Failed | P::Exited, R::Recycle { waiter, .. }) => {
                if let Some(to) = waiter {
                    self.refuse(to, self.busy_here(), o)
                }
            }

            (P::Ready | P::Draining, R::Cancel { run, waiter }) => {
                o.push(Action::Cancel { run, to: waiter })
            }
            (_, R::Cancel { waiter, .. }) => self.refuse(waiter, self.busy_here(), o),
        }
    }

    // ---------------------------------------------------------- cells

    fn spawned(&mut self, pid: u32, channel_id: String, now: Instant, o: &mut Out<W>) {
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
        });
    }

    fn became_ready(&mut self, now: Instant, o: &mut Out<W>) {
        let pending = match std::mem::replace(&mut self.phase, Phase::Ready { vetting: None }) {
            Phase::Starting { pending, .. } => pending,
            _ => None,
        };
        let Some(child) = self.child.as_mut() else {
            return;
        };
        child.was_ready = true;
        let (pid, channel_id) = (child.pid, child.channel_id.clone());
        o.push(Action::Record(Fact::Ready {
            pid,
            channel_id: channel_id.clone(),
        }));
        if !std::mem::replace(&mut self.ever_ready, true) {
            o.push(Action::Started);
        }
        if let Some(r) = self.recycling.take() {
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

    fn ready_deadline(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Starting {
            ready_by: Some(by), ..
        } = self.phase
            && now >= by
        {
            self.kill(ExitCause::NotReady, o);
        }
    }

    /// A recycle from a ready child: first check that a successor could
    /// start; a second recycle meanwhile joins the first.
    fn vet(&mut self, trigger: Trigger<W>, o: &mut Out<W>) {
        match &mut self.phase {
            Phase::Ready {
                vetting: Some(current),
            } => current.waiters.extend(trigger.waiters),
            Phase::Ready { vetting } => {
                *vetting = Some(trigger);
                o.push(Action::Vet);
            }
            _ => {}
        }
    }

    fn vetted(&mut self, result: Result<Option<Fresh>, String>, now: Instant, o: &mut Out<W>) {
        let Phase::Ready { vetting } = &mut self.phase else {
            return;
        };
        let Some(mut trigger) = vetting.take() else {
            return;
        };
        match result {
            Ok(grants) => {
                trigger.grants = grants;
                self.start_drain(Purpose::Recycle(trigger), now, o);
            }
            Err(error) => {
                let pid = self.pid().unwrap_or(0);
                o.push(Action::Record(Fact::RecycleRefused {
                    pid,
                    cause: trigger.cause,
                    reason: trigger.reason.clone(),
                    error: error.clone(),
                }));
                if matches!(trigger.cause, RecycleCause::Bound(_)) {
                    o.push(Action::RearmPolicy);
                }
                let why = format!(
                    "not recycled: {error}; {} keeps running on pid {pid}",
                    self.id
                );
                self.refuse_all(trigger.waiters, &why, o);
            }
        }
    }

    /// Starts a drain from a ready child (a recycle goes through its check
    /// first; a check under way loses to a stronger purpose).
    fn drain(&mut self, purpose: Purpose<W>, now: Instant, o: &mut Out<W>) {
        if let Purpose::Recycle(trigger) = purpose {
            return self.vet(trigger, o);
        }
        if let Phase::Ready { vetting } = &mut self.phase
            && let Some(lost) = vetting.take()
        {
            let why = format!(
                "not recycled: {} is being {}",
                self.id,
                being(purpose.kind())
            );
            self.refuse_all(lost.waiters, &why, o);
        }
        self.start_drain(purpose, now, o);
    }

    fn start_drain(&mut self, purpose: Purpose<W>, now: Instant, o: &mut Out<W>) {
        let deadline = self.drain_deadline_for(purpose.kind(), now);
        let recycle = match &purpose {
            Purpose::Recycle(t) => Some((t.cause, t.reason.clone())),
            _ => None,
        };
        o.push(Action::Record(Fact::DrainStarted {
            pid: self.pid().unwrap_or(0),
            purpose: purpose.kind(),
            budget: self.settings.drain_timeout,
            recycle,
        }));
        o.push(Action::SendDrain(purpose.kind()));
        self.draining_for = Some(purpose.kind());
        self.phase = Phase::Draining {
            purpose,
            deadline,
            drained: false,
        };
    }

    fn drain_deadline_for(&self, purpose: DrainPurpose, now: Instant) -> Option<Instant> {
        match purpose {
            DrainPurpose::Operator => None,
            DrainPurpose::Stop | DrainPurpose::Recycle => {
                now.checked_add(self.settings.drain_deadline)
            }
        }
    }

    fn operator_drain(&mut self, to: W, now: Instant, o: &mut Out<W>) {
        let pid = self.pid().unwrap_or(0);
        let budget = crate::format::format_duration(self.settings.drain_timeout);
        if self.kind() == P::Ready {
            self.drain(Purpose::Operator, now, o);
        } else {
            self.merge_drain(Purpose::Operator, now, o);
        }
        let said = format!(
            "draining {} (pid {pid}) under a {budget} budget; it stays drained until `wfhost resume`",
            self.id
        );
        self.say(to, said, o);
    }

    /// A new reason to drain meets a drain under way: a stronger purpose
    /// takes over (keeping the budget, taking the earlier deadline), a
    /// second recycle joins the first, anything else is absorbed or refused.
    fn merge_drain(&mut self, new: Purpose<W>, now: Instant, o: &mut Out<W>) {
        let new_deadline = self.drain_deadline_for(new.kind(), now);
        let Phase::Draining {
            purpose, deadline, ..
        } = &mut self.phase
        else {
            return;
        };
        let lost = match (purpose, new) {
            (Purpose::Recycle(current), Purpose::Recycle(joining)) => {
                current.waiters.extend(joining.waiters);
                None
            }
            (current, new) if new.kind() > current.kind() => {
                self.draining_for = Some(new.kind());
                *deadline = match (new_deadline, *deadline) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (fresh, _) => fresh,
                };
                Some(std::mem::replace(current, new))
            }
            (_, new) => Some(new),
        };
        if let Some(Purpose::Recycle(trigger)) = lost {
            let now_for = self.phase.purpose().unwrap_or(DrainPurpose::Recycle);
            let why = format!(
                "not recycled: {} is being {} ({})",
                self.id,
                being(now_for),
                now_for.as_str()
            );
            self.refuse_all(trigger.waiters, &why, o);
        }
    }

    /// A request while the child is being stopped: a recycle joins one
    /// under way, a stop or drain takes it over, so nothing asked is lost.
    fn merge_stopping(&mut self, new: Purpose<W>, to: Option<W>, o: &mut Out<W>) {
        let (Phase::Stopping { purpose, .. } | Phase::Closing { purpose, .. }) = &mut self.phase
        else {
            return;
        };
        let strength = new.kind();
        let (lost, refused) = match (purpose.as_mut(), new) {
            (Some(Purpose::Recycle(current)), Purpose::Recycle(joining)) => {
                current.waiters.extend(joining.waiters);
                (None, false)
            }
            (_, Purpose::Recycle(joining)) => (Some(joining), true),
            (Some(Purpose::Stop), Purpose::Operator) => (None, true),
            (_, new) => match purpose.replace(new) {
                Some(Purpose::Recycle(previous)) => (Some(previous), false),
                _ => (None, false),
            },
        };
        let id = &self.id;
        match (lost, refused) {
            (Some(joining), true) => self.refuse_all(joining.waiters, &self.busy("stopping"), o),
            (Some(previous), false) => {
                let why = format!("not recycled: {id} is being {}", being(strength));
                self.refuse_all(previous.waiters, &why, o);
            }
            (None, _) => {}
        }
        if let Some(to) = to {
            match refused {
                true => self.refuse(to, self.busy("stopping"), o),
                false => {
                    let said = format!("{id} stays drained once its child has stopped");
                    self.say(to, said, o);
                }
            }
        }
    }

    fn child_drained(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Draining { drained, .. } = &mut self.phase {
            *drained = true;
        }
        self.drain_complete(now, o);
    }

    fn steps_changed(&mut self, any: bool, now: Instant, o: &mut Out<W>) {
        self.steps_in_flight = any;
        self.drain_complete(now, o);
    }

    /// A drain is over once the child said `Drained` and no step of any
    /// behaviour is left (wait steps are let finish): stop the child.
    fn drain_complete(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Draining { drained: true, .. } = self.phase
            && !self.steps_in_flight
        {
            self.end_drain("drained", o);
            self.terminate(now, o);
        }
    }

    fn drain_deadline(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Draining {
            deadline: Some(d), ..
        } = self.phase
            && now >= d
        {
            self.end_drain("drain_deadline passed", o);
            self.terminate(now, o);
        }
    }

    fn end_drain(&mut self, why: &'static str, o: &mut Out<W>) {
        if let Some(purpose) = self.draining_for.take() {
            o.push(Action::EndDrain { purpose, why });
        }
    }

    /// SIGTERM with the drain's purpose; SIGKILL after `kill_timeout`.
    fn terminate(&mut self, now: Instant, o: &mut Out<W>) {
        let purpose = self.take_purpose(o);
        self.terminated = true;
        o.push(Action::Terminate);
        self.phase = Phase::Stopping {
            purpose,
            kill_at: now.checked_add(self.settings.kill_timeout),
        };
    }

    /// Takes the phase's purpose as the child leaves it: what was asked
    /// of a starting child waits for its end; a recycle still being checked
    /// is refused, since the child it would replace is ending anyway.
    fn take_purpose(&mut self, o: &mut Out<W>) -> Option<Purpose<W>> {
        match std::mem::replace(&mut self.phase, Phase::Exited) {
            Phase::Draining { purpose, .. } => Some(purpose),
            Phase::Stopping { purpose, .. } | Phase::Closing { purpose, .. } => purpose,
            Phase::Starting { pending, .. } => {
                self.start_pending = pending;
                None
            }
            Phase::Ready {
                vetting: Some(trigger),
            } => {
                let why = format!("not recycled: the child of {} is ending", self.id);
                self.refuse_all(trigger.waiters, &why, o);
                None
            }
            _ => None,
        }
    }

    fn stop_starting(&mut self, now: Instant, o: &mut Out<W>) {
        self.terminate(now, o);
        if let Phase::Stopping { purpose, .. } = &mut self.phase {
            *purpose = Some(Purpose::Stop);
        }
    }

    fn misbehaved(&mut self, m: Misconduct, o: &mut Out<W>) {
        let cause = match m {
            Misconduct::Violation(v) => ExitCause::Violation(v),
            Misconduct::Hung => ExitCause::Hung,
        };
        self.kill(cause, o);
    }

    /// SIGKILL now, for `cause`; the drain's purpose (if any) still decides
    /// what follows the exit.
    fn kill(&mut self, cause: ExitCause, o: &mut Out<W>) {
        let purpose = self.take_purpose(o);
        o.push(Action::Kill(match cause {
            ExitCause::Killed => KillWhy::Operator,
            ref other => KillWhy::Misconduct(other.clone()),
        }));
        self.kill_cause = Some(cause);
        self.phase = Phase::Stopping {
            purpose,
            kill_at: None,
        };
    }

    fn force_kill(&mut self, o: &mut Out<W>) {
        if let Phase::Stopping { kill_at, .. } = &mut self.phase {
            *kill_at = None;
        }
        o.push(Action::Kill(KillWhy::Operator));
    }

    fn closing(&mut self, now: Instant, o: &mut Out<W>) {
        let purpose = self.take_purpose(o);
        let kill_at = now.checked_add(self.settings.kill_timeout).unwrap_or(now);
        self.phase = Phase::Closing { purpose, kill_at };
    }

    fn kill_deadline(&mut self, now: Instant, o: &mut Out<W>) {
        match &mut self.phase {
            Phase::Stopping { kill_at, .. } if kill_at.is_some_and(|at| now >= at) => {
                *kill_at = None;
                o.push(Action::Kill(KillWhy::Overdue));
            }
            Phase::Closing { purpose, kill_at } if now >= *kill_at => {
                let purpose = purpose.take();
                let cause =
                    ExitCause::Violation("closed its control channel but did not exit".into());
                o.push(Action::Kill(KillWhy::Misconduct(cause.clone())));
                self.kill_cause = Some(cause);
                self.phase = Phase::Stopping {
                    purpose,
                    kill_at: None,
                };
            }
            _ => {}
        }
    }

    /// The child was reaped: why it ended decides what follows.
    fn reaped(&mut self, status: ExitStatus, now: Instant, o: &mut Out<W>) {
        let cause = match self.kill_cause.take() {
            Some(cause) => cause,
            None if self.terminated => ExitCause::Stopped(status),
            None => ExitCause::Exited(status),
        };
        self.ended(cause, now, o);
    }

    fn ended(&mut self, cause: ExitCause, now: Instant, o: &mut Out<W>) {
        let purpose = self.take_purpose(o);
        let pending = self.start_pending.take();
        self.end_drain("child exited", o);
        self.terminated = false;
        self.steps_in_flight = false;
        let child = self.child.take();
        if let Some(c) = &child {
            o.push(Action::Record(Fact::Exited {
                pid: c.pid,
                channel_id: c.channel_id.clone(),
                cause: cause.clone(),
            }));
        }
        o.push(Action::ReplayMail);
        let pid = child.as_ref().map(|c| c.pid);
        // A recycle asked for while this child started waited for it.
        let pending = match pending {
            Some(Purpose::Recycle(trigger)) => {
                let why = format!(
                    "not recycled: the new child (pid {}) of {} never became ready: {}",
                    pid.unwrap_or(0),
                    self.id,
                    cause.describe()
                );
                self.refuse_all(trigger.waiters, &why, o);
                None
            }
            other => other.map(|p| p.kind()),
        };
        match (purpose, pending) {
            (Some(Purpose::Stop), _) => self.finish(true, o),
            (Some(Purpose::Operator), _) | (None, Some(DrainPurpose::Operator)) => {
                self.park_drained(pid, o)
            }
            (Some(Purpose::Recycle(trigger)), _) => {
                let grants = trigger.grants.clone();
                self.recycling = Some(Recycling {
                    trigger,
                    old_pid: pid,
                    old_channel_id: child.map(|c| c.channel_id),
                });
                self.spawn(grants, o);
            }
            (None, _) => self.crashed(cause, child, now, o),
        }
    }

    /// An end nobody asked for: the restart policy decides.
    fn crashed(&mut self, cause: ExitCause, child: Option<Child>, now: Instant, o: &mut Out<W>) {
        let description = cause.describe();
        if let Some(r) = self.recycling.take() {
            let why = format!("the new child of {} failed: {description}", self.id);
            self.refuse_all(r.trigger.waiters, &why, o);
        }
        let spawned_at = child.map_or(now, |c| c.spawned_at);
        match self
            .restarts
            .on_exit(&self.settings.restart, spawned_at, now)
        {
            RestartDecision::Restart { delay, attempt } => {
                o.push(Action::Record(Fact::Restarting {
                    attempt,
                    delay,
                    after: description,
                }));
                // A zero delay must not wait for a timer's next tick.
                match now.checked_add(delay) {
                    Some(until) if !delay.is_zero() => self.phase = Phase::Backoff { until },
                    _ => self.spawn(None, o),
                }
            }
            RestartDecision::GiveUp { restarts, period } => {
                o.push(Action::Record(Fact::Failed {
                    restarts,
                    period,
                    last: description,
                }));
                self.phase = Phase::Failed;
                o.push(Action::Started);
            }
        }
    }

    fn park_drained(&mut self, pid: Option<u32>, o: &mut Out<W>) {
        o.push(Action::Record(Fact::Drained { pid }));
        self.phase = Phase::Drained;
    }

    fn spawn(&mut self, grants: Option<Fresh>, o: &mut Out<W>) {
        self.phase = Phase::Starting {
            ready_by: None,
            pending: None,
        };
        o.push(Action::Spawn { grants });
    }

    fn backoff_over(&mut self, now: Instant, o: &mut Out<W>) {
        if let Phase::Backoff { until } = self.phase
            && now >= until
        {
            self.spawn(None, o);
        }
    }

    /// The task ends; a drained deployment stays shown as drained.
    fn finish(&mut self, exited: bool, o: &mut Out<W>) {
        if exited {
            self.phase = Phase::Exited;
        }
        if let Some(r) = self.recycling.take() {
            let why = format!("not recycled: {} is being stopped", self.id);
            self.refuse_all(r.trigger.waiters, &why, o);
        }
        o.push(Action::Finish);
    }

    fn resume(&mut self, to: W, o: &mut Out<W>) {
        let from = self.phase.name();
        o.push(Action::Record(Fact::Resumed { from }));
        self.restarts.reset();
        let said = format!("{} is starting a fresh child", self.id);
        self.say(to, said, o);
        self.spawn(None, o);
    }

    fn drain_when_ready(&mut self, to: W, o: &mut Out<W>) {
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

    fn recycle_when_ready(&mut self, trigger: Trigger<W>, o: &mut Out<W>) {
        let id = self.id.clone();
        let Phase::Starting { pending, .. } = &mut self.phase else {
            return;
        };
        match pending {
            None => *pending = Some(Purpose::Recycle(trigger)),
            Some(Purpose::Recycle(current)) => current.waiters.extend(trigger.waiters),
            Some(_) => {
                let why =
                    format!("not recycled: {id} will drain as soon as its new child is ready");
                self.refuse_all(trigger.waiters, &why, o);
            }
        }
    }

    fn drain_without_child(&mut self, to: W, o: &mut Out<W>) {
        let said = format!("{} has no live child; it is drained now", self.id);
        self.say(to, said, o);
        self.park_drained(None, o);
    }

    // ------------------------------------------------------ answers

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.pid)
    }

    fn say(&self, to: W, said: String, o: &mut Out<W>) {
        o.push(Action::Answer {
            to,
            answer: Ok(Answer::Said(said)),
        });
    }

    fn refuse(&self, to: W, why: String, o: &mut Out<W>) {
        o.push(Action::Answer {
            to,
            answer: Err(why),
        });
    }

    fn refuse_all(&self, waiters: Vec<W>, why: &str, o: &mut Out<W>) {
        for to in waiters {
            self.refuse(to, why.to_owned(), o);
        }
    }

    /// "X is STATE; try again once it is ready".
    fn busy(&self, state: &str) -> String {
        format!("{} is {state}; try again once it is ready", self.id)
    }

    /// [`Self::busy`] in the words of the current phase.
    fn busy_here(&self) -> String {
        let id = &self.id;
        match self.kind() {
            P::Backoff => self.busy("waiting to restart after a crash"),
            P::Drained | P::Failed => self.busy(&format!(
                "{}; `wfhost resume {id}` starts a fresh child",
                self.phase.name()
            )),
            P::Exited => self.busy("stopped"),
            P::Starting => self.busy("starting"),
            P::Ready | P::Draining | P::Stopping | P::Closing => self.busy("stopping"),
        }
    }
}

/// "stopped" or "drained", as a recycle refused by a drain's purpose says.
fn being(purpose: DrainPurpose) -> &'static str {
    match purpose {
        DrainPurpose::Stop => "stopped",
        DrainPurpose::Operator | DrainPurpose::Recycle => "drained",
    }
}
