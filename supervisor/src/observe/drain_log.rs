//! While a drain runs, one log line per deployment every
//! [`EVERY`]: the budget used and left, whether it ticks, and the steps
//! it waits for, so a long graceful stop is never silent between
//! `draining` and its end.

use std::time::{Duration, Instant};

use tracing::info;
use wfhost_policy::drain::BudgetState;

use crate::deployment::Registry;
use crate::human;
use crate::status::Status;

/// How often a running drain is logged.
pub const EVERY: Duration = Duration::from_secs(2);

/// Logs every drain under way, every [`EVERY`], until aborted.
pub async fn run(registry: Registry) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick fires at once: a drain that just began was logged
    // as it began.
    tick.tick().await;
    loop {
        tick.tick().await;
        let handles: Vec<_> = registry
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect();
        let now = Instant::now();
        for h in handles {
            let line = h.with_status(|s| progress(s, now).map(|text| (s.id.clone(), s.pid, text)));
            if let Some((deployment, pid, text)) = line {
                info!(deployment = %deployment, pid = pid.unwrap_or(0), "{text}");
            }
        }
    }
}

/// The line for a deployment whose drain is under way.
pub fn progress(s: &Status, now: Instant) -> Option<String> {
    if !s.drain.active {
        return None;
    }
    let used = s.drain.used_ms(now);
    let left = s.drain.budget_ms().saturating_sub(used);
    let budget = match s.drain.budget_state(now) {
        BudgetState::Running => "running",
        BudgetState::Paused => "paused, only wait steps run",
        BudgetState::Escalated => "spent, signed cancel sent",
        _ => "stopped",
    };
    let purpose = s.drain_purpose.map_or("drain", |p| p.as_str());
    let mut steps: Vec<String> = s
        .steps
        .iter()
        .take(3)
        .map(|st| format!("{} of {} ({})", st.step, st.run, st.drain))
        .collect();
    if s.steps_in_flight > steps.len() {
        steps.push(format!("{} more", s.steps_in_flight - steps.len()));
    }
    let waiting = if steps.is_empty() {
        "no step in flight".to_owned()
    } else {
        format!("in flight: {}", steps.join(", "))
    };
    Some(format!(
        "draining for {purpose}: budget {} used, {} left, {budget}; {waiting}",
        human::ms(used),
        human::ms(left)
    ))
}
