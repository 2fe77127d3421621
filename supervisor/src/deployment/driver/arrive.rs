//! What arrives from a replica's live child (its frames and events, its
//! exit, a cancel's commit, a deadline), turned into its machine's inputs
//! and the facts they record.

use std::time::Instant;

use tracing::{debug, error, info, warn};
use wfhost_ipc::{Control, Event};
use wfhost_policy::Fact;
use wfhost_policy::format_duration;
use wfhost_policy::life::{Input, Misconduct, RecycleCause};

use super::MAX_REASON_CHARS;
use super::replica::{Replica, Told};
use crate::deployment::child::{self, Arrived, Frame};
use crate::deployment::throttle::Verdict;
use crate::deployment::writes::Ack;
use crate::deployment::{Waiter, cancel, drain, mail};

impl Replica {
    pub(super) async fn frame(&mut self, arrived: Arrived) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        let frame = w.io.frame(&self.cfg, arrived).await;
        // A child that said Hello speaks the protocol, whatever follows.
        if w.io.hello.is_some() && matches!(frame, Frame::Handshake | Frame::Violation(_)) {
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
    /// must hear of it.
    pub(super) async fn event(&mut self, event: Event) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        let now = Instant::now();
        let id = &self.label;
        let pid = w.io.pid;
        let mut facts = Vec::new();
        let mut worked = false;
        match event {
            Event::Pong { nonce } => {
                if let Some(l) = w.liveness.as_mut() {
                    l.on_pong(nonce, now);
                }
            }
            Event::StepStarted { run, step, drain } => {
                match w.budget.step_started(&run, &step, drain, now) {
                    Ok(()) => facts.push(Fact::StepStarted { run, step, drain }),
                    Err(v) => self
                        .inputs
                        .push_back(Input::Misbehaved(Misconduct::Violation(v))),
                }
            }
            Event::StepFinished { run, step, outcome } => {
                w.budget.step_finished(&run, &step, now);
                facts.push(Fact::StepFinished { run, step, outcome });
                worked = true;
            }
            Event::RunTerminal { run, outcome } => {
                w.budget.run_terminal(&run, now);
                facts.push(Fact::RunTerminal { run, outcome });
            }
            Event::MailAck {
                id: mail_id,
                outcome,
            } => {
                // Written in order with every other mail write this
                // deployment owes, retried until it lands.
                self.acks.push(Ack {
                    holder: mail::holder(&w.io),
                    id: mail_id,
                    outcome,
                });
                worked = true;
            }
            Event::Drained => {
                facts.push(Fact::ChildDrained { pid });
                self.inputs.push_back(Input::Drained);
            }
            Event::RecycleRequest { reason } => {
                let reason: String = reason.chars().take(MAX_REASON_CHARS).collect();
                info!(deployment = %id, pid, reason = %reason, "the child asked to be recycled");
                // With overlap, the crew starts its successor first; a
                // child that asks before doing any work is recycled in
                // place, where its machine holds a loop of such asks back.
                if self.cfg.recycle.overlap && w.worked_told {
                    self.told.push(Told::Recycle {
                        cause: RecycleCause::Child,
                        reason,
                    });
                } else {
                    self.inputs.push_back(Input::RecycleAsked(reason));
                }
            }
            Event::Custom { kind, bytes } => {
                let kind = kind.chars().take(MAX_REASON_CHARS).collect();
                facts.push(Fact::Custom {
                    kind,
                    bytes: bytes.len(),
                });
            }
            // The handshake's frames are taken by `LiveChild::frame`.
            Event::Hello(_) | Event::Ready => {}
        }
        if worked && !w.worked_told {
            w.worked_told = true;
            self.inputs.push_back(Input::Worked);
        }
        let any = w.budget.steps_in_flight();
        if any != w.steps_told {
            w.steps_told = any;
            self.inputs.push_back(Input::StepsInFlight(any));
        }
        // The child's own reports are rate-limited; the budget's are not.
        let mut admitted = Vec::with_capacity(facts.len() + 1);
        for fact in facts {
            match w.throttle.admit(now) {
                Verdict::Publish => admitted.push(fact),
                Verdict::PublishAfterDropped(dropped) => {
                    admitted.push(Fact::EventsSuppressed { dropped });
                    admitted.push(fact);
                }
                Verdict::Drop => {}
            }
        }
        admitted.extend(w.budget.transition(now));
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
        w.cancels
            .abandon("the child ended before the cancel was committed");
        self.shared.watchlist.remove(w.io.pid);
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
                info!(deployment = %id, pid = w.io.pid, journal_seq = seq, run = p.signed.record.run.as_deref().unwrap_or("every run"),
                    origin = p.signed.record.origin.as_str(), "cancel committed to the journal; sending it");
                let fact = Fact::CancelCommitted {
                    cancel: cancel::journal_body(&p.signed),
                    journal_seq: Some(seq),
                };
                self.shared.publish(Some(id), &fact);
                let sent = w.io.send(&self.cfg, Control::Cancel(p.signed)).await;
                if let Some(Waiter::Journaled(tx)) = p.reply {
                    let _ = tx.send(sent.map(|()| seq).map_err(|e| {
                        format!("committed as journal record {seq}, but not delivered: {e}")
                    }));
                }
            }
            Err(e) => {
                let (attempt, delay) = w.cancels.refused(Instant::now());
                error!(deployment = %id, pid = w.io.pid, attempt, retry_in = %format_duration(delay), error = %e,
                    "the journal refused a signed cancel; it is not sent until committed; retrying");
            }
        }
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
        self.escalate_if_due(now);
    }

    /// The budget ran out: the escalation's signed cancels are queued.
    fn escalate_if_due(&mut self, now: Instant) {
        let Some(w) = self.wired.as_mut() else {
            return;
        };
        if let Some(escalation) = w.budget.poll(now) {
            let (reason, signed) =
                drain::escalation_cancels(&escalation, &self.shared.key, &self.cfg.id);
            warn!(deployment = %self.label, pid = w.io.pid, runs = %escalation.runs.join(", "), "{reason}; cancelling");
            for s in signed {
                w.cancels.push(s, None);
            }
            self.record(Fact::DrainEscalated {
                runs: escalation.runs,
                budget: escalation.budget,
            });
        }
    }
}
