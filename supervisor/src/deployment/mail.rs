//! The supervisor's side of a mail item's life (docs/design.md §6), in
//! the order an item meets it. The rules (when an item may be taken, what
//! its holder's end does to it, what a cancel does) are
//! `wfhost_policy::item`; this folder holds the state and the store I/O
//! they drive. The deployment's driver calls in from its two mail turns
//! (`driver/inbox.rs`: deliver and write) and from what a child says
//! (`driver/arrive.rs`: started, done, a cancel's verdict).
//!
//! 1. [`spread`]: which replica gets how much of the inbox's head.
//! 2. [`window`]: how much one child holds in flight.
//! 3. [`deadlines`]: each held item's deadline, counted from its first
//!    delivery.
//! 4. [`verdicts`]: cancels of one item awaiting the child's verdict.
//! 5. [`questions`]: what a child holds and started, and its handlers'
//!    questions to a person.
//! 6. [`writes`]: what the deployment owes the store (starts, ends with
//!    results, questions, give-backs, replays), in order, retried until
//!    it lands.
//! 7. [`settle`]: those writes in the store, and a gone child's mail
//!    replayed.

pub mod deadlines;
pub mod questions;
pub mod settle;
pub mod spread;
pub mod verdicts;
pub mod window;
pub mod writes;
