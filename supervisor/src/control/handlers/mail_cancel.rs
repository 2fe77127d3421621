//! `mail-cancel`: cancel one mail item. Waiting in the inbox, it ends
//! `cancelled` at once and is never delivered; held by a child, the cancel
//! is recorded in the store (so the child's end cancels the item instead
//! of returning it), signed, committed to the journal, sent, and answered
//! with the child's verdict; an item that has ended is left as it was.

use serde_json::json;

use super::{Context, lookup};
use crate::clock::unix_ms;
use crate::control::forward;
use crate::control::protocol::{Request, Response};
use crate::deployment::{Ask, MailCancelAnswer, Waiter};
use crate::exit;
use crate::store::CancelFound;

/// The reason a cancel gives when its operator gives none.
const OPERATOR: &str = "operator cancel";

/// Cancels item `id` as its state allows, and says what came of it.
pub async fn answer(
    ctx: &Context,
    by: Option<String>,
    id: u64,
    reason: Option<String>,
) -> Result<Response, Response> {
    let reason = reason.unwrap_or_else(|| OPERATOR.to_owned());
    let by = by.unwrap_or_else(|| "a host of the fleet".to_owned());
    let why = reason.clone();
    let found = ctx
        .shared
        .store
        .call(move |s| s.cancel_mail(id, &why, &by, unix_ms()))
        .await
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?
        .map_err(|e| Response::failed(exit::FAILED, e.to_string()))?;
    let answered = |deployment: &str, a: MailCancelAnswer| {
        Response::ok(json!({
            "id": id,
            "deployment": deployment,
            "verdict": a.verdict,
            "detail": a.detail,
            "journal_seq": a.journal_seq,
        }))
    };
    match found {
        None => Err(Response::failed(
            exit::FAILED,
            format!(
                "no mail item {id} is stored; nothing was cancelled\n  help: `wfhost mail list` shows the items there are"
            ),
        )),
        Some(CancelFound::Ended { deployment, how }) => Err(Response::failed(
            exit::FAILED,
            format!("mail {id} of {deployment} has already ended ({how}); nothing was cancelled"),
        )),
        Some(CancelFound::Queued { deployment }) => {
            // Its `mail_done` event was committed with it.
            ctx.shared.events_written();
            let detail = "it waited (in the inbox, or interrupted): it ends cancelled and is not delivered again";
            Ok(answered(
                &deployment,
                MailCancelAnswer {
                    verdict: "cancelled".into(),
                    detail: detail.into(),
                    journal_seq: None,
                },
            ))
        }
        Some(CancelFound::Held { deployment, holder }) => {
            if let Some(fleet) = &ctx.shared.fleet
                && lookup(&ctx.registry, &deployment).is_err()
            {
                let request = Request::MailCancel {
                    id,
                    reason: Some(reason),
                };
                return Ok(forward::to_owner(fleet, &deployment, &request).await);
            }
            let handle = lookup(&ctx.registry, &deployment)?;
            let (tx, rx) = tokio::sync::oneshot::channel();
            let ask = Ask::CancelMail {
                holder: holder.channel_id,
                id,
                reason,
                waiter: Waiter::Verdict(tx),
            };
            let gone = || {
                Response::failed(
                    exit::FAILED,
                    format!(
                        "{deployment} is shutting down; the cancel of mail {id} is recorded: the item ends cancelled"
                    ),
                )
            };
            if !handle.tell(ask).await {
                return Err(gone());
            }
            let verdict = rx
                .await
                .map_err(|_| gone())?
                .map_err(|e| Response::failed(exit::FAILED, e))?;
            Ok(answered(&deployment, verdict))
        }
    }
}
