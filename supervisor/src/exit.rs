//! Exit codes every command uses (DESIGN §8).

/// The operation succeeded.
pub const OK: u8 = 0;
/// The operation failed.
pub const FAILED: u8 = 1;
/// Usage or configuration error.
pub const USAGE: u8 = 2;
/// The supervisor could not be reached.
pub const UNREACHABLE: u8 = 3;
