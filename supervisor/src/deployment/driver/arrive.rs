//! What arrives from a replica's live child (its frames and events, its
//! exit, a cancel's commit, a deadline), turned into its machine's inputs
//! and the facts they record.

use std::time::Instant;

use tracing::{debug, error, info, warn};
use wfhost_ipc::{CancelOrigin, Control, DrainBehavior, Event, Outcome};
use wfhost_policy::deadline::DeadlineStep;
use wfhost_policy::drain::MAX_STEPS_IN_FLIGHT;
use wfhost_policy::life::{Input, Misconduct, RecycleCause};
use wfhost_policy::recycle::RecycleReason;
use wfhost_policy::{Fact, format_duration};

use super::MAX_REASON_CHARS;
use super::replica::{Replica, Told};
use crate::clock::unix_ms;
use crate::deployment::child::{self, Arrived, Frame};
use crate::deployment::mail::deadlines::Due;
use crate::deployment::mail::questions;
use crate::deployment::mail::settle;
use crate::deployment::mail::writes::{Ack, Report};
use crate::deployment::throttle::Verdict;
use crate::deployment::{MailCancelAnswer, Waiter, cancel};
use crate::store::{Asking, CancelFound};

impl Replica {
    pub(super) async fn frame(&mut self, arrived: Arrived) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        let frame = w.io.frame(&self.cfg, arrived).await;
        // A child that wrote a Hello speaks the protocol, whatever follows
        // (a Hello of another version too: it needs an upgrade, not a wrapper).
        if w.io.spoke && matches!(frame, Frame::Handshake | Frame::Violation(_)) {
            self.inputs.push_back(Input::Hello);
        }
        match frame {
            Frame::Handshake => {}
            Frame::Ready => self.inputs.push_back(Input::Ready),
            Frame::Closed => {
                debug!(deployment = %self.label, pid = w.io.pid, "child closed its control channel");
                self.inputs.push_back(Input::ChannelClosed)
            }
            Frame::Violation(v) => self
                .inputs
                .push_back(Input::Misbehaved(Misconduct::Violation(v))),
            Frame::Event(event) => self.event(event).await,
        }
    }

    /// One event of a live child: bookkeeping, facts, and what the machine
    /// must hear of it. One arm per event, kept as one table so what each
    /// event does is read in one place.
    pub(super) async fn event(&mut self, event: Event) {
        if self.wired.is_none() {
            return;
        }
        let now = Instant::now();
        // A finished step or an acknowledged item is work done.
        let worked = matches!(
            event,
            Event::StepFinished { .. } | Event::MailAck { .. } | Event::MailDone { .. }
        );
        let fact = match event {
            Event::Pong { nonce } => self.pong(nonce, now),
            Event::StepStarted { run, step, drain } => self.step_started(run, step, drain, now),
            Event::StepFinished { run, step, outcome } => {
                self.step_finished(run, step, outcome, now)
            }
            Event::RunTerminal { run, outcome } => self.run_terminal(run, outcome, now),
            Event::MailAck { id, outcome } => self.mail_done(id, outcome, Vec::new()),
            Event::MailDone {
                id,
                outcome,
                result,
            } => self.mail_done(id, outcome, result),
            Event::MailStarted { id, .. } => self.mail_started(id),
            Event::Ask { id, key, prompt } => self.asked(id, key, &prompt),
            Event::Progress { id, data } => self.progressed(id, &data),
            Event::GiveBack { id, .. } => self.given_back(id),
            Event::MailCancelVerdict { id, verdict } => {
                if let Some(w) = self.wired.as_mut() {
                    w.verdicts.heard(id, &verdict);
                }
                None
            }
            Event::Drained => self.child_drained(),
            Event::RecycleRequest { reason } => self.recycle_asked(&reason),
            Event::Custom { kind, bytes } => custom(&kind, bytes.len()),
            // The handshake's frames are taken by `LiveChild::frame`.
            Event::Hello(_) | Event::Ready => None,
        };
        self.tell_progress(worked);
        self.publish_admitted(fact, now);
    }

    /// A ping answered.
    fn pong(&mut self, nonce: u64, now: Instant) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        if let Some(l) = w.liveness.as_mut() {
            l.on_pong(nonce, now);
        }
        None
    }

    /// A step started: counted by the drain budget, or refused as a
    /// violation (a step the budget cannot take).
    fn step_started(
        &mut self,
        run: String,
        step: String,
        drain: DrainBehavior,
        now: Instant,
    ) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        if w.budget
            .on_step_started(run.as_str(), step.as_str(), drain, now)
        {
            return Some(Fact::StepStarted {
                run: clip(run),
                step: clip(step),
                drain,
            });
        }
        let v = format!("more than {MAX_STEPS_IN_FLIGHT} steps in flight");
        self.inputs
            .push_back(Input::Misbehaved(Misconduct::Violation(v)));
        None
    }

    /// A step finished.
    fn step_finished(
        &mut self,
        run: String,
        step: String,
        outcome: Outcome,
        now: Instant,
    ) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        w.budget.on_step_finished(&run, &step, now);
        Some(Fact::StepFinished {
            run: clip(run),
            step: clip(step),
            outcome: clip_outcome(outcome),
        })
    }

    /// A run ended: its steps leave the budget.
    fn run_terminal(&mut self, run: String, outcome: Outcome, now: Instant) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        w.budget.on_run_terminal(&run, now);
        Some(Fact::RunTerminal {
            run: clip(run),
            outcome: clip_outcome(outcome),
        })
    }

    /// A mail item done, with its result: written in order with every
    /// other mail write this deployment owes, retried until it lands. A
    /// result over `max_result_bytes` ends the item failed, naming the
    /// bound, and is not kept.
    fn mail_done(&mut self, id: u64, outcome: Outcome, result: Vec<u8>) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        w.deadlines.ended(id);
        w.holding.ended(id);
        let (outcome, result) = match settle::result_too_large(&self.cfg, &result) {
            None => (outcome, result),
            Some(failed) => {
                warn!(deployment = %self.label, mail = id, reason = %failed, "mail result too large");
                (Outcome::Failed(failed), Vec::new())
            }
        };
        self.reports.push(Report::Done(Ack {
            holder: settle::holder(&w.io),
            id,
            outcome: clip_outcome(outcome),
            result,
        }));
        None
    }

    /// A mail item's handler took it: this delivery is a start (its
    /// `attempt`), written in order with the deployment's other mail writes.
    fn mail_started(&mut self, id: u64) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        w.holding.started(id);
        self.reports.push(Report::Started {
            holder: settle::holder(&w.io),
            id,
        });
        None
    }

    /// A handler asks a person a question: stored (once per item and
    /// key) in order with the deployment's other mail writes, then
    /// answered at once if an answer is stored (docs/protocol.md §4.12).
    /// A question about an item the child does not hold or has not
    /// started, a bad key or prompt, or a flood of them is a violation.
    fn asked(&mut self, id: u64, key: String, prompt: &[u8]) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        match w.holding.ask(id, &key, prompt) {
            Ok((_, false)) => None,
            Ok((_, true)) => {
                let holder = settle::holder(&w.io);
                self.reports.push(Report::Asked(Asking {
                    holder,
                    id,
                    key,
                    prompt: prompt.to_vec(),
                }));
                None
            }
            Err(v) => {
                self.inputs
                    .push_back(Input::Misbehaved(Misconduct::Violation(v)));
                None
            }
        }
    }

    /// A handler's progress: kept in the event log, as far as the child's
    /// rate of facts admits (the excess is counted, as for `Custom`).
    fn progressed(&mut self, id: u64, data: &[u8]) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        let checked = w
            .holding
            .check_started(id, "Progress")
            .and_then(|()| questions::json("progress", data));
        match checked {
            Ok(data) => Some(Fact::MailProgress { id, data }),
            Err(v) => {
                self.inputs
                    .push_back(Input::Misbehaved(Misconduct::Violation(v)));
                None
            }
        }
    }

    /// The child gave an item back, its handler waiting for an answer:
    /// back to the inbox uncounted, in order with the other mail writes.
    fn given_back(&mut self, id: u64) -> Option<Fact> {
        let w = self.wired.as_mut()?;
        if let Err(v) = w.holding.check_started(id, "GiveBack") {
            self.inputs
                .push_back(Input::Misbehaved(Misconduct::Violation(v)));
            return None;
        }
        w.holding.ended(id);
        w.deadlines.ended(id);
        self.reports.push(Report::GivenBack {
            holder: settle::holder(&w.io),
            id,
        });
        None
    }

    /// The child reports it has drained.
    fn child_drained(&mut self) -> Option<Fact> {
        let pid = self.wired.as_ref()?.io.pid;
        self.inputs.push_back(Input::Drained);
        Some(Fact::ChildDrained { pid })
    }

    /// The child asks to be recycled. With overlap, the crew starts its
    /// successor first; a child that asks before doing any work is
    /// recycled in place, where its machine holds a loop of such asks back.
    fn recycle_asked(&mut self, reason: &str) -> Option<Fact> {
        let w = self.wired.as_ref()?;
        let reason = clip(reason.to_owned());
        info!(deployment = %self.label, pid = w.io.pid, reason = %reason, "the child asked to be recycled");
        if self.cfg.recycle.overlap && w.worked_told {
            self.told.push(Told::Recycle {
                cause: RecycleCause::Child,
                reason,
            });
        } else {
            self.inputs.push_back(Input::RecycleAsked(reason));
        }
        None
    }

    /// Tells the machine the child's first work, and whether steps are in
    /// flight, when either changed.
    fn tell_progress(&mut self, worked: bool) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        if worked && !w.worked_told {
            w.worked_told = true;
            self.inputs.push_back(Input::Worked);
        }
        let any = w.budget.steps_in_flight();
        if any != w.steps_told {
            w.steps_told = any;
            self.inputs.push_back(Input::StepsInFlight(any));
        }
    }

    /// Records the child's own report as far as its rate limit admits,
    /// then what the budget's transition says (never limited).
    fn publish_admitted(&mut self, fact: Option<Fact>, now: Instant) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        let mut admitted = Vec::with_capacity(3);
        if let Some(fact) = fact {
            match w.throttle.admit(now) {
                Verdict::Publish => admitted.push(fact),
                Verdict::PublishAfterDropped(dropped) => {
                    admitted.push(Fact::EventsSuppressed { dropped });
                    admitted.push(fact);
                }
                Verdict::Drop => {}
            }
        }
        admitted.extend(w.budget.transition(now).map(Fact::from));
        for fact in admitted {
            self.record(fact);
        }
    }

    /// The child exited: what it wrote last still counts, then the machine
    /// hears it was reaped.
    pub(super) async fn exited(&mut self, status: std::io::Result<std::process::ExitStatus>) {
        for event in match self.wired.as_mut() {
            Some(w) => w.io.leftover_events().await,
            None => Vec::new(),
        } {
            self.event(event).await;
        }
        let Some(mut w) = self.wired.take() else {
            return;
        };
        let dropped = w.throttle.take_dropped();
        if dropped > 0 {
            self.record(Fact::EventsSuppressed { dropped });
        }
        w.io.reap_group();
        // A child that never wrote on its channel: most often a script
        // that is not there, which the status then names.
        let missing = (!w.io.spoke)
            .then(|| crate::config::missing_program(&self.cfg))
            .flatten();
        if let Some(m) = &missing {
            warn!(deployment = %self.label, pid = w.io.pid, "the child ended without a word on its channel: {m}");
        }
        self.status_mut().missing_program = missing;
        w.cancels
            .abandon("the child ended before the cancel was committed");
        w.verdicts.child_ended();
        self.watchlist.remove(w.io.pid);
        self.shared.forget_child(&self.cfg.id, w.io.pid);
        self.retired = Some(w.budget);
        self.inputs
            .push_back(Input::Reaped(child::exit_status(status)));
    }

    /// A cancel's commit ended: only once it is durable is the cancel sent.
    /// A refusal is retried with backoff and shown in status.
    pub(super) async fn committed(&mut self, result: Result<u64, String>) {
        let journal_error = result.as_ref().err().cloned();
        self.status_mut().journal_error = journal_error;
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        let id = &self.cfg.id;
        match result {
            Ok(seq) => {
                let Some(p) = w.cancels.committed() else {
                    return;
                };
                info!(deployment = %id, pid = w.io.pid, journal_seq = seq, cancels = %p.signed.target(),
                    origin = p.signed.origin().as_str(), "cancel committed to the journal; sending it");
                let fact = Fact::CancelCommitted {
                    cancel: cancel::journal_body(&p.signed),
                    journal_seq: Some(seq),
                };
                self.shared.publish(Some(id), &fact);
                let mail = match &p.signed {
                    cancel::Signed::Mail(s) => Some(s.record.id),
                    cancel::Signed::Run(_) => None,
                };
                let sent = w.io.send(&self.cfg, p.signed.control()).await;
                match (p.reply, mail) {
                    (Some(Waiter::Journaled(tx)), _) => {
                        let _ = tx.send(sent.map(|()| seq).map_err(|e| {
                            format!("committed as journal record {seq}, but not delivered: {e}")
                        }));
                    }
                    (Some(waiter), Some(item)) => match sent {
                        Ok(()) => w.verdicts.wait(item, waiter, seq, Instant::now()),
                        Err(e) => waiter.verdict(MailCancelAnswer {
                            verdict: "not-acknowledged".into(),
                            detail: format!("committed as journal record {seq}, but not delivered: {e}; if the child ends before the item, it ends cancelled"),
                            journal_seq: Some(seq),
                        }),
                    },
                    _ => {}
                }
            }
            Err(e) => {
                let (attempt, delay) = w.cancels.refused(Instant::now());
                error!(deployment = %id, pid = w.io.pid, attempt, retry_in = %format_duration(delay), error = %e,
                    "the journal refused a signed cancel; it is not sent until committed; retrying");
            }
        }
    }

    /// An item's deadline step: its cancel (recorded in the store, then
    /// signed, journaled and sent to a protocol-3 child), or, the cancel
    /// not having ended it, its failure and its child's recycle.
    async fn deadline_passed(&mut self, due: Due) {
        let Some(w) = self.wired.as_ref() else {
            return;
        };
        let holder = settle::holder(&w.io);
        let (id, reason, store) = (due.id, due.reason.clone(), self.shared.store.clone());
        match due.step {
            DeadlineStep::Cancel => {
                let why = reason.clone();
                let found = match store
                    .call(move |s| s.cancel_mail(id, &why, "its deadline", unix_ms()))
                    .await
                {
                    Ok(Ok(found)) => found,
                    Ok(Err(e)) => return self.deadline_unrecorded(id, &e.to_string()),
                    Err(e) => return self.deadline_unrecorded(id, &e.to_string()),
                };
                if let Some(CancelFound::Queued { .. }) = &found {
                    self.shared.events_written();
                }
                let held_here =
                    matches!(&found, Some(CancelFound::Held { holder: h, .. }) if *h == holder);
                let Some(w) = self.wired.as_mut() else {
                    return;
                };
                if !held_here {
                    w.deadlines.ended(id);
                    return;
                }
                info!(deployment = %self.label, pid = w.io.pid, mail = id, reason = %reason, "mail deadline passed; cancelling the item");
                if w.io.protocol() >= 3 {
                    let signed = cancel::sign_mail(
                        &self.shared.key,
                        CancelOrigin::Deadline,
                        &self.cfg.id,
                        id,
                        reason,
                    );
                    w.cancels.push(cancel::Signed::Mail(signed), None);
                }
            }
            DeadlineStep::Fail => {
                let (deployment, why) = (self.cfg.id.clone(), reason.clone());
                let failed = store
                    .call(move |s| s.fail_held_mail(&deployment, &holder, id, &why, unix_ms()))
                    .await;
                if !matches!(failed, Ok(Ok(true))) {
                    return;
                }
                self.shared.events_written();
                let Some(w) = self.wired.as_mut() else {
                    return;
                };
                warn!(deployment = %self.label, pid = w.io.pid, mail = id, reason = %reason,
                    "mail still not ended a drain budget after its deadline's cancel: failed; recycling its child");
                w.dispatch.acked();
                self.deadline_recycled = true;
                self.told.push(Told::Recycle {
                    cause: RecycleCause::Bound(RecycleReason::MailDeadline),
                    reason: format!("mail_deadline: mail {id}: {reason}"),
                });
            }
        }
    }

    /// The store did not record a deadline's cancel: the deadline's
    /// failure follows as planned.
    fn deadline_unrecorded(&self, id: u64, error: &str) {
        warn!(deployment = %self.label, mail = id, error = %error,
            "the store did not record the cancel of an item past its deadline; it fails a drain budget later unless it ends");
    }

    /// A deadline passed: the machine's, a ping, a drain budget.
    pub(super) async fn woke(&mut self) {
        let now = Instant::now();
        if self.life.deadline().is_some_and(|d| now >= d) {
            self.inputs.push_back(Input::Tick);
        }
        let pinging = matches!(self.life.phase().name(), "ready" | "draining");
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        if let Some(l) = w.liveness.as_mut().filter(|_| pinging) {
            if l.hung(now) {
                self.inputs.push_back(Input::Misbehaved(Misconduct::Hung));
            } else if let Some(nonce) = l.ping_due(now)
                && let Err(e) = w.io.send(&self.cfg, Control::Ping { nonce }).await
            {
                debug!(deployment = %self.label, pid = w.io.pid, error = %e, "ping not sent");
            }
        }
        // A flood that went quiet: say how much of it was left out.
        if let Some(dropped) = w.throttle.report_due(now) {
            self.record(Fact::EventsSuppressed { dropped });
        }
        // A child silent on a cancel of one of its items past the bound.
        if let Some(w) = self.wired.as_mut() {
            w.verdicts.overdue(now);
        }
        // Items past their deadlines.
        let due = match self.wired.as_mut() {
            Some(w) => w.deadlines.due(now, self.cfg.drain_timeout),
            None => Vec::new(),
        };
        for d in due {
            self.deadline_passed(d).await;
        }
        // The budget ran out: the machine has its runs cancelled.
        if let Some(escalation) = self.wired.as_mut().and_then(|w| w.budget.poll(now)) {
            self.inputs.push_back(Input::BudgetSpent(escalation));
        }
    }
}

/// A custom event's fact: its kind, clipped, and its size.
fn custom(kind: &str, bytes: usize) -> Option<Fact> {
    Some(Fact::Custom {
        kind: clip(kind.to_owned()),
        bytes,
    })
}

/// A child's text cut to [`MAX_REASON_CHARS`] characters: what facts,
/// the journal, the store and the event stream keep of it (the drain
/// budget matches steps by their whole names).
fn clip(text: String) -> String {
    if text.len() <= MAX_REASON_CHARS {
        return text;
    }
    text.chars().take(MAX_REASON_CHARS).collect()
}

/// An outcome with its failure reason [`clip`]ped.
fn clip_outcome(outcome: Outcome) -> Outcome {
    match outcome {
        Outcome::Failed(reason) => Outcome::Failed(clip(reason)),
        other => other,
    }
}
