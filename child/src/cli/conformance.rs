//! `wfhost-child conformance`: the Rust runtime's conformance child
//! (`docs/conformance.md`), which `wfhost-conformance` plays its scenarios
//! against. It takes mail through the ordinary mail stream and does what
//! each item's JSON payload says, every item on a task of its own so a
//! second item is taken while the first one's steps run:
//!
//! 0. the item is started as the payload says (`"cancellable": false`
//!    declares a handler that cannot be cancelled; its run is `run`, default
//!    `mail-<id>`): in protocol 3 the runtime sends `MailStarted`;
//! 1. `Custom { kind: "conformance.took", bytes: {"id":"<id>","attempt":N} }`;
//! 2. the payload's `custom` event, if any;
//! 3. its `steps` in order, as steps of its run, each waiting `ms` or until
//!    its token fires; after a cancelled step the rest are not run;
//! 4. `RunTerminal` and the item's end with one outcome: `Cancelled` if a
//!    step was cancelled or the item's own cancel fired, else `Failed(fail)`
//!    with `fail`, else `Succeeded`; in protocol 3 `MailDone` with the
//!    handler's result (`result_hex`, or `result_size` bytes of `r`, or
//!    nothing), in protocol 2 `MailAck`; a payload that is not such JSON
//!    ends `Failed("bad payload: …")`;
//! 5. `RecycleRequest { reason: recycle }` with `recycle`.
//!
//! After a drain or a lease expiry the runtime hands out no more mail; the
//! items in hand finish and the child stays connected until `Shutdown`
//! (exit 0) or the end of the channel (exit 0). A broken channel (an
//! oversized or undecodable frame, a Welcome of another protocol) is exit 1
//! with one line on stderr. `--protocol 2` holds it to protocol 2 whatever
//! the supervisor offers.

use std::convert::Infallible;
use std::time::Duration;

use serde::Deserialize;
use tokio::task::JoinSet;
use tokio::time::sleep;
use wfhost_child::{
    CloseReason, DrainBehavior, Mail, Options, Outcome, Runtime, RuntimeError, Start, StepError,
};

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
    result_hex: Option<String>,
    result_size: Option<usize>,
    cancellable: Option<bool>,
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

/// The most `result_size` may ask for: more than any frame holds.
const MAX_RESULT_SIZE: usize = 128 << 20;

/// A parsed payload: the plan, with the custom event's and the result's
/// bytes decoded.
struct Item {
    plan: Plan,
    custom: Option<(String, Vec<u8>)>,
    result: Vec<u8>,
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
    let result = match (plan.result_hex.take(), plan.result_size) {
        (Some(text), _) => hex::decode(&text).map_err(|e| format!("result_hex {text:?}: {e}"))?,
        (None, Some(size)) if size > MAX_RESULT_SIZE => {
            return Err(format!("result_size {size} is above {MAX_RESULT_SIZE}"));
        }
        (None, Some(size)) => vec![b'r'; size],
        (None, None) => Vec::new(),
    };
    Ok(Item {
        plan,
        custom,
        result,
    })
}

/// How an item is started: its run and whether it can be cancelled, as
/// its payload says (a payload that does not parse: the defaults; it ends
/// `Failed` at once).
fn start_of(mail: &Mail) -> Start {
    let Ok(plan) = serde_json::from_slice::<Plan>(mail.payload()) else {
        return Start::new();
    };
    let start = Start::new().cancellable(plan.cancellable.unwrap_or(true));
    match plan.run {
        Some(run) => start.run(run),
        None => start,
    }
}

/// Runs `wfhost-child conformance`, speaking at most protocol `newest`,
/// and returns the exit code.
pub async fn run(newest: u32) -> u8 {
    let options = Options::default().speaking_at_most(newest);
    let rt = match Runtime::connect_as(options).await {
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
    while let Some(mail) = inbox.next_with(start_of).await {
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

/// Does what one item's payload says, then ends it.
async fn process(rt: Runtime, mail: Mail) {
    let id = mail.id();
    let took = format!(r#"{{"id":"{id}","attempt":{}}}"#, mail.attempt());
    // A failed send is the runtime's closure, which `run` sees.
    let _ = rt.custom(TOOK, took.into_bytes()).await;
    let Item {
        plan,
        custom,
        result,
    } = match parse(mail.payload()) {
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
    let run = mail.run().to_owned();
    let mut cancelled = false;
    for step in &plan.steps {
        if mail.token().is_cancelled() || !run_step(&rt, &run, step).await {
            cancelled = true;
            break;
        }
    }
    let outcome = match (cancelled || mail.token().is_cancelled(), plan.fail) {
        (true, _) => Outcome::Cancelled,
        (false, Some(reason)) => Outcome::Failed(reason),
        (false, None) => Outcome::Succeeded,
    };
    let _ = rt.run_terminal(&run, outcome.clone()).await;
    match mail.done(outcome, result).await {
        Ok(()) | Err(RuntimeError::Closed(_)) => {}
        // Told to the application: reported Failed instead.
        Err(e) => eprintln!("wfhost-child conformance: mail {id}: {e}"),
    }
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
        assert!(item.result.is_empty());
        let item =
            parse(br#"{"result_hex":"00ff800a","result_size":3,"cancellable":false}"#).unwrap();
        assert_eq!(item.result, [0x00, 0xff, 0x80, 0x0a], "result_hex wins");
        assert_eq!(item.plan.cancellable, Some(false));
        assert_eq!(parse(br#"{"result_size":3}"#).unwrap().result, b"rrr");
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
            (br#"{"result_hex":"0"}"#, "result_hex"),
            (br#"{"result_size":999999999999}"#, "result_size"),
            (br#"{"cancellable":"no"}"#, "expected a boolean"),
            (b"\xff", "expected"),
        ] {
            let err = parse(payload).err().expect("refused");
            assert!(err.contains(why), "{err}");
        }
    }
}
