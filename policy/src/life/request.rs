//! What an operator (or the supervisor on its behalf) can ask of a
//! deployment, and the request half of the machine's table: one row per
//! request and phase. A new request is a variant here and its rows; its
//! cell, if new, lives with its noun (`drain.rs`, `recycle.rs`, `end.rs`).

use std::time::Instant;

use super::{Action, ExitCause, Life, Out, Phase, Purpose, RecycleCause, Trigger};

/// What operators (and the supervisor on their behalf) ask of a deployment.
#[derive(Debug)]
pub enum Request<W> {
    /// Drain under the budget, stop the child, and end (the supervisor stops).
    Stop,
    /// SIGKILL the child now, even if it is already stopping.
    Kill,
    /// Drain and stop the child; stay drained until resumed.
    Drain(W),
    /// Start a fresh child after a drain or a failure.
    Resume(W),
    /// Replace the child with a fresh one without losing mail.
    Recycle {
        /// Who asked.
        cause: RecycleCause,
        /// Why.
        reason: String,
        /// Who waits for the new pid.
        waiter: Option<W>,
    },
    /// A signed operator cancel of one run, or of every run.
    Cancel {
        /// The run, or every run.
        run: Option<String>,
        /// Who waits for it to be journaled and sent.
        waiter: W,
    },
}

impl<W> Request<W> {
    /// Who waits for the answer, if anyone (the request itself is dropped).
    pub fn into_waiter(self) -> Option<W> {
        match self {
            Self::Stop | Self::Kill => None,
            Self::Drain(w) | Self::Resume(w) | Self::Cancel { waiter: w, .. } => Some(w),
            Self::Recycle { waiter, .. } => waiter,
        }
    }

    /// The same request for each of `n` replicas, each with its share of
    /// the waiter (`fan_out` makes `n` waiters that answer the one once all
    /// have answered). A recycle is never split: it is the crew's.
    pub fn split(self, n: usize, fan_out: impl FnOnce(W, usize) -> Vec<W>) -> Vec<Self> {
        if n == 1 {
            return vec![self];
        }
        match self {
            Self::Stop => (0..n).map(|_| Self::Stop).collect(),
            Self::Kill => (0..n).map(|_| Self::Kill).collect(),
            Self::Drain(w) => fan_out(w, n).into_iter().map(Self::Drain).collect(),
            Self::Resume(w) => fan_out(w, n).into_iter().map(Self::Resume).collect(),
            Self::Cancel { run, waiter } => fan_out(waiter, n)
                .into_iter()
                .map(|waiter| Self::Cancel {
                    run: run.clone(),
                    waiter,
                })
                .collect(),
            recycle @ Self::Recycle { .. } => vec![recycle],
        }
    }
}

impl<W> Life<W> {
    /// The request half of the table.
    pub(super) fn request(&mut self, request: Request<W>, now: Instant, o: &mut Out<W>) {
        use Request as R;
        match (&self.phase, request) {
            (Phase::Starting { .. }, R::Stop) => self.stop_starting(now, o),
            (Phase::Ready { .. }, R::Stop) => self.drain(Purpose::Stop, now, o),
            (Phase::Draining { .. }, R::Stop) => self.merge_drain(Purpose::Stop, now, o),
            (Phase::Stopping { .. } | Phase::Closing { .. }, R::Stop) => {
                self.merge_stopping(Purpose::Stop, None, o)
            }
            (Phase::Backoff { .. } | Phase::Failed, R::Stop) => {
                let successor = self.take_successor();
                self.finish(true, successor, o)
            }
            (Phase::Drained { .. }, R::Stop) => {
                let successor = self.take_successor();
                self.finish(false, successor, o)
            }
            (Phase::Exited, R::Stop) => {}

            (
                Phase::Starting { .. }
                | Phase::Ready { .. }
                | Phase::Draining { .. }
                | Phase::Closing { .. },
                R::Kill,
            ) => self.kill(ExitCause::Killed, o),
            (Phase::Stopping { .. }, R::Kill) => self.force_kill(o),
            (
                Phase::Backoff { .. } | Phase::Drained { .. } | Phase::Failed | Phase::Exited,
                R::Kill,
            ) => {}

            (Phase::Starting { .. }, R::Drain(to)) => self.drain_when_ready(to, o),
            (Phase::Ready { .. }, R::Drain(to)) => {
                self.drain(Purpose::Operator, now, o);
                self.say_draining(to, o)
            }
            (Phase::Draining { .. }, R::Drain(to)) => {
                self.merge_drain(Purpose::Operator, now, o);
                self.say_draining(to, o)
            }
            (Phase::Stopping { .. } | Phase::Closing { .. }, R::Drain(to)) => {
                self.merge_stopping(Purpose::Operator, Some(to), o)
            }
            (Phase::Backoff { .. }, R::Drain(to)) => self.drain_without_child(to, o),
            (Phase::Drained { .. } | Phase::Failed, R::Drain(to)) => {
                let state = self.phase.name();
                self.say(to, format!("{} is already {state}", self.id), o)
            }
            (Phase::Exited, R::Drain(to)) => self.refuse(to, self.busy("stopped"), o),

            (Phase::Drained { .. } | Phase::Failed, R::Resume(to)) => self.resume(to, o),
            (Phase::Ready { .. } | Phase::Draining { .. }, R::Resume(to)) => {
                let pid = self.pid().map_or_else(|| "?".into(), |p| p.to_string());
                self.refuse(
                    to,
                    format!("{} is not drained (pid {pid} is live)", self.id),
                    o,
                )
            }
            (
                Phase::Starting { .. }
                | Phase::Stopping { .. }
                | Phase::Closing { .. }
                | Phase::Backoff { .. }
                | Phase::Exited,
                R::Resume(to),
            ) => self.refuse(to, self.busy_here(), o),

            (
                Phase::Starting { .. },
                R::Recycle {
                    cause,
                    reason,
                    waiter,
                },
            ) => self.recycle_when_ready(Trigger::new(cause, reason, waiter), o),
            (
                Phase::Ready { .. },
                R::Recycle {
                    cause,
                    reason,
                    waiter,
                },
            ) => self.vet(Trigger::new(cause, reason, waiter), o),
            (
                Phase::Draining { .. },
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
                Phase::Stopping { .. } | Phase::Closing { .. },
                R::Recycle {
                    cause,
                    reason,
                    waiter,
                },
            ) => {
                let trigger = Trigger::new(cause, reason, waiter);
                self.merge_stopping(Purpose::Recycle(trigger), None, o)
            }
            (
                Phase::Backoff { .. } | Phase::Drained { .. } | Phase::Failed | Phase::Exited,
                R::Recycle { waiter, .. },
            ) => {
                if let Some(to) = waiter {
                    self.refuse(to, self.busy_here(), o)
                }
            }

            (Phase::Ready { .. } | Phase::Draining { .. }, R::Cancel { run, waiter }) => {
                o.push(Action::Cancel { run, to: waiter })
            }
            (_, R::Cancel { waiter, .. }) => self.refuse(waiter, self.busy_here(), o),
        }
    }
}
