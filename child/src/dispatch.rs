//! The reader task: everything the supervisor sends is handled here, on its
//! own task, so a Ping is answered at once however long a step runs.

use std::sync::Arc;

use tokio::sync::mpsc;
use wfhost_ipc::{Control, Event, FrameReader, SignedCancel};

use crate::mail::Mail;
use crate::runtime::{CloseReason, Shared};

/// Reads and handles control messages until the channel ends.
pub(crate) async fn read_loop(
    mut reader: FrameReader<Control>,
    shared: Arc<Shared>,
    mail_tx: mpsc::UnboundedSender<Mail>,
) {
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
            Control::Drain { budget_ms } => drain(&shared, budget_ms),
            Control::Cancel(cancel) => cancel_run(&shared, &cancel),
            Control::Mail { id, payload } => match &mail_tx {
                Some(tx) => shared.mail.deliver(id, payload, tx),
                None => {
                    eprintln!("wfhost-child: mail {id} arrived after Shutdown; left for redelivery")
                }
            },
            Control::Shutdown => {
                shared.close(CloseReason::Shutdown);
                // Ends the mail stream; Pings and cancels are still answered
                // until the supervisor closes the channel.
                mail_tx = None;
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
    drop(mail_tx);
}

/// Starts the drain: cancel-behaviour steps are cancelled, wait-behaviour
/// steps go on, `Drained` follows when no cancel-behaviour step is left.
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
