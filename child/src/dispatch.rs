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

use std::sync::Arc;

use tokio::sync::mpsc;
use wfhost_ipc::{Control, Event, FrameReader, SignedCancel};

use crate::mail::{Mail, MailStream};
use crate::runtime::{CloseReason, Shared};

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
    loop {
        let message = match reader.next().await {
            Ok(Some(message)) => message,
            Ok(None) => {
                shared.close(CloseReason::Disconnected);
                break;
            }
            Err(e) => {
                eprintln!("wfhost-child: control channel failed: {e}; closing");
                shared.close(CloseReason::Failed(e.to_string()));
                break;
            }
        };
        match message {
            Control::Ping { nonce } => shared.outbox.post(Event::Pong { nonce }),
            Control::Drain { budget_ms } => {
                drain(&shared, budget_ms);
                stop_mail(&mut mail_tx, &queue);
            }
            Control::Cancel(cancel) => cancel_run(&shared, &cancel),
            Control::Mail {
                id,
                attempt,
                payload,
            } => shared.mail.deliver(id, attempt, payload, mail_tx.as_ref()),
            Control::Lease { .. } => {}
            Control::Shutdown => {
                shared.close(CloseReason::Shutdown);
                // Ends the mail stream; Pings and cancels are still answered
                // until the supervisor closes the channel.
                stop_mail(&mut mail_tx, &queue);
            }
            Control::Welcome(_) => {
                let reason = "protocol violation: unexpected Welcome after the handshake";
                eprintln!("wfhost-child: {reason}; closing");
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

/// Starts the drain: cancel-behaviour steps are cancelled, wait-behaviour
/// steps go on, mail stops being handed out, and `Drained` is sent now if
/// no cancel-behaviour step is in flight and no mail is held (else later,
/// by the step end or mail settlement that makes it so).
fn drain(shared: &Shared, budget_ms: u64) {
    {
        let mut work = shared.work();
        if !work.is_draining() {
            eprintln!("wfhost-child: drain requested (budget {budget_ms} ms)");
        }
        let events = work.drain();
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
            eprintln!(
                "wfhost-child: cancel of run {run_name} accepted (origin {}, reason {:?})",
                record.origin.as_str(),
                record.reason
            );
            let events = work.cancel(record.run.as_deref());
            shared.post_all(events);
        }
        Err(refused) => {
            eprintln!(
                "wfhost-child: refused cancel of run {run_name} for deployment {:?} (origin {}): {refused}",
                record.deployment,
                record.origin.as_str()
            );
        }
    }
}
