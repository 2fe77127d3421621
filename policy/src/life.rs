//! A deployment's life as one pure state machine (DESIGN §3–§5).
//!
//! Everything that can happen to a deployment (its child's handshake,
//! drain reports, misconduct and exit; operator requests; timers; the
//! result of checking a recycle's successor) is an [`Input`]; [`Life::on`]
//! turns the phase and the input into a new phase and the [`Action`]s the
//! driver carries out. The table is the one `match` in [`Life::on`] (and
//! its request half, beside the requests, in `request.rs`): each cell is a small named
//! function (`start.rs`, `drain.rs`, `recycle.rs`, `end.rs`; the words to
//! operators in `answer.rs`), and a pair that cannot happen, or that a phase ignores,
//! is written out as such. The machine never sleeps and never does
//! I/O: it is told the time, and it tells its next deadline.
//!
//! Waiters (`W`) are whatever the driver answers operators through; the
//! machine only holds them and hands them back in [`Action::Answer`].

mod answer;
mod drain;
mod end;
mod recycle;
mod request;
mod start;
mod types;

#[cfg(test)]
mod tests;

use std::time::Instant;

pub use crate::exit::{ExitCause, ExitStatus};
pub use request::Request;
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
    /// It has a step of any behaviour in flight (a drain waits for none).
    pub steps_in_flight: bool,
}

/// One deployment's life.
#[derive(Debug)]
pub struct Life<W> {
    id: String,
    settings: Settings,
    phase: Phase<W>,
    child: Option<Child>,
    restarts: RestartTracker,
    /// Recycles the child asked for, held to the restart policy too.
    self_recycles: RestartTracker,
    ever_ready: bool,
}

type Out<W> = Vec<Action<W>>;

impl<W> Life<W> {
    /// A deployment whose first child is to be spawned now.
    pub fn new(id: impl Into<String>, settings: Settings) -> (Self, Out<W>) {
        let life = Self {
            id: id.into(),
            settings,
            phase: Phase::Starting {
                ready_by: None,
                pending: None,
                recycling: None,
            },
            child: None,
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
            Phase::Backoff { until, .. } => Some(*until),
            Phase::Ready { .. } | Phase::Drained { .. } | Phase::Failed | Phase::Exited => None,
        }
    }

    /// The table: what each input does in each phase.
    pub fn on(&mut self, input: Input<W>, now: Instant) -> Out<W> {
        let mut out = Vec::new();
        let o = &mut out;
        use Input as I;
        match (&self.phase, input) {
            // A child comes up.
            (Phase::Starting { .. }, I::Spawned { pid, channel_id }) => {
                self.spawned(pid, channel_id, now, o)
            }
            (Phase::Starting { .. }, I::SpawnFailed(e)) => {
                self.ended(ExitCause::SpawnFailed(e), now, o)
            }
            (Phase::Starting { .. }, I::Hello) => self.said_hello(),
            (Phase::Starting { .. }, I::Ready) => self.became_ready(now, o),
            (Phase::Starting { .. }, I::Tick) => self.ready_deadline(now, o),
            // The child works, drains, asks.
            (Phase::Ready { .. } | Phase::Draining { .. }, I::RecycleAsked(reason)) => {
                let request = Request::Recycle {
                    cause: RecycleCause::Child,
                    reason,
                    waiter: None,
                };
                self.request(request, now, o)
            }
            (Phase::Ready { .. }, I::Vetted(result)) => self.vetted(result, now, o),
            (Phase::Draining { .. }, I::Drained) => self.child_drained(now, o),
            (Phase::Draining { .. }, I::StepsInFlight(any)) => self.steps_changed(any, now, o),
            (_, I::Worked) => {
                if let Some(c) = self.child.as_mut() {
                    c.worked = true;
                }
            }
            (Phase::Draining { .. }, I::Tick) => self.drain_deadline(now, o),
            (_, I::StepsInFlight(any)) => {
                if let Some(c) = self.child.as_mut() {
                    c.steps_in_flight = any;
                }
            }
            // Misconduct and a child on its way out.
            (
                Phase::Starting { .. }
                | Phase::Ready { .. }
                | Phase::Draining { .. }
                | Phase::Closing { .. },
                I::Misbehaved(m),
            ) => self.misbehaved(m, o),
            (Phase::Ready { .. } | Phase::Draining { .. }, I::ChannelClosed) => {
                self.closing(now, o)
            }
            (Phase::Stopping { .. } | Phase::Closing { .. }, I::Tick) => self.kill_deadline(now, o),
            (
                Phase::Starting { .. }
                | Phase::Ready { .. }
                | Phase::Draining { .. }
                | Phase::Stopping { .. }
                | Phase::Closing { .. },
                I::Reaped(status),
            ) => self.reaped(status, now, o),
            // No child.
            (Phase::Backoff { .. }, I::Tick) => self.backoff_over(now, o),
            // The drain budget ran out while the child lives.
            (
                Phase::Starting { .. }
                | Phase::Ready { .. }
                | Phase::Draining { .. }
                | Phase::Stopping { .. }
                | Phase::Closing { .. },
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
}
