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
//! 3. `progress` (each value of the list, in order) and `progress_bytes`
//!    (a JSON string of exactly that many bytes) through
//!    [`Mail::progress`]; if the runtime refuses one, the item ends
//!    `Failed(<its message>)`;
//! 4. its `steps` in order, as steps of its run, each waiting `ms` or until
//!    its token fires; after a cancelled step the rest are not run;
//! 5. unless a step was cancelled, each question of `ask` (one
//!    `{"key", "prompt"}` or a list of them) in order, through
//!    [`Mail::ask`]: the item's result is then the last answer as compact
//!    JSON (unless `result_hex` or `result_size` says otherwise); an item
//!    given back is let go (nothing more is sent for it), one cancelled
//!    ends `Cancelled`, any other refusal ends it `Failed(<its message>)`;
//! 6. `RunTerminal` and the item's end with one outcome: `Cancelled` if a
//!    step or a question was cancelled or the item's own cancel fired,
//!    else `Failed(fail)` with `fail`, else `Succeeded`; in protocol 3
//!    `MailDone` with the handler's result (`result_hex`, or `result_size`
//!    bytes of `r`, or the last answer, or nothing), in protocol 2
//!    `MailAck`; a payload that is not such JSON ends `Failed("bad
//!    payload: …")`;
//! 7. `RecycleRequest { reason: recycle }` with `recycle`.
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
use serde_json::Value;
use tokio::task::JoinSet;
use tokio::time::sleep;
use wfhost_child::{
    AskError, CloseReason, DrainBehavior, Mail, Options, Outcome, Runtime, RuntimeError, Start,
    StepError,
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
    #[serde(default)]
    progress: Vec<Value>,
    progress_bytes: Option<usize>,
    ask: Option<Questions>,
}

/// `ask`: one question, or a list of them asked in order.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Questions {
    One(Question),
    Many(Vec<Question>),
}

impl Questions {
    fn into_list(self) -> Vec<Question> {
        match self {
            Self::One(question) => vec![question],
            Self::Many(list) => list,
        }
    }
}

/// One question: its key and its prompt (any JSON).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Question {
    key: String,
    prompt: Value,
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

/// The most `progress_bytes` may ask for: more than any frame holds.
const MAX_PROGRESS_BYTES: usize = 128 << 20;

/// A parsed payload: the plan, with the custom event's and the result's
/// bytes decoded (`result` is `None` when the payload names none), the
/// progress reports in order, and the questions.
struct Item {
    plan: Plan,
    custom: Option<(String, Vec<u8>)>,
    result: Option<Vec<u8>>,
    progress: Vec<Value>,
    questions: Vec<Question>,
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
        (Some(text), _) => {
            Some(hex::decode(&text).map_err(|e| format!("result_hex {text:?}: {e}"))?)
        }
        (None, Some(size)) if size > MAX_RESULT_SIZE => {
            return Err(format!("result_size {size} is above {MAX_RESULT_SIZE}"));
        }
        (None, Some(size)) => Some(vec![b'r'; size]),
        (None, None) => None,
    };
    let mut progress = std::mem::take(&mut plan.progress);
    match plan.progress_bytes {
        Some(size) if !(2..=MAX_PROGRESS_BYTES).contains(&size) => {
            return Err(format!(
                "progress_bytes {size} is not between 2 and {MAX_PROGRESS_BYTES}"
            ));
        }
        // A JSON string of exactly `size` bytes: two quotes around the rest.
        Some(size) => progress.push(Value::String("p".repeat(size - 2))),
        None => {}
    }
    let questions = plan
        .ask
        .take()
        .map(Questions::into_list)
        .unwrap_or_default();
    Ok(Item {
        plan,
        custom,
        result,
        progress,
        questions,
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
        progress,
        questions,
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
    let reported = progress.iter().try_for_each(|data| mail.progress(data));
    let (outcome, answer) = match reported {
        Err(refused) => (Outcome::Failed(refused.to_string()), None),
        Ok(()) => match work(&rt, &mail, &run, &plan.steps, &questions).await {
            Worked::GivenBack => return,
            Worked::Cancelled => (Outcome::Cancelled, None),
            Worked::Refused(reason) => (Outcome::Failed(reason), None),
            Worked::Done(answer) => match plan.fail {
                Some(reason) => (Outcome::Failed(reason), answer),
                None => (Outcome::Succeeded, answer),
            },
        },
    };
    let outcome = if mail.token().is_cancelled() {
        Outcome::Cancelled
    } else {
        outcome
    };
    let result = result.or(answer).unwrap_or_default();
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

/// How an item's steps and questions went.
#[derive(Debug)]
enum Worked {
    /// All done: the last answer as compact JSON, if anything was asked.
    Done(Option<Vec<u8>>),
    /// A step or a question was cancelled (or a step could not be run).
    Cancelled,
    /// The item went back to the supervisor while asking: let it go.
    GivenBack,
    /// The runtime refused a question: why.
    Refused(String),
}

/// Runs the item's steps in order, then asks its questions in order.
async fn work(
    rt: &Runtime,
    mail: &Mail,
    run: &str,
    steps: &[StepPlan],
    questions: &[Question],
) -> Worked {
    for step in steps {
        if mail.token().is_cancelled() || !run_step(rt, run, step).await {
            return Worked::Cancelled;
        }
    }
    let mut last = None;
    for question in questions {
        match mail.ask(&question.key, &question.prompt).await {
            Ok(answer) => last = Some(answer),
            Err(AskError::GivenBack(_)) => return Worked::GivenBack,
            Err(AskError::Cancelled { .. }) => return Worked::Cancelled,
            Err(refused) => return Worked::Refused(refused.to_string()),
        }
    }
    // A Value always writes as JSON.
    Worked::Done(last.map(|answer| serde_json::to_vec(&answer).unwrap_or_default()))
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
        assert!(item.result.is_none());
        assert!(item.progress.is_empty() && item.questions.is_empty());
        let item =
            parse(br#"{"result_hex":"00ff800a","result_size":3,"cancellable":false}"#).unwrap();
        assert_eq!(
            item.result.as_deref(),
            Some(&[0x00, 0xff, 0x80, 0x0a][..]),
            "result_hex wins"
        );
        assert_eq!(item.plan.cancellable, Some(false));
        assert_eq!(
            parse(br#"{"result_size":3}"#).unwrap().result.as_deref(),
            Some(&b"rrr"[..])
        );
    }

    #[test]
    fn progress_comes_in_order_with_progress_bytes_last_as_a_string_of_that_size() {
        let item = parse(br#"{"progress":[{"done":1},"half",[1,2],null],"progress_bytes":70000}"#)
            .unwrap();
        assert_eq!(item.progress.len(), 5);
        assert_eq!(item.progress[0], serde_json::json!({"done": 1}));
        assert_eq!(item.progress[3], Value::Null);
        let last = serde_json::to_vec(&item.progress[4]).unwrap();
        assert_eq!(last.len(), 70_000);
        assert!(last.starts_with(b"\"pp") && last.ends_with(b"p\""));
        let two = parse(br#"{"progress_bytes":2}"#).unwrap();
        assert_eq!(serde_json::to_vec(&two.progress[0]).unwrap(), b"\"\"");
    }

    #[test]
    fn ask_is_one_question_or_a_list_asked_in_order() {
        let item = parse(br#"{"ask":{"key":"approve","prompt":{"amount":12}}}"#).unwrap();
        assert_eq!(item.questions.len(), 1);
        assert_eq!(item.questions[0].key, "approve");
        assert_eq!(item.questions[0].prompt, serde_json::json!({"amount": 12}));
        let item = parse(
            br#"{"ask":[{"key":"a","prompt":1},{"key":"b","prompt":null},{"key":"a","prompt":"x"}]}"#,
        )
        .unwrap();
        let keys: Vec<&str> = item.questions.iter().map(|q| q.key.as_str()).collect();
        assert_eq!(keys, ["a", "b", "a"]);
        assert_eq!(item.questions[1].prompt, Value::Null);
        assert!(parse(br#"{"ask":[]}"#).unwrap().questions.is_empty());
        // A key the runtime refuses is still a payload: the item fails then.
        let long = format!(r#"{{"ask":{{"key":"{}","prompt":1}}}}"#, "k".repeat(300));
        assert_eq!(parse(long.as_bytes()).unwrap().questions[0].key.len(), 300);
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
            (br#"{"progress":{"a":1}}"#, "expected a sequence"),
            (br#"{"progress_bytes":1}"#, "progress_bytes 1"),
            (br#"{"progress_bytes":-1}"#, "invalid value"),
            (br#"{"ask":{"key":"k"}}"#, "did not match any variant"),
            (
                br#"{"ask":{"key":"k","prompt":1,"extra":2}}"#,
                "did not match any variant",
            ),
            (
                br#"{"ask":[{"key":1,"prompt":1}]}"#,
                "did not match any variant",
            ),
            (br#"{"ask":"k"}"#, "did not match any variant"),
            (b"\xff", "expected"),
        ] {
            let err = parse(payload).err().expect("refused");
            assert!(err.contains(why), "{err}");
        }
    }
}
