//! A drain (DESIGN §4), as one noun: why a child is drained
//! ([`DrainPurpose`]), how a drain ends ([`DrainEnd`]), and its budget
//! ([`DrainBudget`], `drain/budget.rs`: the steps in flight and the
//! [`BudgetMeter`], `drain/meter.rs`, that ticks while one of cancel
//! behaviour is). When the drain starts and ends, and what its budget
//! running out does, is the machine's (`life/drain.rs`); the driver only
//! feeds the budget the child's step reports and polls it at its deadline.

mod budget;
mod meter;

pub use budget::{BudgetTurn, DrainBudget, DrainStatus, Escalation, MAX_STEPS_IN_FLIGHT};
pub use meter::{BudgetMeter, BudgetState, DEFAULT_DRAIN_TIMEOUT};

/// A drain's purpose, ranked stop > operator > recycle: a stronger one
/// takes over a weaker drain under way (keeping its budget).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum DrainPurpose {
    /// A recycle.
    Recycle,
    /// `wfhost drain`.
    Operator,
    /// The supervisor is stopping.
    Stop,
}

impl DrainPurpose {
    /// The name in status and the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stop => "stop",
            Self::Operator => "operator",
            Self::Recycle => "recycle",
        }
    }
}

/// How a drain ended (the `why` of `drain_ended`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrainEnd {
    /// The child said `Drained` and no step was left.
    Drained,
    /// The child exited (or was killed) before that.
    ChildExited,
    /// A stop or recycle waited `drain_deadline` for it.
    DeadlinePassed,
}

impl DrainEnd {
    /// The words in the journal and the event log.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Drained => "drained",
            Self::ChildExited => "child exited",
            Self::DeadlinePassed => "drain_deadline passed",
        }
    }
}
