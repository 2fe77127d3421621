//! What operators observe: status (a projection of each deployment's
//! life), the host it runs on, the log lines and durable records of facts,
//! Prometheus metrics, drain progress, and systemd notifications.

pub mod drain_log;
pub mod host;
pub mod human;
pub mod metrics;
pub mod notify;
pub mod record;
pub mod status;
