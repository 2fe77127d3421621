//! Every cell of the table: each phase meets each input, and the phase it
//! moves to and the actions it takes are checked against the table below
//! (refusals with their operator-facing words are checked separately).

use std::time::{Duration, Instant};

use super::*;
use crate::fact::Fact;
use crate::recycle::RecycleReason;
use crate::restart::RestartPolicy;

fn settings() -> Settings {
    Settings {
        drain_timeout: Duration::from_secs(10),
        drain_deadline: Duration::from_secs(15),
        ready_timeout: Duration::from_secs(5),
        kill_timeout: Duration::from_secs(3),
        restart: RestartPolicy::default(),
    }
}

/// A short name for each action, for the table.
fn name(a: &Action<u32>) -> String {
    match a {
        Action::Spawn { .. } => "spawn".into(),
        Action::Dispatch => "dispatch".into(),
        Action::Vet => "vet".into(),
        Action::SendDrain { purpose, .. } => format!("send_drain:{}", purpose.as_str()),
        Action::EndDrain { why, .. } => format!("end_drain:{}", why.as_str()),
        Action::Escalate(_) => "escalate".into(),
        Action::Terminate => "terminate".into(),
        Action::Kill(_) => "kill".into(),
        Action::Cancel { .. } => "cancel".into(),
        Action::ReplayMail => "replay".into(),
        Action::Answer { to, answer } => match answer {
            Ok(_) => format!("ok:{to}"),
            Err(_) => format!("err:{to}"),
        },
        Action::Record(f) => f.kind().into(),
        Action::RearmPolicy => "rearm".into(),
        Action::Started => "started".into(),
        Action::Finish => "finish".into(),
    }
}

fn names(actions: &[Action<u32>]) -> String {
    actions.iter().map(name).collect::<Vec<_>>().join(" ")
}

/// A machine driven from its start to `phase`, and the time it is at.
struct At {
    life: Life<u32>,
    now: Instant,
    pid: u32,
}

impl At {
    fn new() -> Self {
        let (life, _) = Life::new("svc", settings());
        Self {
            life,
            now: Instant::now(),
            pid: 100,
        }
    }

    fn on(&mut self, input: Input<u32>) -> Vec<Action<u32>> {
        self.life.on(input, self.now)
    }

    fn later(&mut self, by: Duration) -> &mut Self {
        self.now += by;
        self
    }

    fn spawned(&mut self) -> &mut Self {
        self.pid += 1;
        let pid = self.pid;
        self.on(Input::Spawned {
            pid,
            channel_id: format!("c{pid}"),
        });
        self
    }

    fn ready(&mut self) -> &mut Self {
        self.spawned();
        self.on(Input::Ready);
        self
    }

    fn phase(&self) -> &'static str {
        self.life.phase().name()
    }

    /// Drives a fresh machine to the phase named (`closing` is the
    /// `stopping` of a child that closed its channel).
    fn to(phase: &str) -> Self {
        let mut at = Self::new();
        match phase {
            "starting" => {
                at.spawned();
            }
            "ready" => {
                at.ready();
            }
            "draining" => {
                at.ready().on(Input::Request(Request::Drain(9)));
            }
            "stopping" => {
                at.ready().on(Input::Request(Request::Drain(9)));
                at.on(Input::Drained);
            }
            "closing" => {
                at.ready().on(Input::ChannelClosed);
            }
            "backoff" => {
                // A crash soon after start backs off (the first restart of
                // a streak is at once, the second waits).
                at.ready().later(Duration::from_millis(500));
                at.on(Input::Reaped(ExitStatus::Code(1)));
                at.ready().later(Duration::from_millis(500));
                at.on(Input::Reaped(ExitStatus::Code(1)));
            }
            "drained" => {
                at.ready().on(Input::Request(Request::Drain(9)));
                at.on(Input::Drained);
                at.on(Input::Reaped(ExitStatus::Code(0)));
            }
            "failed" => {
                at.ready();
                for _ in 0..6 {
                    at.later(Duration::from_millis(10));
                    at.on(Input::Reaped(ExitStatus::Code(1)));
                    at.later(Duration::from_secs(1));
                    if at.phase() == "failed" {
                        break;
                    }
                    at.on(Input::Tick);
                    at.ready();
                }
            }
            "exited" => {
                at.ready().on(Input::Request(Request::Stop));
                at.on(Input::Drained);
                at.on(Input::Reaped(ExitStatus::Code(0)));
            }
            other => panic!("no phase {other}"),
        }
        let expected = if phase == "closing" {
            "stopping"
        } else {
            phase
        };
        assert_eq!(at.phase(), expected, "driving to {phase}");
        at
    }
}

/// Each input of the table, by name.
fn input(name: &str) -> Input<u32> {
    match name {
        "spawned" => Input::Spawned {
            pid: 500,
            channel_id: "c500".into(),
        },
        "spawn_failed" => Input::SpawnFailed("no such file".into()),
        "hello" => Input::Hello,
        "ready" => Input::Ready,
        "drained" => Input::Drained,
        "steps_on" => Input::StepsInFlight(true),
        "steps_off" => Input::StepsInFlight(false),
        "recycle_asked" => Input::RecycleAsked("served enough".into()),
        "worked" => Input::Worked,
        "violation" => Input::Misbehaved(Misconduct::Violation("garbage".into())),
        "hung" => Input::Misbehaved(Misconduct::Hung),
        "closed" => Input::ChannelClosed,
        "reaped" => Input::Reaped(ExitStatus::Code(0)),
        "vetted_ok" => Input::Vetted(Ok(None)),
        "vetted_err" => Input::Vetted(Err("command gone".into())),
        "tick" => Input::Tick,
        "budget_spent" => Input::BudgetSpent(Escalation {
            runs: vec!["r".into()],
            at: Instant::now(),
            budget: Duration::from_secs(10),
        }),
        "stop" => Input::Request(Request::Stop),
        "kill" => Input::Request(Request::Kill),
        "drain" => Input::Request(Request::Drain(1)),
        "resume" => Input::Request(Request::Resume(1)),
        "recycle" => Input::Request(Request::Recycle {
            cause: RecycleCause::Operator,
            reason: "because".into(),
            waiter: Some(1),
        }),
        "policy" => Input::Request(Request::Recycle {
            cause: RecycleCause::Bound(RecycleReason::MaxRss),
            reason: "max_rss".into(),
            waiter: None,
        }),
        "cancel" => Input::Request(Request::Cancel {
            run: Some("r".into()),
            waiter: 1,
        }),
        other => panic!("no input {other}"),
    }
}

const PHASES: [&str; 10] = [
    "starting", "ready", "draining", "stopping", "closing", "backoff", "drained", "failed",
    "exited", "vetting",
];

const INPUTS: [&str; 25] = [
    "worked",
    "spawned",
    "spawn_failed",
    "hello",
    "ready",
    "drained",
    "steps_on",
    "steps_off",
    "recycle_asked",
    "violation",
    "hung",
    "closed",
    "reaped",
    "vetted_ok",
    "vetted_err",
    "tick",
    "stop",
    "kill",
    "drain",
    "resume",
    "recycle",
    "policy",
    "cancel",
    "tick_early",
    "budget_spent",
];

/// Applies `input` to a machine in `phase` and returns the new phase and
/// the actions. `tick` comes after every deadline; `tick_early` before any.
fn cell(phase: &str, input_name: &str) -> (String, String) {
    let mut at = if phase == "vetting" {
        let mut at = At::to("ready");
        at.on(input("recycle"));
        at
    } else {
        At::to(phase)
    };
    let actions = match input_name {
        "tick" => {
            at.later(Duration::from_secs(3600));
            at.on(Input::Tick)
        }
        "tick_early" => at.on(Input::Tick),
        name => at.on(input(name)),
    };
    (at.phase().to_owned(), names(&actions))
}

/// Phase, input, the phase after, and the actions taken, for every pair.
/// `vetting` is `ready` with a recycle's successor being checked;
/// `closing` is `stopping` after the child closed its channel.
const TABLE: &[(&str, &str, &str, &str)] = &[
    ("starting", "worked", "starting", ""),
    ("ready", "worked", "ready", ""),
    ("draining", "worked", "draining", ""),
    ("stopping", "worked", "stopping", ""),
    ("closing", "worked", "stopping", ""),
    ("backoff", "worked", "backoff", ""),
    ("drained", "worked", "drained", ""),
    ("failed", "worked", "failed", ""),
    ("exited", "worked", "exited", ""),
    ("vetting", "worked", "ready", ""),
    ("starting", "spawned", "starting", "spawned"),
    (
        "starting",
        "spawn_failed",
        "starting",
        "exited replay restarting spawn",
    ),
    ("starting", "hello", "starting", ""),
    ("starting", "ready", "ready", "ready started dispatch"),
    ("starting", "drained", "starting", ""),
    ("starting", "steps_on", "starting", ""),
    ("starting", "steps_off", "starting", ""),
    ("starting", "recycle_asked", "starting", ""),
    ("starting", "violation", "stopping", "kill"),
    ("starting", "hung", "stopping", "kill"),
    ("starting", "closed", "starting", ""),
    (
        "starting",
        "reaped",
        "starting",
        "exited replay restarting spawn",
    ),
    ("starting", "vetted_ok", "starting", ""),
    ("starting", "vetted_err", "starting", ""),
    ("starting", "tick", "stopping", "kill"),
    ("starting", "stop", "stopping", "terminate"),
    ("starting", "kill", "stopping", "kill"),
    ("starting", "drain", "starting", "ok:1"),
    ("starting", "resume", "starting", "err:1"),
    ("starting", "recycle", "starting", ""),
    ("starting", "policy", "starting", ""),
    ("starting", "cancel", "starting", "err:1"),
    ("starting", "tick_early", "starting", ""),
    ("ready", "spawned", "ready", ""),
    ("ready", "spawn_failed", "ready", ""),
    ("ready", "hello", "ready", ""),
    ("ready", "ready", "ready", ""),
    ("ready", "drained", "ready", ""),
    ("ready", "steps_on", "ready", ""),
    ("ready", "steps_off", "ready", ""),
    ("ready", "recycle_asked", "ready", "vet"),
    ("ready", "violation", "stopping", "kill"),
    ("ready", "hung", "stopping", "kill"),
    ("ready", "closed", "stopping", ""),
    (
        "ready",
        "reaped",
        "starting",
        "exited replay restarting spawn",
    ),
    ("ready", "vetted_ok", "ready", ""),
    ("ready", "vetted_err", "ready", ""),
    ("ready", "tick", "ready", ""),
    ("ready", "stop", "draining", "drain_started send_drain:stop"),
    ("ready", "kill", "stopping", "kill"),
    (
        "ready",
        "drain",
        "draining",
        "drain_started send_drain:operator ok:1",
    ),
    ("ready", "resume", "ready", "err:1"),
    ("ready", "recycle", "ready", "vet"),
    ("ready", "policy", "ready", "vet"),
    ("ready", "cancel", "ready", "cancel"),
    ("ready", "tick_early", "ready", ""),
    ("draining", "spawned", "draining", ""),
    ("draining", "spawn_failed", "draining", ""),
    ("draining", "hello", "draining", ""),
    ("draining", "ready", "draining", ""),
    (
        "draining",
        "drained",
        "stopping",
        "end_drain:drained terminate",
    ),
    ("draining", "steps_on", "draining", ""),
    ("draining", "steps_off", "draining", ""),
    ("draining", "recycle_asked", "draining", ""),
    ("draining", "violation", "stopping", "kill"),
    ("draining", "hung", "stopping", "kill"),
    ("draining", "closed", "stopping", ""),
    (
        "draining",
        "reaped",
        "drained",
        "end_drain:child exited exited replay drained",
    ),
    ("draining", "vetted_ok", "draining", ""),
    ("draining", "vetted_err", "draining", ""),
    ("draining", "tick", "draining", ""),
    ("draining", "stop", "draining", ""),
    ("draining", "kill", "stopping", "kill"),
    ("draining", "drain", "draining", "ok:1"),
    ("draining", "resume", "draining", "err:1"),
    ("draining", "recycle", "draining", "err:1"),
    ("draining", "policy", "draining", ""),
    ("draining", "cancel", "draining", "cancel"),
    ("draining", "tick_early", "draining", ""),
    ("stopping", "spawned", "stopping", ""),
    ("stopping", "spawn_failed", "stopping", ""),
    ("stopping", "hello", "stopping", ""),
    ("stopping", "ready", "stopping", ""),
    ("stopping", "drained", "stopping", ""),
    ("stopping", "steps_on", "stopping", ""),
    ("stopping", "steps_off", "stopping", ""),
    ("stopping", "recycle_asked", "stopping", ""),
    ("stopping", "violation", "stopping", ""),
    ("stopping", "hung", "stopping", ""),
    ("stopping", "closed", "stopping", ""),
    ("stopping", "reaped", "drained", "exited replay drained"),
    ("stopping", "vetted_ok", "stopping", ""),
    ("stopping", "vetted_err", "stopping", ""),
    ("stopping", "tick", "stopping", "kill"),
    ("stopping", "stop", "stopping", ""),
    ("stopping", "kill", "stopping", "kill"),
    ("stopping", "drain", "stopping", "ok:1"),
    ("stopping", "resume", "stopping", "err:1"),
    ("stopping", "recycle", "stopping", "err:1"),
    ("stopping", "policy", "stopping", ""),
    ("stopping", "cancel", "stopping", "err:1"),
    ("stopping", "tick_early", "stopping", ""),
    ("closing", "spawned", "stopping", ""),
    ("closing", "spawn_failed", "stopping", ""),
    ("closing", "hello", "stopping", ""),
    ("closing", "ready", "stopping", ""),
    ("closing", "drained", "stopping", ""),
    ("closing", "steps_on", "stopping", ""),
    ("closing", "steps_off", "stopping", ""),
    ("closing", "recycle_asked", "stopping", ""),
    ("closing", "violation", "stopping", "kill"),
    ("closing", "hung", "stopping", "kill"),
    ("closing", "closed", "stopping", ""),
    (
        "closing",
        "reaped",
        "starting",
        "exited replay restarting spawn",
    ),
    ("closing", "vetted_ok", "stopping", ""),
    ("closing", "vetted_err", "stopping", ""),
    ("closing", "tick", "stopping", "kill"),
    ("closing", "stop", "stopping", ""),
    ("closing", "kill", "stopping", "kill"),
    ("closing", "drain", "stopping", "ok:1"),
    ("closing", "resume", "stopping", "err:1"),
    ("closing", "recycle", "stopping", "err:1"),
    ("closing", "policy", "stopping", ""),
    ("closing", "cancel", "stopping", "err:1"),
    ("closing", "tick_early", "stopping", ""),
    ("backoff", "spawned", "backoff", ""),
    ("backoff", "spawn_failed", "backoff", ""),
    ("backoff", "hello", "backoff", ""),
    ("backoff", "ready", "backoff", ""),
    ("backoff", "drained", "backoff", ""),
    ("backoff", "steps_on", "backoff", ""),
    ("backoff", "steps_off", "backoff", ""),
    ("backoff", "recycle_asked", "backoff", ""),
    ("backoff", "violation", "backoff", ""),
    ("backoff", "hung", "backoff", ""),
    ("backoff", "closed", "backoff", ""),
    ("backoff", "reaped", "backoff", ""),
    ("backoff", "vetted_ok", "backoff", ""),
    ("backoff", "vetted_err", "backoff", ""),
    ("backoff", "tick", "starting", "spawn"),
    ("backoff", "stop", "exited", "finish"),
    ("backoff", "kill", "backoff", ""),
    ("backoff", "drain", "drained", "ok:1 drained"),
    ("backoff", "resume", "backoff", "err:1"),
    ("backoff", "recycle", "backoff", "err:1"),
    ("backoff", "policy", "backoff", ""),
    ("backoff", "cancel", "backoff", "err:1"),
    ("backoff", "tick_early", "backoff", ""),
    ("drained", "spawned", "drained", ""),
    ("drained", "spawn_failed", "drained", ""),
    ("drained", "hello", "drained", ""),
    ("drained", "ready", "drained", ""),
    ("drained", "drained", "drained", ""),
    ("drained", "steps_on", "drained", ""),
    ("drained", "steps_off", "drained", ""),
    ("drained", "recycle_asked", "drained", ""),
    ("drained", "violation", "drained", ""),
    ("drained", "hung", "drained", ""),
    ("drained", "closed", "drained", ""),
    ("drained", "reaped", "drained", ""),
    ("drained", "vetted_ok", "drained", ""),
    ("drained", "vetted_err", "drained", ""),
    ("drained", "tick", "drained", ""),
    ("drained", "stop", "drained", "finish"),
    ("drained", "kill", "drained", ""),
    ("drained", "drain", "drained", "ok:1"),
    ("drained", "resume", "starting", "resumed ok:1 spawn"),
    ("drained", "recycle", "drained", "err:1"),
    ("drained", "policy", "drained", ""),
    ("drained", "cancel", "drained", "err:1"),
    ("drained", "tick_early", "drained", ""),
    ("failed", "spawned", "failed", ""),
    ("failed", "spawn_failed", "failed", ""),
    ("failed", "hello", "failed", ""),
    ("failed", "ready", "failed", ""),
    ("failed", "drained", "failed", ""),
    ("failed", "steps_on", "failed", ""),
    ("failed", "steps_off", "failed", ""),
    ("failed", "recycle_asked", "failed", ""),
    ("failed", "violation", "failed", ""),
    ("failed", "hung", "failed", ""),
    ("failed", "closed", "failed", ""),
    ("failed", "reaped", "failed", ""),
    ("failed", "vetted_ok", "failed", ""),
    ("failed", "vetted_err", "failed", ""),
    ("failed", "tick", "failed", ""),
    ("failed", "stop", "exited", "finish"),
    ("failed", "kill", "failed", ""),
    ("failed", "drain", "failed", "ok:1"),
    ("failed", "resume", "starting", "resumed ok:1 spawn"),
    ("failed", "recycle", "failed", "err:1"),
    ("failed", "policy", "failed", ""),
    ("failed", "cancel", "failed", "err:1"),
    ("failed", "tick_early", "failed", ""),
    ("exited", "spawned", "exited", ""),
    ("exited", "spawn_failed", "exited", ""),
    ("exited", "hello", "exited", ""),
    ("exited", "ready", "exited", ""),
    ("exited", "drained", "exited", ""),
    ("exited", "steps_on", "exited", ""),
    ("exited", "steps_off", "exited", ""),
    ("exited", "recycle_asked", "exited", ""),
    ("exited", "violation", "exited", ""),
    ("exited", "hung", "exited", ""),
    ("exited", "closed", "exited", ""),
    ("exited", "reaped", "exited", ""),
    ("exited", "vetted_ok", "exited", ""),
    ("exited", "vetted_err", "exited", ""),
    ("exited", "tick", "exited", ""),
    ("exited", "stop", "exited", ""),
    ("exited", "kill", "exited", ""),
    ("exited", "drain", "exited", "err:1"),
    ("exited", "resume", "exited", "err:1"),
    ("exited", "recycle", "exited", "err:1"),
    ("exited", "policy", "exited", ""),
    ("exited", "cancel", "exited", "err:1"),
    ("exited", "tick_early", "exited", ""),
    ("vetting", "spawned", "ready", ""),
    ("vetting", "spawn_failed", "ready", ""),
    ("vetting", "hello", "ready", ""),
    ("vetting", "ready", "ready", ""),
    ("vetting", "drained", "ready", ""),
    ("vetting", "steps_on", "ready", ""),
    ("vetting", "steps_off", "ready", ""),
    ("vetting", "recycle_asked", "ready", ""),
    ("vetting", "violation", "stopping", "err:1 kill"),
    ("vetting", "hung", "stopping", "err:1 kill"),
    ("vetting", "closed", "stopping", "err:1"),
    (
        "vetting",
        "reaped",
        "starting",
        "err:1 exited replay restarting spawn",
    ),
    (
        "vetting",
        "vetted_ok",
        "draining",
        "drain_started send_drain:recycle",
    ),
    ("vetting", "vetted_err", "ready", "recycle_refused err:1"),
    ("vetting", "tick", "ready", ""),
    (
        "vetting",
        "stop",
        "draining",
        "err:1 drain_started send_drain:stop",
    ),
    ("vetting", "kill", "stopping", "err:1 kill"),
    (
        "vetting",
        "drain",
        "draining",
        "err:1 drain_started send_drain:operator ok:1",
    ),
    ("vetting", "resume", "ready", "err:1"),
    ("vetting", "recycle", "ready", ""),
    ("vetting", "policy", "ready", ""),
    ("vetting", "cancel", "ready", "cancel"),
    ("vetting", "tick_early", "ready", ""),
    // The budget ran out: while a child lives, its runs are cancelled.
    (
        "starting",
        "budget_spent",
        "starting",
        "escalate drain_escalated",
    ),
    ("ready", "budget_spent", "ready", "escalate drain_escalated"),
    (
        "draining",
        "budget_spent",
        "draining",
        "escalate drain_escalated",
    ),
    (
        "stopping",
        "budget_spent",
        "stopping",
        "escalate drain_escalated",
    ),
    (
        "closing",
        "budget_spent",
        "stopping",
        "escalate drain_escalated",
    ),
    ("backoff", "budget_spent", "backoff", ""),
    ("drained", "budget_spent", "drained", ""),
    ("failed", "budget_spent", "failed", ""),
    ("exited", "budget_spent", "exited", ""),
    (
        "vetting",
        "budget_spent",
        "ready",
        "escalate drain_escalated",
    ),
];

#[test]
fn every_phase_meets_every_input_as_the_table_says() {
    let mut seen = 0;
    for &(phase, input, to, actions) in TABLE {
        assert_eq!(
            cell(phase, input),
            (to.to_owned(), actions.to_owned()),
            "{phase} + {input}"
        );
        seen += 1;
    }
    assert_eq!(
        seen,
        PHASES.len() * INPUTS.len(),
        "every pair is in the table"
    );
    for phase in PHASES {
        for input in INPUTS {
            assert!(
                TABLE.iter().any(|r| r.0 == phase && r.1 == input),
                "{phase} + {input} is missing"
            );
        }
    }
}

/// The answers of `actions`, as `(waiter, Ok text | Err text)`.
fn answers(actions: &[Action<u32>]) -> Vec<(u32, Result<String, String>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Answer { to, answer } => Some((
                *to,
                answer
                    .as_ref()
                    .map(|a| format!("{a:?}"))
                    .map_err(Clone::clone),
            )),
            _ => None,
        })
        .collect()
}

fn facts(actions: &[Action<u32>]) -> Vec<&Fact> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::Record(f) => Some(f),
            _ => None,
        })
        .collect()
}

#[test]
fn a_recycle_checks_drains_stops_respawns_and_answers_with_the_new_pid() {
    let mut at = At::to("ready");
    let old = at.pid;
    let a = at.on(input("recycle"));
    assert_eq!(names(&a), "vet");
    // A second recycle while the first is checked joins it.
    at.on(Input::Request(Request::Recycle {
        cause: RecycleCause::Operator,
        reason: "again".into(),
        waiter: Some(2),
    }));
    let a = at.on(Input::Vetted(Ok(None)));
    assert_eq!(names(&a), "drain_started send_drain:recycle");
    match facts(&a)[0] {
        Fact::DrainStarted {
            purpose, recycle, ..
        } => {
            assert_eq!(*purpose, DrainPurpose::Recycle);
            assert_eq!(recycle, &Some((RecycleCause::Operator, "because".into())));
        }
        other => panic!("{other:?}"),
    }
    at.on(Input::StepsInFlight(true));
    assert_eq!(
        names(&at.on(Input::Drained)),
        "",
        "a step is still in flight"
    );
    let a = at.on(Input::StepsInFlight(false));
    assert_eq!(names(&a), "end_drain:drained terminate");
    let a = at.on(Input::Reaped(ExitStatus::Signal(15)));
    assert_eq!(names(&a), "exited replay spawn");
    match facts(&a)[0] {
        Fact::Exited { cause, pid, .. } => {
            assert_eq!(*pid, old);
            assert_eq!(*cause, ExitCause::Drained(ExitStatus::Signal(15)));
            assert_eq!(cause.describe(), "drained", "a drain's SIGTERM is no news");
        }
        other => panic!("{other:?}"),
    }
    at.spawned();
    let a = at.on(Input::Ready);
    assert_eq!(names(&a), "ready recycled ok:1 ok:2 dispatch");
    let new = at.pid;
    assert_eq!(
        answers(&a),
        [
            (1, Ok(format!("Recycled {{ pid: {new} }}"))),
            (2, Ok(format!("Recycled {{ pid: {new} }}")))
        ]
    );
    match facts(&a)[1] {
        Fact::Recycled {
            old_pid, new_pid, ..
        } => assert_eq!((*old_pid, *new_pid), (Some(old), new)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_refused_recycle_names_the_cause_and_the_child_that_keeps_serving() {
    let mut at = At::to("ready");
    at.on(input("policy"));
    let a = at.on(Input::Vetted(Err("command /x cannot be run".into())));
    assert_eq!(
        names(&a),
        "recycle_refused rearm",
        "a policy recycle asks again"
    );
    at.on(input("recycle"));
    let a = at.on(Input::Vetted(Err("command /x cannot be run".into())));
    assert_eq!(
        answers(&a),
        [(
            1,
            Err(format!(
                "not recycled: command /x cannot be run; svc keeps running on pid {}",
                at.pid
            ))
        )]
    );
    assert_eq!(at.phase(), "ready");
}

#[test]
fn refusals_say_why_and_what_to_do() {
    let cases = [
        (
            "starting",
            "cancel",
            "svc is starting; try again once it is ready",
        ),
        (
            "starting",
            "resume",
            "svc is starting; try again once it is ready",
        ),
        (
            "stopping",
            "cancel",
            "svc is stopping; try again once it is ready",
        ),
        (
            "stopping",
            "recycle",
            "svc is stopping; try again once it is ready",
        ),
        (
            "backoff",
            "recycle",
            "svc is waiting to restart after a crash; try again once it is ready",
        ),
        (
            "drained",
            "recycle",
            "svc is drained; `wfhost resume svc` starts a fresh child; try again once it is ready",
        ),
        (
            "failed",
            "cancel",
            "svc is failed; `wfhost resume svc` starts a fresh child; try again once it is ready",
        ),
        (
            "exited",
            "drain",
            "svc is stopped; try again once it is ready",
        ),
        (
            "draining",
            "recycle",
            "not recycled: svc is being drained (operator)",
        ),
    ];
    for (phase, request, words) in cases {
        let mut at = At::to(phase);
        let a = at.on(input(request));
        assert_eq!(answers(&a), [(1, Err(words.into()))], "{phase} + {request}");
    }
    let mut at = At::to("ready");
    let a = at.on(input("resume"));
    assert_eq!(
        answers(&a),
        [(
            1,
            Err(format!("svc is not drained (pid {} is live)", at.pid))
        )]
    );
}

#[test]
fn operator_answers_tell_what_happens_next() {
    let mut at = At::to("ready");
    let a = at.on(input("drain"));
    assert_eq!(
        answers(&a),
        [(
            1,
            Ok(format!(
                "Said(\"draining svc (pid {}) under a 10s budget; it stays drained until `wfhost resume`\")",
                at.pid
            ))
        )]
    );
    let mut at = At::to("starting");
    let a = at.on(input("drain"));
    assert_eq!(
        answers(&a),
        [(
            1,
            Ok("Said(\"svc will drain as soon as its new child is ready\")".into())
        )]
    );
    let mut at = At::to("backoff");
    let a = at.on(input("drain"));
    assert_eq!(
        answers(&a),
        [(
            1,
            Ok("Said(\"svc has no live child; it is drained now\")".into())
        )]
    );
    let mut at = At::to("drained");
    let a = at.on(input("resume"));
    assert_eq!(
        answers(&a),
        [(1, Ok("Said(\"svc is starting a fresh child\")".into()))]
    );
}

#[test]
fn what_a_starting_child_was_asked_is_done_once_it_is_ready_or_answered_if_it_never_is() {
    // A recycle asked while starting waits for the child, then runs.
    let mut at = At::to("starting");
    at.on(input("recycle"));
    let a = at.on(Input::Ready);
    assert_eq!(names(&a), "ready started dispatch vet");
    // If the child never becomes ready, the waiter hears why.
    let mut at = At::to("starting");
    at.on(input("recycle"));
    at.on(Input::Hello);
    at.later(Duration::from_secs(6));
    assert_eq!(names(&at.on(Input::Tick)), "kill");
    let a = at.on(Input::Reaped(ExitStatus::Signal(9)));
    assert_eq!(
        answers(&a),
        [(
            1,
            Err(format!(
                "not recycled: the new child (pid {}) of svc never became ready: no Ready within ready_timeout",
                at.pid
            ))
        )]
    );
    assert_eq!(at.phase(), "starting", "restarted like a crash");
    // A drain asked while starting is honoured even when the start fails.
    let mut at = At::to("starting");
    at.on(input("drain"));
    at.on(Input::Reaped(ExitStatus::Code(2)));
    assert_eq!(at.phase(), "drained");
    // A stop while starting stops it; a pending recycle hears why.
    let mut at = At::to("starting");
    at.on(input("recycle"));
    assert_eq!(names(&at.on(input("stop"))), "terminate");
    let a = at.on(Input::Reaped(ExitStatus::Code(0)));
    assert_eq!(at.phase(), "exited");
    assert!(names(&a).ends_with("finish"), "{}", names(&a));
    assert!(
        matches!(&answers(&a)[0].1, Err(e) if e.ends_with("never became ready: stopped: exit status 0")),
        "{a:?}"
    );
}

#[test]
fn a_stronger_purpose_takes_over_a_drain_and_keeps_the_earlier_deadline() {
    let mut at = At::to("ready");
    at.on(input("recycle"));
    at.on(Input::Vetted(Ok(None)));
    at.later(Duration::from_secs(5));
    // An operator drain takes over: no deadline, the recycle is refused.
    let a = at.on(input("drain"));
    assert!(
        matches!(&answers(&a)[0], (1, Err(e)) if e == "not recycled: svc is being drained (operator)")
    );
    assert_eq!(at.life.deadline(), None);
    // A stop takes over from the operator: a deadline again.
    at.on(input("stop"));
    let deadline = at
        .life
        .deadline()
        .expect("a stop waits at most drain_deadline");
    assert_eq!(deadline, at.now + Duration::from_secs(15));
    assert_eq!(at.life.phase().purpose(), Some(DrainPurpose::Stop));
    at.later(Duration::from_secs(15));
    assert_eq!(
        names(&at.on(Input::Tick)),
        "end_drain:drain_deadline passed terminate"
    );
    at.later(Duration::from_secs(3));
    assert_eq!(
        names(&at.on(Input::Tick)),
        "kill",
        "SIGKILL after kill_timeout"
    );
    at.on(Input::Reaped(ExitStatus::Signal(9)));
    assert_eq!(at.phase(), "exited");
}

#[test]
fn exit_causes_are_typed_and_a_kill_is_not_a_crash() {
    let cause_of = exit_cause;
    let mut at = At::to("ready");
    at.on(input("kill"));
    let a = at.on(Input::Reaped(ExitStatus::Signal(9)));
    assert_eq!(cause_of(&a), ExitCause::Killed);
    assert_eq!(cause_of(&a).describe(), "killed by an operator");
    let mut at = At::to("ready");
    let a = at.on(Input::Reaped(ExitStatus::Code(3)));
    assert_eq!(
        cause_of(&a).describe(),
        "exited unexpectedly: exit status 3"
    );
    let mut at = At::to("ready");
    at.on(input("hung"));
    assert_eq!(cause_of(&at.on(input("reaped"))), ExitCause::Hung);
    // A child that closes its channel gets kill_timeout to exit.
    let mut at = At::to("ready");
    at.on(Input::ChannelClosed);
    at.later(Duration::from_secs(3));
    assert_eq!(names(&at.on(Input::Tick)), "kill");
    assert_eq!(
        cause_of(&at.on(input("reaped"))),
        ExitCause::Violation("closed its control channel but did not exit".into())
    );
}

#[test]
fn crashes_back_off_then_fail_and_a_resume_starts_afresh() {
    let mut at = At::to("ready");
    let mut delays = Vec::new();
    loop {
        at.later(Duration::from_millis(10));
        let a = at.on(Input::Reaped(ExitStatus::Code(1)));
        match facts(&a)
            .iter()
            .find(|f| matches!(f, Fact::Restarting { .. } | Fact::Failed { .. }))
        {
            Some(Fact::Restarting { delay, .. }) => delays.push(*delay),
            Some(Fact::Failed { restarts, .. }) => {
                assert_eq!(*restarts, 6);
                assert!(names(&a).ends_with("started"), "systemd stops waiting");
                break;
            }
            other => panic!("{other:?}"),
        }
        if at.phase() == "backoff" {
            at.later(Duration::from_secs(1));
            at.on(Input::Tick);
        }
        at.ready();
    }
    assert_eq!(
        delays,
        [0, 100, 200, 400, 800].map(Duration::from_millis),
        "the first restart of a streak is at once"
    );
    assert_eq!(at.phase(), "failed");
    at.on(input("resume"));
    at.ready();
    at.later(Duration::from_millis(10));
    at.on(Input::Reaped(ExitStatus::Code(1)));
    assert_eq!(at.phase(), "starting", "the history was forgotten");
}

#[test]
fn a_stop_of_a_child_killed_for_misconduct_is_not_lost() {
    let mut at = At::to("ready");
    at.on(input("violation"));
    at.on(input("stop"));
    at.on(input("reaped"));
    assert_eq!(at.phase(), "exited");
}

#[test]
fn a_child_asking_to_be_recycled_again_and_again_is_slowed_then_failed() {
    let mut at = At::to("ready");
    let mut delays = Vec::new();
    loop {
        at.later(Duration::from_millis(10));
        at.on(Input::RecycleAsked("again".into()));
        at.on(Input::Vetted(Ok(None)));
        at.on(Input::Drained);
        let a = at.on(Input::Reaped(ExitStatus::Code(0)));
        if let Some(Fact::Failed { last, .. }) = facts(&a)
            .into_iter()
            .find(|f| matches!(f, Fact::Failed { .. }))
        {
            assert_eq!(last, "the child asked to be recycled 6 times within 1m");
            break;
        }
        match facts(&a).into_iter().find_map(|f| match f {
            Fact::RecycleDelayed { delay, .. } => Some(*delay),
            _ => None,
        }) {
            Some(delay) => {
                assert_eq!(at.phase(), "backoff");
                delays.push(delay);
                at.later(delay);
                assert_eq!(names(&at.on(Input::Tick)), "spawn");
            }
            None => {
                assert_eq!(at.phase(), "starting", "{}", names(&a));
                delays.push(Duration::ZERO);
            }
        }
        at.ready();
    }
    assert_eq!(delays, [0, 100, 200, 400, 800].map(Duration::from_millis));
    assert_eq!(at.phase(), "failed");
    // A child that works between its requests is never slowed.
    let mut at = At::to("ready");
    for _ in 0..10 {
        at.later(Duration::from_millis(10));
        at.on(Input::Worked);
        at.on(Input::RecycleAsked("served enough".into()));
        at.on(Input::Vetted(Ok(None)));
        at.on(Input::Drained);
        let a = at.on(Input::Reaped(ExitStatus::Code(0)));
        assert_eq!(names(&a), "exited replay spawn");
        at.ready();
    }
}

/// The cause an `exited` fact among `a` carries.
fn exit_cause(a: &[Action<u32>]) -> ExitCause {
    facts(a)
        .into_iter()
        .find_map(|f| match f {
            Fact::Exited { cause, .. } => Some(cause.clone()),
            _ => None,
        })
        .expect("an exited fact")
}

#[test]
fn an_exit_that_ends_a_drain_is_drained_not_a_crash() {
    // Stopped with SIGTERM once it drained: no exit status to report.
    let mut at = At::to("stopping");
    let a = at.on(Input::Reaped(ExitStatus::Signal(15)));
    assert_eq!(exit_cause(&a).describe(), "drained");
    assert_eq!(exit_cause(&a).kind(), "drained");
    let mut at = At::to("stopping");
    // A wrapper passes its command's SIGTERM on as 128+15.
    assert_eq!(
        exit_cause(&at.on(Input::Reaped(ExitStatus::Code(143)))).describe(),
        "drained"
    );
    // Exiting by itself while draining (say, after a stop's drain) is the
    // drain's end too; an unusual status is kept in words.
    for purpose in ["drain", "stop"] {
        let mut at = At::to("ready");
        at.on(input(purpose));
        let a = at.on(Input::Reaped(ExitStatus::Code(137)));
        assert_eq!(
            exit_cause(&a).describe(),
            "drained (exit status 137)",
            "{purpose}"
        );
        assert!(
            !names(&a).contains("restarting"),
            "{purpose}: {}",
            names(&a)
        );
    }
    // A child that closes its channel while draining, then exits.
    let mut at = At::to("draining");
    at.on(Input::ChannelClosed);
    assert_eq!(exit_cause(&at.on(input("reaped"))).describe(), "drained");
    // Past drain_deadline it is stopped, which is not a drain.
    let mut at = At::to("ready");
    at.on(input("stop"));
    at.later(Duration::from_secs(16));
    assert_eq!(
        names(&at.on(Input::Tick)),
        "end_drain:drain_deadline passed terminate"
    );
    let cause = exit_cause(&at.on(Input::Reaped(ExitStatus::Signal(15))));
    assert_eq!(cause.describe(), "stopped: killed by signal 15 (SIGTERM)");
    // A crash when nobody asked is still one.
    let mut at = At::to("ready");
    let cause = exit_cause(&at.on(Input::Reaped(ExitStatus::Code(143))));
    assert_eq!(cause.describe(), "exited unexpectedly: exit status 143");
}

#[test]
fn a_child_that_never_says_hello_is_named_as_no_wfhost_child() {
    let hint = "it never sent a Hello on fd 3, so it does not speak the wfhost protocol";
    // It exits at once, runs out of ready_timeout, or closes fd 3.
    let mut at = At::to("starting");
    let cause = exit_cause(&at.on(Input::Reaped(ExitStatus::Code(2))));
    assert!(
        matches!(&cause, ExitCause::Silent(inner) if **inner == ExitCause::Exited(ExitStatus::Code(2)))
    );
    assert_eq!(cause.kind(), "exited", "the kind stays the inner one");
    let text = cause.describe();
    assert!(
        text.starts_with("exited unexpectedly: exit status 2; "),
        "{text}"
    );
    assert!(
        text.contains(hint) && text.contains("wfhost-child\", \"exec\", \"--\""),
        "{text}"
    );
    let mut at = At::to("starting");
    at.later(Duration::from_secs(6));
    at.on(Input::Tick);
    let cause = exit_cause(&at.on(input("reaped")));
    assert!(
        cause
            .describe()
            .starts_with("no Ready within ready_timeout; it never sent a Hello"),
        "{cause:?}"
    );
    let mut at = At::to("starting");
    at.on(input("violation"));
    let cause = exit_cause(&at.on(input("reaped")));
    assert!(cause.is_violation(), "{cause:?}");
    assert!(cause.describe().contains(hint), "{cause:?}");
    // One that said Hello speaks the protocol: no hint.
    let mut at = At::to("starting");
    at.on(Input::Hello);
    at.later(Duration::from_secs(6));
    at.on(Input::Tick);
    assert_eq!(exit_cause(&at.on(input("reaped"))), ExitCause::NotReady);
    // Nor for a stop or a kill, which say who ended it.
    let mut at = At::to("starting");
    at.on(input("kill"));
    assert_eq!(exit_cause(&at.on(input("reaped"))), ExitCause::Killed);
}

#[test]
fn every_exit_cause_has_a_brief_form_for_tables() {
    let silent = ExitCause::Silent(Box::new(ExitCause::NotReady));
    for (cause, brief) in [
        (ExitCause::Drained(ExitStatus::Signal(15)), "drained"),
        (
            ExitCause::Drained(ExitStatus::Code(137)),
            "drained: exit 137",
        ),
        (ExitCause::Exited(ExitStatus::Code(3)), "crashed: exit 3"),
        (
            ExitCause::Exited(ExitStatus::Signal(11)),
            "crashed: SIGSEGV",
        ),
        (ExitCause::Stopped(ExitStatus::Signal(15)), "stopped"),
        (
            ExitCause::Stopped(ExitStatus::Signal(9)),
            "stopped: SIGKILL",
        ),
        (ExitCause::Killed, "killed by operator"),
        (ExitCause::SpawnFailed("x".into()), "spawn failed"),
        (silent, "not a wfhost child"),
    ] {
        assert_eq!(cause.brief(), brief, "{cause:?}");
        assert!(brief.len() <= 20, "{brief} fits a column");
    }
}
