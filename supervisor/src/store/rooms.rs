//! Room in live children's windows that the senders' write may fill: new
//! mail taken for a child in the very transaction that accepts it, so an
//! item reaches its child after one commit, not two (the accept's, then
//! the driver's take). The driver stays the authority: it says, each
//! turn, how much each of its children may still be sent
//! ([`Room::offer`]); the senders' write takes at most that
//! ([`Room::take_in`]) and, once its commit landed, leaves what it took
//! for the driver to hand out ([`Room::arrived`]). Both take on the store
//! thread, one after the other, so a child is never sent more than its
//! window.
//!
//! A child that stops taking mail between a take and its hand-out (it
//! began to drain, or ended) is not sent the item: the driver writes it
//! back to the inbox, its take undone (`Settle::Unsent`), for the next
//! child. A child whose wiring ended is withdrawn before its replay is
//! queued, so the replay always runs after any take for it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use wfhost_policy::Fact;

use crate::clock::unix_ms;
use crate::store::{Holder, MailItem, NewEvent, Store, StoreError};

/// Each deployment's [`Room`], by id, for the senders' write.
#[derive(Default)]
pub struct Rooms {
    by_deployment: Mutex<HashMap<String, Arc<Room>>>,
}

impl Rooms {
    /// The room of `deployment`, made when its driver starts.
    pub fn open(&self, deployment: &str) -> Arc<Room> {
        let room = Arc::new(Room::default());
        lock(&self.by_deployment).insert(deployment.to_owned(), Arc::clone(&room));
        room
    }

    /// Forgets `room` of `deployment` (its driver stopped), unless a newer
    /// driver of the same id replaced it.
    pub fn close(&self, deployment: &str, room: &Arc<Room>) {
        let mut rooms = lock(&self.by_deployment);
        if rooms.get(deployment).is_some_and(|r| Arc::ptr_eq(r, room)) {
            rooms.remove(deployment);
        }
    }

    /// The room of `deployment`, if it has a driver here.
    pub fn of(&self, deployment: &str) -> Option<Arc<Room>> {
        lock(&self.by_deployment).get(deployment).cloned()
    }
}

/// One child's place in a deployment's [`Room`].
#[derive(Debug, Clone)]
pub struct Open {
    /// The child.
    pub holder: Holder,
    /// Whether a take is a start (a protocol-2 child's).
    pub starts: bool,
    /// How many more items it may be sent, as the driver last said.
    pub free: usize,
    /// Taken for it by senders' writes, not yet handed out by the driver.
    outstanding: usize,
}

impl Open {
    /// A child the driver offers `free` places in its window.
    pub fn new(holder: Holder, starts: bool, free: usize) -> Self {
        Self {
            holder,
            starts,
            free,
            outstanding: 0,
        }
    }
}

/// Items taken for one child.
#[derive(Debug)]
pub struct Take {
    /// The child.
    pub holder: Holder,
    /// The items, in order.
    pub items: Vec<MailItem>,
    /// Whether their `mail_delivered` events went in the take's write (else
    /// the driver publishes them as it hands the items out).
    pub noted: bool,
}

impl Take {
    /// `items` taken for `holder` in `s`, with their `mail_delivered`
    /// events written in the same write when the store takes them.
    fn noting(s: &mut dyn Store, deployment: &str, holder: &Holder, items: Vec<MailItem>) -> Self {
        let events: Vec<NewEvent> = items
            .iter()
            .map(|m| {
                let fact = Fact::MailDelivered {
                    id: m.id,
                    attempt: m.attempt,
                    pid: holder.pid,
                };
                NewEvent {
                    at_ms: unix_ms(),
                    deployment: Some(deployment.to_owned()),
                    kind: fact.kind().to_owned(),
                    body: fact.body(),
                }
            })
            .collect();
        let noted = events.is_empty()
            || s.append_events(&events)
                .map_err(|e| tracing::debug!(deployment, error = %e, "delivery events left for the driver"))
                .is_ok();
        Self {
            holder: holder.clone(),
            items,
            noted,
        }
    }
}

/// One deployment's ledger of room, shared by its driver and the senders'
/// write.
#[derive(Default)]
pub struct Room {
    ledger: Mutex<Ledger>,
}

#[derive(Default)]
struct Ledger {
    open: Vec<Open>,
    /// Taken and committed, for the driver to hand out.
    arrived: Vec<Take>,
}

impl Room {
    /// The driver's word on its children now: those that take mail, each
    /// with the room its window has. A child's items taken but not yet
    /// handed out still count against it; a child left out has no room.
    pub fn offer(&self, children: Vec<Open>) {
        let mut ledger = lock(&self.ledger);
        let open = children
            .into_iter()
            .map(|mut c| {
                c.outstanding = ledger
                    .open
                    .iter()
                    .find(|o| o.holder.channel_id == c.holder.channel_id)
                    .map_or(0, |o| o.outstanding);
                c.free = c.free.saturating_sub(c.outstanding);
                c
            })
            .collect();
        ledger.open = open;
    }

    /// Takes the head of `deployment`'s inbox for the children with room,
    /// the emptiest first, inside the caller's write (on the store
    /// thread). What it took counts against each child at once.
    pub fn take_in(
        &self,
        s: &mut dyn Store,
        deployment: &str,
        at_ms: u64,
    ) -> Result<Vec<Take>, StoreError> {
        let mut ledger = lock(&self.ledger);
        ledger.open.sort_by_key(|o| std::cmp::Reverse(o.free));
        let mut taken = Vec::new();
        for o in ledger.open.iter_mut().filter(|o| o.free > 0) {
            let items = s.take_mail_for(deployment, &o.holder, o.free, at_ms, o.starts)?;
            if items.is_empty() {
                break;
            }
            o.free -= items.len();
            o.outstanding += items.len();
            taken.push(Take::noting(s, deployment, &o.holder, items));
        }
        Ok(taken)
    }

    /// How the write that took `taken` ended: landed, the items wait for
    /// the driver; refused, the room is given back.
    pub fn settle(&self, taken: Vec<Take>, landed: bool) {
        let mut ledger = lock(&self.ledger);
        if landed {
            ledger.arrived.extend(taken);
            return;
        }
        for t in taken {
            if let Some(o) = ledger
                .open
                .iter_mut()
                .find(|o| o.holder.channel_id == t.holder.channel_id)
            {
                o.free += t.items.len();
                o.outstanding = o.outstanding.saturating_sub(t.items.len());
            }
        }
    }

    /// Everything taken for the driver's children since it last looked.
    pub fn arrived(&self) -> Vec<Take> {
        let mut ledger = lock(&self.ledger);
        let arrived = std::mem::take(&mut ledger.arrived);
        for t in &arrived {
            if let Some(o) = ledger
                .open
                .iter_mut()
                .find(|o| o.holder.channel_id == t.holder.channel_id)
            {
                o.outstanding = o.outstanding.saturating_sub(t.items.len());
            }
        }
        arrived
    }

    /// The driver's own take of up to `n` items for `holder` (on the store
    /// thread, so it never overlaps a senders' take): at most the room
    /// the child has left, which shrinks by what came.
    pub fn take_own(
        &self,
        s: &mut dyn Store,
        deployment: &str,
        holder: &Holder,
        n: usize,
        at_ms: u64,
        starts: bool,
    ) -> Result<Take, StoreError> {
        let mut ledger = lock(&self.ledger);
        let Some(o) = ledger
            .open
            .iter_mut()
            .find(|o| o.holder.channel_id == holder.channel_id)
        else {
            return Ok(Take::noting(s, deployment, holder, Vec::new()));
        };
        let items = s.take_mail_for(deployment, holder, n.min(o.free), at_ms, starts)?;
        o.free = o.free.saturating_sub(items.len());
        Ok(Take::noting(s, deployment, holder, items))
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
