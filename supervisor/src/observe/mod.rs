//! What operators observe: status (a projection of each deployment's
//! life), the log lines and durable records of facts, Prometheus metrics,
//! and systemd notifications.

pub mod metrics;
pub mod notify;
pub mod record;
pub mod status;
