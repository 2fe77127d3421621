//! One module per CLI command.

pub mod cancel;
pub mod check_config;
pub mod demo;
pub mod drain;
pub mod events;
pub mod journal;
pub mod keygen;
pub mod kill;
pub mod logs;
pub mod mail;
pub mod man;
pub mod move_to;
pub mod progress;
pub mod recycle;
pub mod reload;
pub mod resume;
pub mod send;
pub mod status;
pub mod stop;
pub mod supervise;
