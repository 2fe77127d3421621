//! Mail offered by senders, each offer a grouped write on the store
//! thread (`handle.rs`): the offers that wait there together, with the
//! takes and acknowledgements beside them, share one transaction and one
//! durable commit, and each sender is answered once it returned. One
//! sender alone pays one commit; eight at once pay about one between
//! them, however they arrive. The same write takes the new mail for a
//! child with room in its window ([`Rooms`]), so it reaches the child
//! without a commit of its own.

use tokio::sync::oneshot;

use crate::clock::unix_ms;
use crate::store::handle::{StoreGone, StoreHandle};
use crate::store::rooms::Rooms;
use crate::store::{Accepted, Offer, StoreError};

type Answer = Result<Accepted, Refused>;

/// Why an offer has no id: a refusal that wrote nothing, or a commit that
/// failed in a way that leaves open whether the offer landed.
#[derive(Debug, Clone)]
pub struct Refused {
    /// What went wrong and what to do.
    pub message: String,
    /// Whether the offer may have been written all the same.
    pub unknown: bool,
}

impl Refused {
    fn of(e: &crate::store::StoreError) -> Self {
        Self {
            message: e.to_string(),
            unknown: e.is_unknown(),
        }
    }

    fn gone(message: String) -> Self {
        Self {
            message,
            unknown: false,
        }
    }
}

/// Offers written as they come, and the room they may fill.
#[derive(Default)]
pub struct Offers {
    /// Room in the children's windows these writes may fill.
    pub rooms: Rooms,
}

impl Offers {
    /// Writes `offer` in the next group commit and answers once it is
    /// durable, or refused (writing nothing of it).
    pub async fn offer(&self, store: &StoreHandle, offer: Offer) -> Answer {
        let room = self.rooms.of(&offer.deployment);
        let (tx, rx) = oneshot::channel();
        store.submit_grouped(move |s| {
            // One answer per offer, by the store's contract.
            let accepted = s
                .enqueue_mail_many(std::slice::from_ref(&offer))
                .map(|mut answers| answers.pop());
            let mut taken = None;
            if let (Ok(Some(Ok(a))), Some(room)) = (&accepted, room)
                && a.new
            {
                // A take that fails leaves the mail in the inbox for the
                // driver; the accept stands.
                match room.take_in(s, &offer.deployment, unix_ms()) {
                    Ok(t) => taken = Some((room, t)),
                    Err(e) => tracing::debug!(deployment = %offer.deployment, error = %e,
                        "new mail left for the driver to take"),
                }
            }
            Box::new(move |commit: Result<(), &StoreError>| {
                if let Some((room, t)) = taken {
                    room.settle(t, commit.is_ok());
                }
                let answer = match (accepted, commit) {
                    (Ok(Some(Ok(a))), Ok(())) => Ok(a),
                    (Ok(Some(Err(e))) | Err(e), _) => Err(Refused::of(&e)),
                    (Ok(Some(Ok(_))), Err(e)) => Err(Refused::of(&e.for_write("accepting mail"))),
                    (Ok(None), _) => Err(Refused::gone(
                        "the store gave no answer for the offer; nothing was accepted".into(),
                    )),
                };
                let _ = tx.send(answer);
            })
        });
        rx.await
            .unwrap_or_else(|_| Err(Refused::gone(StoreGone.to_string())))
    }
}
