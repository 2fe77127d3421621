//! What the child sent after its handshake, each event with the moment it
//! was read, and bounded waits for the one a scenario expects next. Every
//! wait has a deadline, so a scenario fails rather than hangs.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, timeout_at};
use wfhost_ipc::{CancelVerdict, Event, Outcome};

use crate::failure::Failure;

/// What the reader task hands over: an event, or how the channel ended.
#[derive(Debug)]
pub enum Arrival {
    /// An event, read at `at`.
    Event { at: Instant, event: Event },
    /// The channel ended (`None`: cleanly; else how it broke).
    Ended(Option<String>),
}

/// One event as seen, with the moment it was read.
#[derive(Debug, Clone)]
pub struct Seen {
    /// When the kit read it.
    pub at: Instant,
    /// The event.
    pub event: Event,
}

/// Every event seen so far, and the stream of those still coming.
#[derive(Debug)]
pub struct Events {
    rx: mpsc::UnboundedReceiver<Arrival>,
    seen: Vec<Seen>,
    ended: Option<Option<String>>,
}

impl Events {
    /// Events fed by `rx`.
    pub fn new(rx: mpsc::UnboundedReceiver<Arrival>) -> Self {
        Self {
            rx,
            seen: Vec::new(),
            ended: None,
        }
    }

    /// Every event seen so far, in order.
    pub fn seen(&self) -> &[Seen] {
        &self.seen
    }

    /// Takes one arrival, waiting until `deadline`; `false` when none came
    /// or the channel has ended.
    async fn take_one(&mut self, deadline: Instant) -> bool {
        if self.ended.is_some() {
            return false;
        }
        match timeout_at(deadline, self.rx.recv()).await {
            Ok(Some(Arrival::Event { at, event })) => {
                self.seen.push(Seen { at, event });
                true
            }
            Ok(Some(Arrival::Ended(how))) => {
                self.ended = Some(how);
                false
            }
            Ok(None) => {
                self.ended = Some(Some("the kit's reader stopped".to_owned()));
                false
            }
            Err(_) => false,
        }
    }

    /// Waits up to `within` for the first event after the `from`-th that
    /// matches `wanted`, and returns it (`what` names it in the failure).
    pub async fn wait_from(
        &mut self,
        from: usize,
        what: &str,
        within: Duration,
        wanted: impl Fn(&Event) -> bool,
    ) -> Result<Seen, Failure> {
        let deadline = Instant::now() + within;
        let mut next = from;
        loop {
            if let Some(found) = self.seen[next.min(self.seen.len())..]
                .iter()
                .find(|s| wanted(&s.event))
            {
                return Ok(found.clone());
            }
            next = self.seen.len();
            if !self.take_one(deadline).await {
                return Err(Failure::new(
                    format!("{what} within {} ms", within.as_millis()),
                    self.summary(),
                ));
            }
        }
    }

    /// [`Self::wait_from`] the first event: any one seen so far counts.
    pub async fn wait_for(
        &mut self,
        what: &str,
        within: Duration,
        wanted: impl Fn(&Event) -> bool,
    ) -> Result<Seen, Failure> {
        self.wait_from(0, what, within, wanted).await
    }

    /// Collects whatever arrives during `period` (to see that nothing more
    /// comes: a second ack, a late `took`).
    pub async fn settle(&mut self, period: Duration) {
        let deadline = Instant::now() + period;
        while self.take_one(deadline).await {}
    }

    /// Takes what has already arrived, without waiting.
    pub fn poll(&mut self) {
        while self.ended.is_none() {
            match self.rx.try_recv() {
                Ok(Arrival::Event { at, event }) => self.seen.push(Seen { at, event }),
                Ok(Arrival::Ended(how)) => self.ended = Some(how),
                Err(_) => break,
            }
        }
    }

    /// How many events seen so far match `wanted`.
    pub fn count(&self, wanted: impl Fn(&Event) -> bool) -> usize {
        self.seen.iter().filter(|s| wanted(&s.event)).count()
    }

    /// The position of the first event seen that matches `wanted`.
    pub fn position(&self, wanted: impl Fn(&Event) -> bool) -> Option<usize> {
        self.seen.iter().position(|s| wanted(&s.event))
    }

    /// The events seen (the last few, when there are many) and how the
    /// channel ended, for a failure's "got".
    pub fn summary(&self) -> String {
        const SHOWN: usize = 14;
        let skip = self.seen.len().saturating_sub(SHOWN);
        let mut parts: Vec<String> = self.seen[skip..]
            .iter()
            .map(|s| describe(&s.event))
            .collect();
        if skip > 0 {
            parts.insert(0, format!("({skip} earlier)"));
        }
        let mut text = if parts.is_empty() {
            "no event".to_owned()
        } else {
            format!("[{}]", parts.join(", "))
        };
        match &self.ended {
            Some(None) => text.push_str(", then the channel closed"),
            Some(Some(how)) => text.push_str(&format!(", then the channel broke: {how}")),
            None => {}
        }
        text
    }
}

/// One event, briefly: `StepFinished(r1/fetch, Cancelled)`.
pub fn describe(event: &Event) -> String {
    match event {
        Event::Hello(h) => format!("Hello(protocol {}, pid {})", h.protocol, h.pid),
        Event::StepStarted { run, step, drain } => {
            format!("StepStarted({run}/{step}, {})", drain.as_str())
        }
        Event::StepFinished { run, step, outcome } => {
            format!("StepFinished({run}/{step}, {})", outcome_text(outcome))
        }
        Event::MailAck { id, outcome } => format!("MailAck({id}, {})", outcome_text(outcome)),
        Event::Pong { nonce } => format!("Pong({nonce})"),
        Event::RunTerminal { run, outcome } => {
            format!("RunTerminal({run}, {})", outcome_text(outcome))
        }
        Event::RecycleRequest { reason } => format!("RecycleRequest({reason:?})"),
        Event::Custom { kind, bytes } => match std::str::from_utf8(bytes) {
            Ok(text) if text.len() <= 80 => format!("Custom({kind} {text})"),
            _ => format!("Custom({kind}, {} bytes)", bytes.len()),
        },
        Event::MailStarted { id, cancellable } => {
            format!("MailStarted({id}, cancellable {cancellable})")
        }
        Event::MailDone {
            id,
            outcome,
            result,
        } => format!(
            "MailDone({id}, {}, result {})",
            outcome_text(outcome),
            bytes_text(result)
        ),
        Event::MailCancelVerdict { id, verdict } => {
            format!("MailCancelVerdict({id}, {})", verdict_text(verdict))
        }
        Event::Ask { id, key, prompt } => {
            format!("Ask({id}, {key:?}, {} bytes)", prompt.len())
        }
        Event::Progress { id, data } => format!("Progress({id}, {} bytes)", data.len()),
        Event::GiveBack {
            id,
            awaiting_answer,
        } => format!("GiveBack({id}, awaiting_answer {awaiting_answer})"),
        Event::Ready | Event::Drained => event.name().to_owned(),
    }
}

/// Bytes, briefly: hex when short (`00ff800a`), else their count.
pub fn bytes_text(bytes: &[u8]) -> String {
    const SHOWN: usize = 16;
    if bytes.is_empty() {
        "empty".to_owned()
    } else if bytes.len() <= SHOWN {
        hex::encode(bytes)
    } else {
        format!("of {} bytes", bytes.len())
    }
}

/// A cancel verdict, briefly: `Acknowledged`, `Refused("why")`.
pub fn verdict_text(verdict: &CancelVerdict) -> String {
    match verdict {
        CancelVerdict::Refused(reason) => format!("Refused({reason:?})"),
        other => format!("{other:?}"),
    }
}

/// An outcome, briefly: `Succeeded`, `Failed("why")`, `Cancelled`.
pub fn outcome_text(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Failed(reason) => format!("Failed({reason:?})"),
        other => format!("{other:?}"),
    }
}

/// Matches `StepStarted` of `step` in `run`, with any drain behaviour.
pub fn started<'a>(run: &'a str, step: &'a str) -> impl Fn(&Event) -> bool + 'a {
    move |e| matches!(e, Event::StepStarted { run: r, step: s, .. } if r == run && s == step)
}

/// Matches `StepFinished` of `step` in `run`, with any outcome.
pub fn finished<'a>(run: &'a str, step: &'a str) -> impl Fn(&Event) -> bool + 'a {
    move |e| matches!(e, Event::StepFinished { run: r, step: s, .. } if r == run && s == step)
}

/// Matches `RunTerminal` of `run`, with any outcome.
pub fn terminal(run: &str) -> impl Fn(&Event) -> bool + '_ {
    move |e| matches!(e, Event::RunTerminal { run: r, .. } if r == run)
}

/// Matches the end of mail `id` in either version: `MailAck` (protocol
/// 2) or `MailDone` (protocol 3), with any outcome.
pub fn acked(id: u64) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::MailAck { id: i, .. } | Event::MailDone { id: i, .. } if *i == id)
}

/// Matches `MailStarted` of `id`.
pub fn mail_started(id: u64) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::MailStarted { id: i, .. } if *i == id)
}

/// Matches `MailCancelVerdict` of `id`.
pub fn verdict(id: u64) -> impl Fn(&Event) -> bool {
    move |e| matches!(e, Event::MailCancelVerdict { id: i, .. } if *i == id)
}

/// Whether `event` is a message of protocol 3 (which a child speaking 2
/// must never send).
pub fn of_v3(event: &Event) -> bool {
    event.since() >= 3
}

/// Matches the conformance child's `conformance.took` of mail `id`.
pub fn took(id: u64) -> impl Fn(&Event) -> bool {
    move |e| took_of(e).is_some_and(|(i, _)| i == id)
}

/// The mail id and attempt a `conformance.took` event reports, if it is one
/// and reads as `{"id":"<decimal>","attempt":N}`.
pub fn took_of(event: &Event) -> Option<(u64, u64)> {
    let Event::Custom { kind, bytes } = event else {
        return None;
    };
    if kind != "conformance.took" {
        return None;
    }
    let value: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    let id = value.get("id")?.as_str()?.parse().ok()?;
    let attempt = value.get("attempt")?.as_u64()?;
    Some((id, attempt))
}

/// The outcome of a `StepFinished`, `RunTerminal`, `MailAck` or `MailDone`.
pub fn outcome_of(event: &Event) -> Option<&Outcome> {
    match event {
        Event::StepFinished { outcome, .. }
        | Event::RunTerminal { outcome, .. }
        | Event::MailAck { outcome, .. }
        | Event::MailDone { outcome, .. } => Some(outcome),
        _ => None,
    }
}
