//! The scenarios of a person in the loop (protocol 3, `docs/protocol.md`
//! §4.12 "A person in the loop"): a question asked and answered (and
//! remembered), an answer given at once to a redelivered item, items
//! waiting for answers given back on a drain, progress reports, a key the
//! library must refuse, and a cancel while asking.

use std::time::Duration;

use serde_json::{Value, json};
use wfhost_ipc::{CancelVerdict, Control, DrainBehavior, Event, Outcome};

use super::v3::{expect_verdict, ready_v3};
use super::{EVENT_WITHIN, QUIET_FOR, payload};
use crate::events::{
    Seen, acked, bytes_text, describe, finished, mail_started, outcome_of, outcome_text, started,
    took_of, verdict,
};
use crate::failure::{Failure, ensure};
use crate::forgery;
use crate::subject::{Launcher, Subject};

/// The prompt of the scenarios that check its bytes: its compact JSON is
/// the same in every language (keys in order, ASCII, integers).
const PROMPT: &str = r#"{"amount":12,"order":"A-1"}"#;
/// The answer the kit gives, and the result it expects back.
const APPROVED: &[u8] = br#"{"approved":true}"#;
/// How soon after an acknowledged cancel the item must be done.
const CANCELLED_WITHIN: Duration = Duration::from_secs(2);
/// The step of the item that is not asking in `ask-given-back-on-drain`.
const STEP_MS: u64 = 800;

/// Matches `Ask` of item `id`, any key.
fn ask_of(id: u64) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::Ask { id: i, .. } if *i == id)
}

/// Matches `Ask` of item `id` with `key`.
fn ask_keyed(id: u64, key: &str) -> impl Fn(&Event) -> bool + '_ {
    move |e| matches!(e, Event::Ask { id: i, key: k, .. } if *i == id && k == key)
}

/// Matches `Progress` of item `id`.
fn progress_of(id: u64) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::Progress { id: i, .. } if *i == id)
}

/// Matches `GiveBack` of item `id`.
fn give_back_of(id: u64) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::GiveBack { id: i, .. } if *i == id)
}

/// A payload asking `questions` (`(key, prompt)` pairs), run `run`.
fn asking(run: &str, questions: &[(&str, Value)]) -> Vec<u8> {
    let ask: Vec<Value> = questions
        .iter()
        .map(|(key, prompt)| json!({"key": key, "prompt": prompt}))
        .collect();
    payload(json!({"run": run, "ask": ask}))
}

/// The prompt the scenarios ask with, as a value.
fn prompt() -> Value {
    serde_json::from_str(PROMPT).unwrap_or(Value::Null)
}

/// Sends the answer `value` to question `key` of item `id`.
async fn answer(s: &mut Subject, id: u64, key: &str, value: &[u8]) -> Result<(), Failure> {
    s.send(Control::Answer {
        id,
        key: key.to_owned(),
        value: value.to_vec(),
    })
    .await
}

/// Waits for the `Ask` of item `id` with `key` and fails unless its prompt
/// is `prompt` exactly (compact JSON) and it follows the item's
/// `MailStarted`.
async fn expect_ask(s: &mut Subject, id: u64, key: &str, prompt: &[u8]) -> Result<(), Failure> {
    let expected = Event::Ask {
        id,
        key: key.to_owned(),
        prompt: prompt.to_vec(),
    };
    let what = format!(
        "Ask({id}, {key:?}, prompt {})",
        String::from_utf8_lossy(prompt)
    );
    let seen = s
        .events
        .wait_for(&what, EVENT_WITHIN, ask_keyed(id, key))
        .await?;
    ensure(
        seen.event == expected,
        format!("{what} (compact JSON)"),
        || match &seen.event {
            Event::Ask { prompt, .. } => {
                format!("an Ask whose prompt is {}", String::from_utf8_lossy(prompt))
            }
            other => describe(other),
        },
    )?;
    let start = s.events.position(mail_started(id));
    let asked = s.events.position(ask_keyed(id, key));
    ensure(
        start.is_some() && start < asked,
        format!("MailStarted({id}) before its Ask"),
        || s.events.summary(),
    )
}

/// Waits for the end of item `id` and fails unless it is `MailDone` with
/// `outcome` and, when given, `result`.
async fn expect_done(
    s: &mut Subject,
    id: u64,
    within: Duration,
    outcome: &Outcome,
    result: Option<&[u8]>,
) -> Result<Seen, Failure> {
    let done = s
        .events
        .wait_for(&format!("MailDone({id})"), within, acked(id))
        .await?;
    let fits = matches!(&done.event,
        Event::MailDone { outcome: o, result: r, .. }
            if o == outcome && result.is_none_or(|want| r == want));
    let expected = match result {
        Some(result) => format!(
            "MailDone({id}, {}, result {})",
            outcome_text(outcome),
            String::from_utf8_lossy(result)
        ),
        None => format!("MailDone({id}, {})", outcome_text(outcome)),
    };
    ensure(fits, expected, || match &done.event {
        Event::MailDone {
            id,
            outcome,
            result,
        } => format!(
            "MailDone({id}, {}, result {})",
            outcome_text(outcome),
            String::from_utf8(result.clone()).unwrap_or_else(|_| bytes_text(result))
        ),
        other => describe(other),
    })?;
    Ok(done)
}

/// Fails unless item `id` ended `Failed` (any reason) with no `Ask` sent.
async fn expect_refused(s: &mut Subject, id: u64, what: &str) -> Result<(), Failure> {
    let done = s
        .events
        .wait_for(&format!("MailDone({id})"), EVENT_WITHIN, acked(id))
        .await?;
    ensure(
        matches!(&done.event, Event::MailDone { outcome: Outcome::Failed(reason), .. } if !reason.is_empty()),
        format!("MailDone({id}, Failed(the library's error)) for {what}"),
        || describe(&done.event),
    )
}

/// `ask-answered`: an item asks `approve` (the kit checks the prompt's
/// bytes), then `size`, then `approve` again. Answers for an item and for
/// a key nobody asked are ignored; the answer to `approve` resolves it and
/// is remembered, so the third question sends no frame; the item's result
/// is the last answer, as compact JSON.
pub async fn answered(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(
        1,
        1,
        asking(
            "ask-1",
            &[
                ("approve", prompt()),
                ("size", json!(3)),
                ("approve", prompt()),
            ],
        ),
    )
    .await?;
    expect_ask(s, 1, "approve", PROMPT.as_bytes()).await?;
    answer(s, 99, "approve", b"false").await?;
    answer(s, 1, "never-asked", b"false").await?;
    answer(s, 1, "approve", APPROVED).await?;
    expect_ask(s, 1, "size", b"3").await?;
    answer(s, 1, "size", br#""large""#).await?;
    expect_done(s, 1, EVENT_WITHIN, &Outcome::Succeeded, Some(APPROVED))
        .await
        .map_err(|f| {
            Failure::new(
                format!("{} (the last answer: approve's, remembered)", f.expected),
                f.got,
            )
        })?;
    s.events.settle(QUIET_FOR).await;
    for key in ["approve", "size"] {
        let asked = s.events.count(ask_keyed(1, key));
        ensure(
            asked == 1,
            format!("one Ask(1, {key:?}) (an answered key is not asked again)"),
            || format!("{asked}: {}", s.events.summary()),
        )?;
    }
    ensure(s.events.count(acked(1)) == 1, "one MailDone(1)", || {
        s.events.summary()
    })
}

/// `ask-answered-at-once`: a redelivered item (attempt 2) asks again; the
/// kit answers as soon as the `Ask` arrives, as a supervisor does with a
/// stored answer; the item succeeds with it.
pub async fn answered_at_once(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(5, 2, asking("again-5", &[("approve", prompt())]))
        .await?;
    expect_ask(s, 5, "approve", PROMPT.as_bytes()).await?;
    answer(s, 5, "approve", APPROVED).await?;
    expect_done(s, 5, EVENT_WITHIN, &Outcome::Succeeded, Some(APPROVED)).await?;
    let attempt = s
        .events
        .seen()
        .iter()
        .find_map(|seen| took_of(&seen.event).filter(|(id, _)| *id == 5));
    ensure(
        attempt == Some((5, 2)),
        "conformance.took of item 5 with attempt 2",
        || s.events.summary(),
    )?;
    s.events.settle(QUIET_FOR).await;
    ensure(
        s.events.count(ask_of(5)) == 1 && s.events.count(acked(5)) == 1,
        "one Ask(5) and one MailDone(5)",
        || s.events.summary(),
    )
}

/// `ask-given-back-on-drain`: items 1 and 2 wait for answers, item 3 runs
/// an 0.8 s wait-behaviour step. `Drain` gives 1 and 2 back
/// (`GiveBack { awaiting_answer: true }`, never a `MailDone`); item 3
/// finishes; `Drained` comes after all three, once. A late answer for a
/// given-back item is ignored.
pub async fn given_back_on_drain(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(1, 1, asking("gb-1", &[("approve", json!("one?"))]))
        .await?;
    s.mail(2, 1, asking("gb-2", &[("approve", json!("two?"))]))
        .await?;
    s.mail(
        3,
        1,
        super::one_step("gb-3", "work", DrainBehavior::Wait, STEP_MS),
    )
    .await?;
    expect_ask(s, 1, "approve", br#""one?""#).await?;
    expect_ask(s, 2, "approve", br#""two?""#).await?;
    s.events
        .wait_for(
            "StepStarted(gb-3/work)",
            EVENT_WITHIN,
            started("gb-3", "work"),
        )
        .await?;
    let before = s.events.seen().len();
    s.send(Control::Drain { budget_ms: 10_000 }).await?;
    for id in [1, 2] {
        let seen = s
            .events
            .wait_from(
                before,
                &format!("GiveBack({id}, awaiting_answer true) after the Drain"),
                EVENT_WITHIN,
                give_back_of(id),
            )
            .await?;
        let expected = Event::GiveBack {
            id,
            awaiting_answer: true,
        };
        ensure(seen.event == expected, describe(&expected), || {
            describe(&seen.event)
        })?;
    }
    let within = Duration::from_millis(STEP_MS) + EVENT_WITHIN;
    let step = s
        .events
        .wait_for("StepFinished(gb-3/work)", within, finished("gb-3", "work"))
        .await?;
    ensure(
        outcome_of(&step.event) == Some(&Outcome::Succeeded),
        "StepFinished(gb-3/work, Succeeded) (a wait step goes on)",
        || describe(&step.event),
    )?;
    expect_done(s, 3, EVENT_WITHIN, &Outcome::Succeeded, None).await?;
    s.events
        .wait_for("Drained", EVENT_WITHIN, |e| *e == Event::Drained)
        .await?;
    answer(s, 1, "approve", APPROVED).await?;
    s.events.settle(QUIET_FOR).await;
    let at = |wanted: &dyn Fn(&Event) -> bool| s.events.position(wanted);
    let drained = at(&|e| *e == Event::Drained);
    let last_before = [at(&give_back_of(1)), at(&give_back_of(2)), at(&acked(3))]
        .into_iter()
        .collect::<Option<Vec<usize>>>()
        .and_then(|all| all.into_iter().max());
    ensure(
        last_before.is_some() && drained > last_before,
        "Drained after GiveBack(1), GiveBack(2) and MailDone(3)",
        || s.events.summary(),
    )?;
    ensure(
        s.events.count(|e| *e == Event::Drained) == 1,
        "one Drained",
        || s.events.summary(),
    )?;
    for id in [1, 2] {
        ensure(
            s.events.count(acked(id)) == 0 && s.events.count(give_back_of(id)) == 1,
            format!("one GiveBack({id}) and no MailDone({id}) (given back, then forgotten)"),
            || s.events.summary(),
        )?;
    }
    Ok(())
}

/// `progress`: an item reports six values: a `Progress` frame each, in
/// order, each the value's compact JSON exactly, between its `MailStarted`
/// and its first step; it succeeds. `progress_bytes` 65536 is one frame of
/// exactly that many bytes; 70000 is refused by the library: no frame,
/// the item ends `Failed`.
pub async fn progress(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    let reports = [
        json!({"done": 1, "of": 3}),
        json!("half way"),
        json!([1, 2, 3]),
        json!(7),
        json!(true),
        Value::Null,
    ];
    s.mail(
        1,
        1,
        payload(json!({
            "run": "pg-1",
            "progress": reports,
            "steps": [{"name": "work", "drain": "cancel", "ms": 20}],
        })),
    )
    .await?;
    expect_done(s, 1, EVENT_WITHIN, &Outcome::Succeeded, None).await?;
    let sent: Vec<&Seen> = s
        .events
        .seen()
        .iter()
        .filter(|seen| progress_of(1)(&seen.event))
        .collect();
    let expected: Vec<Vec<u8>> = reports.iter().map(|v| v.to_string().into_bytes()).collect();
    let data: Vec<&[u8]> = sent
        .iter()
        .filter_map(|seen| match &seen.event {
            Event::Progress { data, .. } => Some(data.as_slice()),
            _ => None,
        })
        .collect();
    ensure(
        data == expected.iter().map(Vec::as_slice).collect::<Vec<_>>(),
        format!(
            "Progress(1) with {} in order",
            expected
                .iter()
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        || {
            let got: Vec<String> = data
                .iter()
                .map(|d| String::from_utf8_lossy(d).into_owned())
                .collect();
            format!("Progress(1) with [{}]", got.join(", "))
        },
    )?;
    let start = s.events.position(mail_started(1));
    let first = s.events.position(progress_of(1));
    let step = s.events.position(started("pg-1", "work"));
    let last = s
        .events
        .seen()
        .iter()
        .rposition(|seen| progress_of(1)(&seen.event));
    ensure(
        start.is_some() && start < first && last.is_some() && last < step,
        "every Progress(1) after MailStarted(1) and before its step",
        || s.events.summary(),
    )?;

    s.mail(
        2,
        1,
        payload(json!({"run": "pg-2", "progress_bytes": 65_536})),
    )
    .await?;
    expect_done(s, 2, EVENT_WITHIN, &Outcome::Succeeded, None).await?;
    let mut fitting = String::with_capacity(65_536);
    fitting.push('"');
    fitting.push_str(&"p".repeat(65_534));
    fitting.push('"');
    let two: Vec<&Event> = s
        .events
        .seen()
        .iter()
        .map(|seen| &seen.event)
        .filter(|e| progress_of(2)(e))
        .collect();
    ensure(
        matches!(two.as_slice(), [Event::Progress { data, .. }] if data == fitting.as_bytes()),
        "one Progress(2) of 65536 bytes (\"ppp…\": the most a report may be)",
        || {
            two.iter()
                .map(|e| describe(e))
                .collect::<Vec<_>>()
                .join(", ")
        },
    )?;

    s.mail(
        3,
        1,
        payload(json!({"run": "pg-3", "progress_bytes": 70_000})),
    )
    .await?;
    expect_refused(s, 3, "a progress report of 70000 bytes").await?;
    s.events.settle(QUIET_FOR).await;
    ensure(
        s.events.count(progress_of(3)) == 0,
        "no Progress(3) (70000 bytes is over 64 KiB: the library refuses it before sending)",
        || s.events.summary(),
    )
}

/// `ask-bad-key`: a key of 300 bytes and an empty key are refused by the
/// library (no `Ask`, the item ends `Failed`); a key of 256 bytes is asked.
pub async fn bad_key(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    let long = "k".repeat(300);
    let longest = "k".repeat(256);
    s.mail(1, 1, asking("bk-1", &[(&long, json!("?"))])).await?;
    expect_refused(s, 1, "a key of 300 bytes").await?;
    s.mail(2, 1, asking("bk-2", &[("", json!("?"))])).await?;
    expect_refused(s, 2, "an empty key").await?;
    s.mail(3, 1, asking("bk-3", &[(&longest, json!("?"))]))
        .await?;
    expect_ask(s, 3, &longest, br#""?""#)
        .await
        .map_err(|f| Failure::new(format!("{} (a key of 256 bytes)", f.expected), f.got))?;
    answer(s, 3, &longest, b"true").await?;
    expect_done(s, 3, EVENT_WITHIN, &Outcome::Succeeded, Some(b"true")).await?;
    s.events.settle(QUIET_FOR).await;
    for id in [1, 2] {
        ensure(
            s.events.count(ask_of(id)) == 0,
            format!("no Ask({id}): the library checks the key before sending"),
            || s.events.summary(),
        )?;
    }
    Ok(())
}

/// `ask-cancelled`: a valid `CancelMail` of an item waiting for an answer
/// gets `Acknowledged` within 1 s, and the item ends `Cancelled` (its `ask`
/// fails as cancelled) within 2 s.
pub async fn cancelled(s: &mut Subject, l: &Launcher) -> Result<(), Failure> {
    ready_v3(s, l).await?;
    s.mail(1, 1, asking("ac-1", &[("approve", prompt())]))
        .await?;
    expect_ask(s, 1, "approve", PROMPT.as_bytes()).await?;
    let cancel = forgery::honest_mail(l.key(), l.deployment(), 1);
    expect_verdict(
        s,
        cancel,
        |v| *v == CancelVerdict::Acknowledged,
        "Acknowledged",
    )
    .await?;
    expect_done(s, 1, CANCELLED_WITHIN, &Outcome::Cancelled, None).await?;
    s.events.settle(QUIET_FOR).await;
    ensure(
        s.events.count(verdict(1)) == 1,
        "one MailCancelVerdict(1)",
        || s.events.summary(),
    )?;
    ensure(
        s.events.count(acked(1)) == 1 && s.events.count(give_back_of(1)) == 0,
        "one MailDone(1) and no GiveBack(1)",
        || s.events.summary(),
    )
}
