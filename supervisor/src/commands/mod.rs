//! One module per CLI command.

pub mod check_config;
pub mod journal;
pub mod keygen;
pub mod kill;
pub mod status;
pub mod supervise;
