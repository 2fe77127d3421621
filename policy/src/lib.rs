//! Pure decisions for the wfhost supervisor, with an injected clock.
//!
//! Everything here decides; nothing here acts. No I/O, no threads, no timers,
//! no sleeping: every decision takes the current time (`now: Instant`) as an
//! argument, so the supervisor reads its [`Clock`] once per event and the
//! tests drive time by hand, to the millisecond.
//!
//! | module | decides | design |
//! |---|---|---|
//! | [`clock`] | what time it is ([`SystemClock`], [`ManualClock`]) | §11 |
//! | [`drain`] | a drain's purpose and end, and its budget: when it ticks, how much is spent, what an escalation cancels ([`DrainBudget`]) | §4 |
//! | [`steps`] | which steps a child has in flight ([`InFlightSteps`]) | §4 |
//! | [`exit`] | how a child ended ([`ExitCause`], [`ExitStatus`]) | §3 |
//! | [`restart`] | whether and when to restart a crashed child ([`RestartTracker`]) | §3 |
//! | [`recycle`] | whether a child has passed a recycle bound ([`RecycleBounds`]) | §5 |
//! | [`liveness`] | when to ping and when a silent child is hung ([`Liveness`]) | §3 |
//! | [`life`] | a deployment's whole life: phases, inputs, actions ([`Life`]) | §3–§5 |
//! | [`schedule`] | when the clock recycles a child (`recycle.at`, [`schedule::Schedule`]) | §5 |
//! | [`fact`] | the vocabulary of journaled and published facts ([`Fact`]) | §7 |
//! | [`login`] | who may use the console: one-time login tokens and the sessions they open ([`login::Logins`]) | §8 |
//! | [`lease`] | which host of a fleet takes, keeps or hands off which deployment ([`lease::plan`]) | §10b |
//!
//! Every type tolerates every input: transitions that make no sense are
//! no-ops, time arithmetic saturates, and a clock that steps backwards is read
//! as "no time has passed".

#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::arithmetic_side_effects
    )
)]

pub mod backoff;
pub mod clock;
pub mod crew;
pub mod deadline;
pub mod drain;
pub mod exit;
pub mod fact;
mod format;
pub mod item;
pub mod lease;
pub mod life;
pub mod liveness;
pub mod login;
pub mod recycle;
pub mod restart;
pub mod schedule;
pub mod steps;

pub use clock::{Clock, ManualClock, SystemClock};
pub use drain::{
    BudgetMeter, BudgetState, BudgetTurn, DEFAULT_DRAIN_TIMEOUT, DrainBudget, DrainEnd,
    DrainPurpose, DrainStatus, Escalation,
};
pub use exit::{ExitCause, ExitStatus};
pub use fact::Fact;
pub use format::format_duration;
pub use life::DEFAULT_KILL_TIMEOUT;
pub use life::Life;
pub use liveness::{
    DEFAULT_LIVENESS_INTERVAL, DEFAULT_LIVENESS_TIMEOUT, Liveness, MAX_OUTSTANDING_PINGS,
    MIN_LIVENESS_INTERVAL,
};
pub use recycle::{Jitter, RecycleBounds, RecycleReason, Sample};
pub use restart::{RestartDecision, RestartPolicy, RestartTracker};
pub use steps::InFlightSteps;
pub use wfhost_ipc::DrainBehavior;
