//! Shared machinery of the wfhost benchmarks (DESIGN §10): finding the
//! release binaries, running a real `wfhost supervise` and reading its JSON
//! log, reading `/proc`, summarising samples and printing the result table.
//!
//! The benchmarks themselves live in `benches/` (`harness = false`): each
//! prints its figure beside a reference measured in the same run, the
//! target, and PASS or MISS. Nothing here is a timed test.

pub mod bins;
pub mod control;
pub mod log;
pub mod procs;
pub mod report;
pub mod stats;
pub mod supervisor;

pub use bins::Binaries;
pub use report::{Report, Verdict};
pub use stats::Summary;
