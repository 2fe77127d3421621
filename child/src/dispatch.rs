//! The reader task: everything the supervisor sends is handled here, on its
//! own task, so a Ping is answered at once however long a step runs.
//!
//! `Drain` starts the drain in the work ledger (cancel-behaviour steps are
//! cancelled, wait-behaviour steps go on) and stops mail: nothing more is
//! handed to the application, queued mail is dropped and later mail is not
//! taken (all left unacknowledged, for the next child), while redeliveries of
//! acknowledged mail are still acknowledged again. `Drained` is sent once no
//! cancel-behaviour step is in flight and no mail is held by the application
//! (handed out and neither acknowledged nor dropped): at once if that is
//! already so, else by whichever step end or mail settlement makes it so.
//! Items whose handler waits for an answer (`ask`) are given back first
//! (`GiveBack`), so they do not hold the drain. `Answer` resolves the
//! item's `ask` calls of its key (see `mail.rs`).
//!
//! `Lease { valid_ms }` (fleets only) arms a deadline `valid_ms` after its
//! receipt, replaced by each newer `Lease`. If it passes first, the child
//! acts as drained on its own, exactly as on `Drain` (its supervisor may
//! have lost the deployment to another host): cancel-behaviour steps are
//! cancelled with [`CancelCause::LeaseExpired`], mail stops, and `Drained`
//! follows when due. A lease that arrives after that changes nothing.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until};
use tracing::{error, info, warn};
use wfhost_ipc::{
    CancelVerdict, Control, Event, FrameReader, Outcome, SignedCancel, SignedMailCancel,
};

use crate::cause::{CancelCause, CloseReason};
use crate::mail::{ItemCancel, Mail, MailStream};
use crate::shared::Shared;

/// Reads and handles control messages until the channel ends; `queue` is
/// the mail stream `mail_tx` feeds, emptied when mail stops.
pub(crate) async fn read_loop(
    mut reader: FrameReader<Control>,
    shared: Arc<Shared>,
    mail_tx: mpsc::UnboundedSender<Mail>,
    queue: MailStream,
) {
    // `None` once this child takes no more mail (Drain or Shutdown).
    let mut mail_tx = Some(mail_tx);
    // When the last lease runs out, while one is held.
    let mut lease_ends: Option<Instant> = None;
    loop {
        let next = tokio::select! {
            // `next` is cancel-safe: a lease expiring mid-frame loses nothing.
            next = reader.next() => next,
            () = sleep_until(lease_ends.unwrap_or_else(Instant::now)), if lease_ends.is_some() => {
                lease_ends = None;
                warn!("the supervisor's lease ran out before it was renewed: draining on our own");
                drain(&shared, CancelCause::LeaseExpired);
                stop_mail(&mut mail_tx, &queue);
                continue;
            }
        };
        let message = match next {
            Ok(Some(message)) => message,
            Ok(None) => {
                shared.close(CloseReason::Disconnected);
                break;
            }
            Err(e) => {
                error!("control channel failed: {e}; closing");
                shared.close(CloseReason::Failed(e.to_string()));
                break;
            }
        };
        match message {
            Control::Ping { nonce } => shared.outbox.post(Event::Pong { nonce }),
            Control::Drain { budget_ms } => {
                if !shared.work().is_draining() {
                    info!("drain requested (budget {budget_ms} ms)");
                }
                drain(&shared, CancelCause::Drain);
                stop_mail(&mut mail_tx, &queue);
            }
            Control::Cancel(cancel) => cancel_run(&shared, &cancel),
            Control::Mail {
                id,
                attempt,
                payload,
            } => shared.mail.deliver(id, attempt, payload, mail_tx.as_ref()),
            Control::Lease { valid_ms } => {
                if shared.work().is_draining() {
                    info!("lease of {valid_ms} ms after the drain began; nothing changes");
                } else {
                    // A lease too long to count in is one that never runs out.
                    lease_ends = Instant::now().checked_add(Duration::from_millis(valid_ms));
                }
            }
            Control::Shutdown => {
                shared.close(CloseReason::Shutdown);
                // Ends the mail stream; Pings and cancels are still answered
                // until the supervisor closes the channel.
                stop_mail(&mut mail_tx, &queue);
            }
            Control::Welcome(_) => {
                let reason = "protocol violation: unexpected Welcome after the handshake";
                error!("{reason}; closing");
                shared.close(CloseReason::Failed(reason.to_owned()));
                break;
            }
            // A child of protocol 2 cannot decode these: a broken frame.
            ref v3 @ (Control::CancelMail(_) | Control::Answer { .. })
                if shared.protocol < v3.since() =>
            {
                let reason = format!(
                    "protocol violation: {} is a protocol-{} message, and this child speaks protocol {}",
                    v3.name(),
                    v3.since(),
                    shared.protocol
                );
                error!("{reason}; closing");
                shared.close(CloseReason::Failed(reason));
                break;
            }
            Control::CancelMail(cancel) => cancel_mail(&shared, &cancel),
            Control::Answer { id, key, value } => shared.mail.answer(id, &key, value),
        }
    }
    // Dropping the sender ends the mail stream.
    stop_mail(&mut mail_tx, &queue);
}

/// Stops mail reaching the application: drops the sender (a `next` waiting
/// on an empty queue returns `None`) and the mail still queued. Called after
/// the work ledger stopped handing mail out, so no item slips through.
fn stop_mail(mail_tx: &mut Option<mpsc::UnboundedSender<Mail>>, queue: &MailStream) {
    *mail_tx = None;
    queue.discard_queued();
}

/// Starts the drain (for `Drain`, or a lease that ran out): items whose
/// handler waits in `ask` are given back (`GiveBack`), cancel-behaviour
/// steps are cancelled with `cause`, wait-behaviour steps go on, mail stops
/// being handed out, and `Drained` is sent now if no cancel-behaviour step
/// is in flight and no mail is held (else later, by the step end or mail
/// settlement that makes it so).
fn drain(shared: &Shared, cause: CancelCause) {
    shared.mail.drain(cause);
    shared.draining.send_replace(true);
}

/// Verifies a cancel (signature, deployment, run) and runs the cascade, or
/// logs why it was refused and changes nothing.
fn cancel_run(shared: &Shared, cancel: &SignedCancel) {
    let record = &cancel.record;
    let run_name = record.run.as_deref().unwrap_or("<every run>");
    let mut work = shared.work();
    let verdict = cancel.verify_for(&shared.supervisor_key, &shared.deployment, |run| {
        work.knows_run(run)
    });
    match verdict {
        Ok(()) => {
            info!(
                "cancel of run {run_name} accepted (origin {}, reason {:?})",
                record.origin.as_str(),
                record.reason
            );
            let events = work.cancel(record.run.as_deref());
            shared.post_all(events);
        }
        Err(refused) => {
            warn!(
                "refused cancel of run {run_name} for deployment {:?} (origin {}): {refused}",
                record.deployment,
                record.origin.as_str()
            );
        }
    }
}

/// Protocol 3: verifies a cancel of one mail item (signature, deployment,
/// an item this child holds) and answers it with one verdict: an item not
/// started yet ends `Cancelled` at once; a started, cancellable item's
/// token fires and its run's steps are cancelled (it ends when its handler
/// says how); an item declared not cancellable runs on (`NotSupported`);
/// anything else is refused, in the refusal's words.
fn cancel_mail(shared: &Shared, cancel: &SignedMailCancel) {
    let record = &cancel.record;
    let id = record.id;
    let verdict = |verdict| Event::MailCancelVerdict { id, verdict };
    let run = {
        let mut ledger = shared.mail.ledger();
        let verified = cancel.verify_for(&shared.supervisor_key, &shared.deployment, |id| {
            ledger.holds(id)
        });
        if let Err(refused) = verified {
            warn!(
                "refused cancel of mail {id} for deployment {:?} (origin {}): {refused}",
                record.deployment,
                record.origin.as_str()
            );
            shared
                .outbox
                .post(verdict(CancelVerdict::Refused(refused.to_string())));
            return;
        }
        let what = format!(
            "cancel of mail {id} (origin {}, reason {:?})",
            record.origin.as_str(),
            record.reason
        );
        // Verdicts are posted under the ledger's lock, ordered with the
        // item's MailStarted and MailDone.
        match ledger.cancel(id) {
            ItemCancel::Unstarted => {
                info!("{what} accepted: not started, so never will be");
                shared.outbox.post(verdict(CancelVerdict::Acknowledged));
                shared
                    .outbox
                    .post(shared.mail.end_event(id, Outcome::Cancelled, Vec::new()));
                return;
            }
            ItemCancel::NotSupported => {
                info!("{what}: its handler cannot be cancelled; it runs to its end");
                shared.outbox.post(verdict(CancelVerdict::NotSupported));
                return;
            }
            ItemCancel::NotHeld => {
                // verify_for checked that it is held, under this lock.
                shared.outbox.post(verdict(CancelVerdict::Refused(format!(
                    "cancel is for mail item {id}, which this child does not hold"
                ))));
                return;
            }
            ItemCancel::Started { run } => {
                info!("{what} accepted: cancelling its run {run}");
                shared.outbox.post(verdict(CancelVerdict::Acknowledged));
                run
            }
        }
    };
    let mut work = shared.work();
    let events = work.cancel_item_run(&run);
    shared.post_all(events);
}
