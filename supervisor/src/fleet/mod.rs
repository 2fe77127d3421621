//! A fleet (DESIGN §10b): several hosts share one PostgreSQL store, and
//! each deployment is owned by exactly one of them at a time through a
//! lease with an epoch. This folder holds the rules and the plumbing; the
//! host's side (starting and stopping deployment tasks as leases come and
//! go) is `crate::host::fleet`.
//!
//! | file | holds |
//! |---|---|
//! | `rules.rs` | the lease and heartbeat rules as pure decisions |

pub mod rules;
