//! `wfhost-child conformance`: the Rust runtime's conformance child
//! (`docs/conformance.md`), which `wfhost-conformance` plays its scenarios
//! against. It takes mail through the ordinary mail stream and does what
//! each item's JSON payload says, every item on a task of its own so a
//! second item is taken while the first one's steps run:
//!
//! 1. `Custom { kind: "conformance.took", bytes: {"id":"<id>","attempt":N} }`;
//! 2. the payload's `custom` event, if any;
//! 3. its `steps` in order, as steps of run `run` (default `mail-<id>`),
//!    each waiting `ms` or until its token fires; after a cancelled step the
//!    rest are not run;
//! 4. `RunTerminal` and `MailAck` with one outcome: `Cancelled` if a step was
//!    cancelled, else `Failed(fail)` with `fail`, else `Succeeded`; a payload
//!    that is not such JSON is acknowledged `Failed("bad payload: …")`;
//! 5. `RecycleRequest { reason: recycle }` with `recycle`.
//!
//! After a drain or a lease expiry the runtime hands out no more mail; the
//! items in hand finish and the child stays connected until `Shutdown`
//! (exit 0) or the end of the channel (exit 0). A broken channel (an
//! oversized or undecodable frame, a Welcome of another protocol) is exit 1
//! with one line on stderr.

use std::convert::Infallible;
use std::time::Duration;

use serde::Deserialize;
use tokio::task::JoinSet;
use tokio::time::sleep;
use wfhost_child::{CloseReason, DrainBehavior, Mail, Outcome, Runtime, StepError};

/// The `Custom` kind that reports each item taken.
const TOOK: &str = "conformance.took";

/// How long events queued before `Shutdown` get to reach the supervisor.
const FLUSH_ON_SHUTDOWN: Duration = Duration::from_secs(1);

/// One mail item's instructions (every key optional).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Plan {
    run: Option<String>,
    #[serde(default)]
    steps: Vec<StepPlan>,
    fail: Option<String>,
    recycle: Option<String>,
    custom: Option<CustomPlan>,
}

/// One step: its name, drain behaviour and duration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepPlan {
    name: String,
    drain: Drain,
    ms: u64,
    #[serde(default)]
    ignore_cancel: bool,
}

/// A step's drain behaviour as the payload spells it.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Drain {
    Cancel,
    Wait,
}

impl From<Drain> for DrainBehavior {
    fn from(drain: Drain) -> Self {
        match drain {
            Drain::Cancel => Self::Cancel,
            Drain::Wait => Self::Wait,
        }
    }
}

/// A `Custom` event to send: its kind and hex-encoded bytes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CustomPlan {
    kind: String,
    hex: String,
}

/// A parsed payload: the plan, with the custom event's bytes decoded.
struct Item {
    plan: Plan,
    custom: Option<(String, Vec<u8>)>,
}

/// Reads a payload, or says why it is not one.
fn parse(payload: &[u8]) -> Result<Item, String> {
    let mut plan: Plan = serde_json::from_slice(payload).map_err(|e| e.to_string())?;
    let custom = match plan.custom.take() {
        Some(c) => {
            let bytes = hex::decode(&c.hex).map_err(|e| format!("custom.hex {:?}: {e}", c.hex))?;
            Some((c.kind, bytes))
        }
        None => None,
    };
    Ok(Item { plan, custom })
}

/// Runs `wfhost-child conformance` and returns the exit code.
pub async fn run() -> u8 {
    let rt = match Runtime::connect().await {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("wfhost-child conformance: cannot connect to the supervisor: {e}");
            return 2;
        }
    };
    if let Err(e) = rt.ready().await {
        eprintln!("wfhost-child conformance: cannot report Ready: {e}");
        return 1;
    }
    // Kept until exit: dropping the set would abort the items in hand.
    let mut items = JoinSet::new();
    let mut inbox = rt.mail();
    while let Some(mail) = inbox.next().await {
        items.spawn(process(rt.clone(), mail));
        while items.try_join_next().is_some() {}
    }
    // The stream ended: a drain, a lease expiry, or the runtime closing.
    match rt.closed().await {
        CloseReason::Shutdown => {
            let _ = tokio::time::timeout(FLUSH_ON_SHUTDOWN, rt.flush()).await;
            0
        }
        CloseReason::Disconnected => 0,
        CloseReason::Failed(reason) => {
            eprintln!("wfhost-child conformance: the control channel broke: {reason}");
            1
        }
    }
}

/// Does what one item's payload says, then acknowledges it.
async fn process(rt: Runtime, mail: Mail) {
    let id = mail.id();
    let took = format!(r#"{{"id":"{id}","attempt":{}}}"#, mail.attempt());
    // A failed send is the runtime's closure, which `run` sees.
    let _ = rt.custom(TOOK, took.into_bytes()).await;
    let Item { plan, custom } = match parse(mail.payload()) {
        Ok(item) => item,
        Err(reason) => {
            let _ = mail
                .ack(Outcome::Failed(format!("bad payload: {reason}")))
                .await;
            return;
        }
    };
    if let Some((kind, bytes)) = custom {
        let _ = rt.custom(&kind, bytes).await;
    }
    let run = plan.run.unwrap_or_else(|| format!("mail-{id}"));
    let mut cancelled = false;
    for step in &plan.steps {
        if !run_step(&rt, &run, step).await {
            cancelled = true;
            break;
        }
    }
    let outcome = match (cancelled, plan.fail) {
        (true, _) => Outcome::Cancelled,
        (false, Some(reason)) => Outcome::Failed(reason),
        (false, None) => Outcome::Succeeded,
    };
    let _ = rt.run_terminal(&run, outcome.clone()).await;
    let _ = mail.ack(outcome).await;
    if let Some(reason) = plan.recycle {
        let _ = rt.request_recycle(&reason).await;
    }
}

/// Runs one step; `false` when it ended cancelled (or could not be run).
/// A step that ignores its cancellation sleeps on in a task of its own for
/// the full time, while the runtime reports the step cancelled when its
/// token fires.
async fn run_step(rt: &Runtime, run: &str, step: &StepPlan) -> bool {
    let ms = Duration::from_millis(step.ms);
    let ignore = step.ignore_cancel;
    let result = rt
        .step(run, &step.name, step.drain.into(), |_token| async move {
            if ignore {
                let _ = tokio::spawn(sleep(ms)).await;
            } else {
                sleep(ms).await;
            }
            Ok::<_, Infallible>(())
        })
        .await;
    match result {
        Ok(()) => true,
        Err(StepError::Cancelled(_) | StepError::Runtime(_)) => false,
        Err(StepError::Failed(never)) => match never {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_optional_and_steps_read_as_documented() {
        let item = parse(b"{}").unwrap();
        assert!(item.plan.steps.is_empty() && item.custom.is_none());
        let item = parse(
            br#"{"run":"r1","steps":[{"name":"fetch","drain":"cancel","ms":20},
                {"name":"stubborn","drain":"wait","ms":1,"ignore_cancel":true}],
                "fail":"why","recycle":"bloat","custom":{"kind":"progress","hex":"0102"}}"#,
        )
        .unwrap();
        assert_eq!(item.plan.run.as_deref(), Some("r1"));
        assert_eq!(item.plan.steps.len(), 2);
        assert!(matches!(item.plan.steps[0].drain, Drain::Cancel));
        assert!(item.plan.steps[1].ignore_cancel);
        assert_eq!(item.custom, Some(("progress".into(), vec![1, 2])));
    }

    #[test]
    fn what_is_not_such_json_says_why() {
        for (payload, why) in [
            (&b"not json"[..], "expected"),
            (br#"[]"#, "expected struct"),
            (br#"{"stpes":[]}"#, "unknown field"),
            (
                br#"{"steps":[{"name":"s","drain":"later","ms":1}]}"#,
                "unknown variant",
            ),
            (br#"{"custom":{"kind":"k","hex":"zz"}}"#, "custom.hex"),
            (b"\xff", "expected"),
        ] {
            let err = parse(payload).err().expect("refused");
            assert!(err.contains(why), "{err}");
        }
    }
}
