//! What operators observe of the whole host, read across its running
//! deployments: the machine it runs on, Prometheus metrics, the control
//! socket's connections, drain progress in the log, and systemd
//! notifications. (One deployment's status is
//! `status`, kept by its own task; the log line of each fact is
//! `record`.)

pub mod connections;
pub mod drain_log;
pub mod host;
pub mod metrics;
pub mod notify;
