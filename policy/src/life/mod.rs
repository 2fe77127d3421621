//! A deployment's life as one pure state machine (DESIGN §3–§5).
//!
//! Everything that can happen to a deployment (its child's handshake,
//! drain reports, misconduct and exit; operator requests; timers; the
//! result of checking a recycle's successor) is an [`Input`]; [`Life::on`]
//! turns the phase and the input into a new phase and the [`Action`]s the
//! driver carries out. The table is the one `match` in [`Life::on`] (and
//! its request half in `Life::request`): each cell is a small named
//! function (`start.rs`, `drain.rs`, `end.rs`; the words to operators in
//! `answer.rs`), and a pair that cannot happen, or that a phase ignores,
//! is written out as such. The machine never sleeps and never does
//! I/O: it is told the time, and it tells its next deadline.
//!
//! Waiters (`W`) are whatever the driver answers operators through; the
//! machine only holds them and hands them back in [`Action::Answer`].

mod answer;
mod drain;
mod end;
mod start;
mod types;

#[cfg(test)]
mod tests;

use std::time::Instant;

pub use crate::exit::{ExitCause, ExitStatus};
pub use types::*;

use crate::restart::RestartTracker;

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
    /// It finished a step or a mail item since.
    pub worked: bool,
    /// It sent its Hello (a child that never does is not a wfhost child).
    pub spoke: bool,
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
    /// The child drained before it was stopped: its exit is the drain's end.
    drained_out: bool,
    /// The purpose of the drain whose budget runs (until [`Action::EndDrain`]).
    draining_for: Option<DrainPurpose>,
    steps_in_flight: bool,
    /// What was asked of a child that ended before it was ready.
    start_pending: Option<Purpose<W>>,
    recycling: Option<Recycling<W>>,
    restarts: RestartTracker,
    /// Recycles the child asked for, held to the restart policy too.
    self_recycles: RestartTracker,
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
            drained_out: false,
            draining_for: None,
            steps_in_flight: false,
            start_pending: None,
            recycling: None,
            restarts: RestartTracker::default(),
            self_recycles: RestartTracker::default(),
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
            (P::Starting, I::Hello) => self.said_hello(),
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
            (_, I::Worked) => {
                if let Some(c) = self.child.as_mut() {
                    c.worked = true;
                }
            }
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
            // The drain budget ran out while the child lives.
            (
                P::Starting | P::Ready | P::Draining | P::Stopping | P::Closing,
                I::BudgetSpent(escalation),
            ) => self.escalate(escalation, o),
            // Operators.
            (_, I::Request(request)) => self.request(request, now, o),
            // What a phase cannot see happen, or ignores:
            // - a child is spawned, says Hello, is ready or fails to spawn
            //   only while starting;
            // - `Drained` counts only while draining (a late report of an
            //   ended drain changes nothing);
            // - a recycle's check that lost to a stronger purpose is dropped;
            // - a stopping child's misconduct or closed channel changes
            //   nothing: it is being stopped anyway (a starting child's
            //   closed channel ends its handshake as a violation);
            // - a child asks for a recycle only while it is ready;
            // - a budget spent with no child left has nothing to cancel;
            // - ticks with no deadline due.
            (
                _,
                I::Spawned { .. }
                | I::SpawnFailed(_)
                | I::Hello
                | I::Ready
                | I::Drained
                | I::Vetted(_)
                | I::Misbehaved(_)
                | I::ChannelClosed
                | I::RecycleAsked(_)
                | I::Reaped(_)
                | I::BudgetSpent(_)
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
}
