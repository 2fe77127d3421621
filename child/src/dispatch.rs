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
use wfhost_ipc::{Control, Event, FrameReader, SignedCancel};

use crate::cause::{CancelCause, CloseReason};
use crate::mail::{Mail, MailStream};
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

/// Starts the drain (for `Drain`, or a lease that ran out): cancel-behaviour
/// steps are cancelled with `cause`, wait-behaviour steps go on, mail stops
/// being handed out, and `Drained` is sent now if no cancel-behaviour step
/// is in flight and no mail is held (else later, by the step end or mail
/// settlement that makes it so).
fn drain(shared: &Shared, cause: CancelCause) {
    {
        let mut work = shared.work();
        let events = work.drain(cause);
        shared.post_all(events);
    }
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
