//! Why a scenario failed: what it expected, and what came instead.

use std::fmt;

/// A failed expectation, printed `expected …, got …`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What the scenario waited for.
    pub expected: String,
    /// What the child did instead.
    pub got: String,
}

impl Failure {
    /// A failure expecting `expected` and getting `got`.
    pub fn new(expected: impl Into<String>, got: impl Into<String>) -> Self {
        Self {
            expected: expected.into(),
            got: got.into(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "expected {}, got {}", self.expected, self.got)
    }
}

/// Fails with `expected`/`got` unless `ok`.
pub fn ensure(
    ok: bool,
    expected: impl Into<String>,
    got: impl FnOnce() -> String,
) -> Result<(), Failure> {
    if ok {
        Ok(())
    } else {
        Err(Failure::new(expected, got()))
    }
}
