//! The Prometheus text exposition (version 0.0.4) of every deployment.

use std::fmt::{Display, Write as _};
use std::time::Instant;

use crate::observe::host::Host;
use crate::shared::health::StoreView;
use crate::status::{State, Status};
use crate::store::MailCounts;

/// Every state, in the order the `wfhost_deployment_state` family lists them.
pub(super) const STATES: [State; 8] = [
    State::Starting,
    State::Ready,
    State::Draining,
    State::Stopping,
    State::Exited,
    State::Backoff,
    State::Failed,
    State::Drained,
];

/// Builds the exposition text family by family.
#[derive(Default)]
struct Exposition {
    out: String,
}

impl Exposition {
    /// Starts a family: its `# HELP` and `# TYPE` lines.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}");
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    /// One sample of the current family.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (label, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{label}=\"{}\"", escape_label(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// A label value escaped per the exposition format: `\`, `"` and newline.
pub(super) fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// Milliseconds as seconds, exactly as far as f64 allows.
fn seconds(ms: u64) -> f64 {
    ms as f64 / 1000.0
}

/// The exposition text for `snapshots` (each deployment with its mail
/// counts) and the `host` as of `now`. Gauges with nothing to measure (no
/// child, no RSS sample yet, no host facts) are left out rather than
/// reported as zero.
pub fn render(snapshots: &[(Status, MailCounts)], host: Option<&Host>, now: Instant) -> String {
    let mut e = Exposition::default();
    if let Some(h) = host {
        host_families(&mut e, h);
    }
    child_families(&mut e, snapshots, now);
    restart_and_recycle_families(&mut e, snapshots);
    drain_families(&mut e, snapshots, now);
    mail_families(&mut e, snapshots);
    fault_families(&mut e, snapshots);
    e.out
}

/// The live child of each deployment: its memory, its uptime, and the
/// deployment's state.
fn child_families(e: &mut Exposition, snapshots: &[(Status, MailCounts)], now: Instant) {
    let name = "wfhost_child_rss_bytes";
    e.family(
        name,
        "gauge",
        "Resident memory of the child's process tree at the last policy check.",
    );
    for (s, _) in snapshots {
        if let Some(rss) = s.rss_bytes() {
            e.sample(name, &[("deployment", &s.id)], rss);
        }
    }

    let name = "wfhost_child_uptime_seconds";
    e.family(name, "gauge", "Time since the live child was spawned.");
    for (s, _) in snapshots {
        if let Some(started) = s.started_at {
            let ms = now.saturating_duration_since(started).as_millis() as u64;
            e.sample(name, &[("deployment", &s.id)], seconds(ms));
        }
    }

    let name = "wfhost_deployment_state";
    e.family(
        name,
        "gauge",
        "1 for the deployment's current state, 0 for the others.",
    );
    for (s, _) in snapshots {
        for state in STATES {
            let value = u8::from(s.state == state);
            e.sample(
                name,
                &[("deployment", &s.id), ("state", state.as_str())],
                value,
            );
        }
    }
}

/// What each deployment's children went through: restarts, and
/// recycles by origin and by reason.
fn restart_and_recycle_families(e: &mut Exposition, snapshots: &[(Status, MailCounts)]) {
    let name = "wfhost_restarts_total";
    e.family(
        name,
        "counter",
        "Restarts after unexpected child exits since the supervisor started.",
    );
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], s.restarts);
    }

    let name = "wfhost_recycles_total";
    e.family(
        name,
        "counter",
        "Completed recycles by origin (policy, operator, self).",
    );
    for (s, _) in snapshots {
        let r = s.recycles;
        for (origin, n) in [
            ("policy", r.policy),
            ("operator", r.operator),
            ("self", r.self_),
        ] {
            e.sample(name, &[("deployment", &s.id), ("origin", origin)], n);
        }
    }

    let name = "wfhost_recycles_by_reason_total";
    e.family(
        name,
        "counter",
        "Completed recycles by reason: the bound passed for policy recycles, else the origin.",
    );
    for (s, _) in snapshots {
        for (reason, n) in &s.recycle_reasons {
            e.sample(name, &[("deployment", &s.id), ("reason", reason)], n);
        }
    }
}

/// Each deployment's drain: under way, its budget used and in force,
/// and the budgets that escalated.
fn drain_families(e: &mut Exposition, snapshots: &[(Status, MailCounts)], now: Instant) {
    let name = "wfhost_drain_active";
    e.family(name, "gauge", "1 while a drain is under way.");
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], u8::from(s.drain.active));
    }

    let name = "wfhost_drain_budget_used_seconds";
    e.family(
        name,
        "gauge",
        "Drain budget used by the current or last drain.",
    );
    for (s, _) in snapshots {
        e.sample(
            name,
            &[("deployment", &s.id)],
            seconds(s.drain.used_ms(now)),
        );
    }

    let name = "wfhost_drain_budget_seconds";
    e.family(name, "gauge", "The drain budget in force.");
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], seconds(s.drain.budget_ms()));
    }

    let name = "wfhost_drain_escalations_total";
    e.family(
        name,
        "counter",
        "Drain budgets that ran out and escalated to a signed cancel.",
    );
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], s.escalations);
    }
}

/// Each deployment's mail in the store, live and dead.
fn mail_families(e: &mut Exposition, snapshots: &[(Status, MailCounts)]) {
    let name = "wfhost_mail";
    e.family(
        name,
        "gauge",
        "Mail items in the durable store by state (inbox, processing, done, interrupted).",
    );
    for (s, mail) in snapshots {
        for (state, n) in [
            ("inbox", mail.inbox),
            ("processing", mail.processing),
            ("done", mail.done),
            ("interrupted", mail.interrupted),
        ] {
            e.sample(name, &[("deployment", &s.id), ("state", state)], n);
        }
    }

    let name = "wfhost_mail_working";
    e.family(
        name,
        "gauge",
        "Mail items a child's handler has started and not finished (the rest of processing waits in the child).",
    );
    for (s, mail) in snapshots {
        e.sample(name, &[("deployment", &s.id)], mail.working);
    }

    let name = "wfhost_questions_open";
    e.family(
        name,
        "gauge",
        "Questions items' handlers asked a person, waiting for an answer.",
    );
    for (s, mail) in snapshots {
        e.sample(name, &[("deployment", &s.id)], mail.questions_open);
    }

    let name = "wfhost_question_oldest_age_seconds";
    e.family(
        name,
        "gauge",
        "How long the oldest open question has waited for an answer (0: none open).",
    );
    let now = crate::clock::unix_ms();
    for (s, mail) in snapshots {
        let age = mail
            .oldest_question_at_ms
            .map_or(0, |at| now.saturating_sub(at) / 1000);
        e.sample(name, &[("deployment", &s.id)], age);
    }

    let name = "wfhost_mail_dead";
    e.family(
        name,
        "gauge",
        "Mail quarantined after max_deliveries failed deliveries, waiting for `wfhost mail retry` or `purge`.",
    );
    for (s, mail) in snapshots {
        e.sample(name, &[("deployment", &s.id)], mail.dead);
    }
}

/// What went wrong with each deployment's children: protocol
/// violations, and cancels the journal has not accepted yet.
fn fault_families(e: &mut Exposition, snapshots: &[(Status, MailCounts)]) {
    let name = "wfhost_protocol_violations_total";
    e.family(
        name,
        "counter",
        "Children killed for breaking the control protocol.",
    );
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], s.violations);
    }

    let name = "wfhost_cancels_pending";
    e.family(
        name,
        "gauge",
        "Signed cancels waiting for the journal to accept them.",
    );
    for (s, _) in snapshots {
        e.sample(name, &[("deployment", &s.id)], s.cancels_pending);
    }
}

/// The host's gauges: what an operator checks first when recycles pile up.
fn host_families(e: &mut Exposition, h: &Host) {
    for (name, help, value) in [
        (
            "wfhost_host_cores",
            "Logical CPUs of the host (what the load average compares with).",
            h.cores as f64,
        ),
        (
            "wfhost_host_memory_total_bytes",
            "Memory installed on the host.",
            h.memory_total_bytes as f64,
        ),
        (
            "wfhost_host_memory_available_bytes",
            "Memory available to new work on the host (MemAvailable).",
            h.memory_available_bytes as f64,
        ),
        (
            "wfhost_supervisor_rss_bytes",
            "Resident memory of the supervisor process itself.",
            h.supervisor_rss_bytes as f64,
        ),
    ] {
        e.family(name, "gauge", help);
        e.sample(name, &[], value);
    }
    let name = "wfhost_host_load";
    e.family(
        name,
        "gauge",
        "Load average of the host over the window (1m, 5m, 15m).",
    );
    for (window, value) in ["1m", "5m", "15m"].into_iter().zip(h.load) {
        e.sample(name, &[("window", window)], value);
    }
}

/// How the store's writes share commits: group commits and the writes
/// they carried, since start.
pub fn grouping((commits, writes): (u64, u64)) -> String {
    counters(&[
        (
            "wfhost_store_group_commits_total",
            "Durable commits of grouped writes (mail accepted, taken, acknowledged; events).",
            commits,
        ),
        (
            "wfhost_store_grouped_writes_total",
            "Grouped writes committed; divided by wfhost_store_group_commits_total, the writes one commit carries.",
            writes,
        ),
    ])
}

/// The control socket's connections and the requests they carried.
pub fn control((connections, requests): (u64, u64)) -> String {
    counters(&[
        (
            "wfhost_control_connections_total",
            "Control-socket connections admitted (peer credentials checked).",
            connections,
        ),
        (
            "wfhost_control_requests_total",
            "Control requests read; divided by wfhost_control_connections_total, the requests one connection carries.",
            requests,
        ),
    ])
}

/// Process-wide counters without labels: (name, help, value) each.
fn counters(each: &[(&str, &str, u64)]) -> String {
    let mut e = Exposition::default();
    for &(name, help, value) in each {
        e.family(name, "counter", help);
        e.sample(name, &[], value);
    }
    e.out
}

/// The store's gauges at `now_ms` (Unix milliseconds): whether it takes
/// writes, for how long it has refused, and what waits for it.
pub fn store(view: &StoreView, now_ms: u64) -> String {
    let mut e = Exposition::default();
    let name = "wfhost_store_takes_writes";
    e.family(
        name,
        "gauge",
        "1 while the store takes every write, 0 while it refuses some (see wfhost status: store).",
    );
    e.sample(name, &[], u8::from(view.takes_writes));
    let name = "wfhost_store_refusing_seconds";
    e.family(
        name,
        "gauge",
        "How long the store has refused writes (0 while it takes them).",
    );
    let refusing = view
        .refusing_since_ms
        .map_or(0, |since| now_ms.saturating_sub(since));
    e.sample(name, &[], seconds(refusing));
    let name = "wfhost_store_waiting";
    e.family(
        name,
        "gauge",
        "Writes waiting for the store to take them: mail acks, journal records, events.",
    );
    let w = &view.waiting;
    for (what, n) in [
        ("acks", w.acks),
        ("journal_records", w.journal_records),
        ("events", w.events),
    ] {
        e.sample(name, &[("what", what)], n);
    }
    e.out
}
