//! The deployment's mail: the writes it owes the store (acknowledgements,
//! then replays, retried in order until they land) and the inbox's head
//! spread over the replicas that take mail, the least loaded first.

use std::sync::Arc;
use std::time::Instant;

use tracing::{error, info};
use wfhost_ipc::Control;
use wfhost_policy::crew::{self, Which};
use wfhost_policy::life::RecycleCause;
use wfhost_policy::recycle::RecycleReason;
use wfhost_policy::{Fact, format_duration};

use super::Driver;
use crate::clock::unix_ms;
use crate::deployment::mail::settle;
use crate::deployment::mail::spread::{self, Hand};
use crate::deployment::mail::writes::{Next, Report};
use crate::deployment::recycle;
use crate::record;
use crate::store::rooms::{Open, Take};
use crate::store::{Holder, Landed, MailItem};

impl Driver {
    /// Spreads the head of the inbox over the replicas that take mail and
    /// have room, the least loaded first; a take the store refuses leaves
    /// them wanting (retried after the backoff).
    pub(super) async fn deliver_mail(&mut self) {
        if self.hand_out_arrived().await {
            // Mail taken for a child that stopped taking any goes back now,
            // not at the next turn something else brings.
            self.write_mail().await;
        }
        let now = Instant::now();
        if !self.writes.clear(now) {
            return;
        }
        self.offer_room();
        let hands = self.hands();
        if hands.is_empty() {
            return;
        }
        // Each holder with whether its takes are starts: a protocol-2
        // child's handler takes what it is sent; a later one says when.
        let holders: Vec<(Holder, bool)> = hands
            .iter()
            .filter_map(|h| {
                let io = &self.replicas.get(h.who)?.wired.as_ref()?.io;
                Some((settle::holder(io), io.protocol() < 3))
            })
            .collect();
        let (deployment, at) = (self.id.clone(), unix_ms());
        let single = hands.len() == 1;
        let room = Arc::clone(&self.room);
        // In the next group commit, with the senders' offers and the
        // acknowledgements that wait beside it; nothing is handed out
        // before that commit returns.
        let asked = hands.clone();
        let taken = self
            .shared()
            .store
            .call_grouped(move |s| {
                // One replica asks for all it has room for; several share
                // what waits.
                let plan = if single {
                    hands.iter().map(|h| (h.who, h.room)).collect()
                } else {
                    let counts = s.mail_counts(&deployment)?;
                    // Items waiting for an answer are not taken.
                    spread::plan(counts.inbox.saturating_sub(counts.awaiting), &hands)
                };
                let mut taken = Vec::with_capacity(plan.len());
                for (who, n) in plan {
                    let Some((holder, starts)) = hands
                        .iter()
                        .position(|h| h.who == who)
                        .and_then(|i| holders.get(i))
                    else {
                        continue;
                    };
                    // What senders' writes took for it meanwhile counts.
                    let take = room.take_own(s, &deployment, holder, n, at, *starts)?;
                    taken.push((who, n, take));
                }
                Ok(taken)
            })
            .await;
        match taken {
            Ok(Ok(taken)) => {
                // The store wrote the `mail_delivered` events with the take.
                self.shared().events_written();
                self.writes.took();
                self.mail_accepted();
                self.hand_out(asked, taken).await;
            }
            Ok(Err(e)) => self.refused("taking mail from the inbox", e.to_string(), now),
            Err(e) => self.refused("taking mail from the inbox", e.to_string(), now),
        }
    }

    /// Tells senders' writes how much each child that takes mail may
    /// still be sent (before any replay is queued, so a replay of a gone
    /// child always follows every take for it).
    pub(super) fn offer_room(&self) {
        let open = self
            .replicas
            .iter()
            .filter(|r| r.life.takes_mail())
            .filter_map(|r| {
                let w = r.wired.as_ref()?;
                Some(Open::new(
                    settle::holder(&w.io),
                    w.io.protocol() < 3,
                    w.dispatch.room(),
                ))
            })
            .collect();
        self.room.offer(open);
    }

    /// Sends each child what senders' writes took for it; mail taken for
    /// a child that no longer takes any is owed back to the inbox, for the
    /// next child (true then: the caller writes it at once).
    async fn hand_out_arrived(&mut self) -> bool {
        let mut unsent = false;
        for Take {
            holder,
            items,
            noted,
        } in self.room.arrived()
        {
            let Some(who) = self.replicas.iter().position(|r| {
                r.life.takes_mail()
                    && r.wired
                        .as_ref()
                        .is_some_and(|w| w.io.channel_id == holder.channel_id)
            }) else {
                tracing::debug!(deployment = %self.id, n = items.len(),
                    "mail taken for a child that no longer takes any goes back to the inbox");
                for item in items {
                    self.writes.report(Report::Unsent {
                        holder: holder.clone(),
                        id: item.id,
                    });
                }
                unsent = true;
                continue;
            };
            let n = items.len();
            self.send_items(who, items, noted).await;
            if let Some(w) = self.replicas.get_mut(who).and_then(|r| r.wired.as_mut()) {
                w.dispatch.took(n, n);
            }
        }
        unsent
    }

    /// The replicas that take mail now and have room, with what they hold.
    fn hands(&self) -> Vec<Hand> {
        self.replicas
            .iter()
            .enumerate()
            .filter(|(_, r)| r.life.takes_mail())
            .filter_map(|(who, r)| {
                let d = &r.wired.as_ref()?.dispatch;
                let room = d.to_take()?;
                Some(Hand {
                    who,
                    held: d.in_flight(),
                    room,
                })
            })
            .collect()
    }

    /// Sends each replica the items taken for it (`who`, how many were
    /// asked, what came).
    async fn hand_out(&mut self, hands: Vec<Hand>, taken: Vec<(usize, usize, Take)>) {
        let total_room: usize = hands.iter().map(|h| h.room).sum();
        let mut planned = 0;
        let mut short = false;
        for (who, asked, Take { items, noted, .. }) in taken {
            planned += asked;
            let got = items.len();
            short |= got < asked;
            self.send_items(who, items, noted).await;
            if let Some(w) = self.replicas.get_mut(who).and_then(|r| r.wired.as_mut()) {
                w.dispatch.took(got, asked);
            }
        }
        // Everything that waited was taken: nobody asks again until new
        // mail arrives (or an ack frees room).
        if short || planned < total_room {
            for h in hands {
                if let Some(w) = self.replicas.get_mut(h.who).and_then(|r| r.wired.as_mut()) {
                    w.dispatch.took(0, 1);
                }
            }
        }
    }

    /// Sends replica `who` the items taken for it, each tracked for its
    /// deadline and published as delivered unless the take wrote that
    /// (`noted`).
    async fn send_items(&mut self, who: usize, items: Vec<MailItem>, noted: bool) {
        let Some(r) = self.replicas.get_mut(who) else {
            return;
        };
        let Some(w) = r.wired.as_mut() else { return };
        for item in items {
            w.deadlines.track(&item, r.cfg.mail_deadline);
            w.holding.delivered(item.id);
            if !noted {
                let delivered = Fact::MailDelivered {
                    id: item.id,
                    attempt: item.attempt,
                    pid: w.io.pid,
                };
                self.parts.shared.publish(Some(&r.cfg.id), &delivered);
            }
            // A failed send ends the wiring soon; the item is in
            // processing and goes back to the inbox then.
            let message = Control::Mail {
                id: item.id,
                attempt: item.attempt,
                payload: item.payload,
            };
            if let Err(e) = w.io.send(&r.cfg, message).await {
                tracing::debug!(deployment = %r.label, pid = w.io.pid, error = %e, "mail not sent");
                break;
            }
        }
    }

    /// Writes what this deployment owes the store, in order, until one is
    /// refused (then everything waits for the retry).
    pub(super) async fn write_mail(&mut self) {
        // A child that no longer takes mail gets no more before its
        // replay is queued below.
        self.offer_room();
        let id = self.id.clone();
        loop {
            let now = Instant::now();
            let written = match self.writes.next(now) {
                None => return,
                Some(Next::Acks(reports)) => {
                    let reports = reports.to_vec();
                    match settle::write_reports(self.shared(), &id, &reports).await {
                        Ok(landed) => {
                            for (report, landed) in reports.iter().zip(landed) {
                                self.landed(report, landed).await;
                            }
                            Ok(("mail acknowledgements", reports.len()))
                        }
                        Err(e) => Err(("recording mail acknowledgements", e)),
                    }
                }
                Some(Next::Replay(r)) => {
                    let r = r.clone();
                    let max = self.cfg().max_deliveries;
                    match settle::replay(self.shared(), &id, &r, max).await {
                        Ok(()) => {
                            // What came back is for whichever replica
                            // takes mail now.
                            self.mail_waits();
                            Ok(("the replay of unacknowledged mail", 0))
                        }
                        Err(e) => Err(("returning unacknowledged mail to the inbox", e)),
                    }
                }
            };
            match written {
                Ok((what, acks)) => {
                    if self.writes.error.is_some() {
                        info!(deployment = %id, "the store accepts mail writes again: {what} landed");
                    }
                    self.writes.landed(acks);
                    self.mail_accepted();
                }
                Err((what, e)) => return self.refused(what, e, now),
            }
        }
    }

    /// What follows a report that landed: an ack frees its child's window;
    /// a question first asked is journaled, one answered before is sent
    /// to the child; a give-back frees the window and is published.
    async fn landed(&mut self, report: &Report, landed: Landed) {
        let id = self.id.clone();
        match (report, landed) {
            (_, Landed::Ignored) => {}
            (Report::Done(ack), _) => self.acked(ack.holder.pid),
            (Report::Asked(q), Landed::Opened) => {
                let prompt = serde_json::from_slice(&q.prompt).unwrap_or_default();
                let fact = Fact::QuestionAsked {
                    id: q.id,
                    key: q.key.clone(),
                    prompt,
                };
                record::log(&id, &fact);
                self.shared().record(Some(&id), &fact);
            }
            (Report::Asked(q), Landed::Answered(value)) => {
                self.answer(&q.holder, q.id, &q.key, value).await;
            }
            (Report::GivenBack { holder, id: item }, _) => {
                self.released(holder.pid);
                let fact = Fact::MailGivenBack {
                    id: *item,
                    pid: holder.pid,
                };
                record::log(&id, &fact);
                self.shared().publish(Some(&id), &fact);
            }
            // Back in the inbox: whoever takes mail now gets it.
            (Report::Unsent { .. }, _) => self.mail_waits(),
            (Report::Started { .. } | Report::Asked(_), _) => {}
        }
    }

    /// Sends the answer to question `key` of item `id` to the child that
    /// holds it, if it still runs (else its next attempt's `ask` gets it
    /// from the store).
    pub(super) async fn answer(&mut self, holder: &Holder, id: u64, key: &str, value: Vec<u8>) {
        let Some(r) = self.replicas.iter_mut().find(|r| {
            r.wired
                .as_ref()
                .is_some_and(|w| w.io.channel_id == holder.channel_id)
        }) else {
            return;
        };
        let Some(w) = r.wired.as_mut() else { return };
        if w.io.protocol() < 3 {
            return;
        }
        let message = Control::Answer {
            id,
            key: key.to_owned(),
            value,
        };
        if let Err(e) = w.io.send(&r.cfg, message).await {
            tracing::debug!(deployment = %r.label, pid = w.io.pid, error = %e, "answer not sent");
        }
    }

    /// Mail came back to the inbox or became takeable (an answer stored):
    /// every replica may take again.
    pub(super) fn mail_waits(&mut self) {
        for w in self.replicas.iter_mut().filter_map(|r| r.wired.as_mut()) {
            w.dispatch.want();
        }
    }

    /// An item child `pid` held left it unfinished (given back): its
    /// window frees.
    fn released(&mut self, pid: u32) {
        if let Some(w) = self
            .replicas
            .iter_mut()
            .find(|r| r.pid() == Some(pid))
            .and_then(|r| r.wired.as_mut())
        {
            w.dispatch.acked();
        }
    }

    /// An acknowledgement of child `pid` landed: its window frees, and
    /// its `max_mail` bound may be reached (once per child).
    pub(super) fn acked(&mut self, pid: u32) {
        let Some(r) = self.replicas.iter_mut().find(|r| r.pid() == Some(pid)) else {
            return;
        };
        let Some(w) = r.wired.as_mut() else { return };
        w.dispatch.acked();
        w.mail_done = w.mail_done.saturating_add(1);
        let bounds = recycle::bounds(&r.cfg);
        let jitter = recycle::jitter(&w.io.channel_id);
        if w.mail_bound_asked || !bounds.mail_passed(w.mail_done, jitter) {
            return;
        }
        w.mail_bound_asked = true;
        let reason = recycle::mail_reason(w.mail_done, &bounds, jitter);
        info!(deployment = %r.label, pid, reason = %reason, "recycle bound passed");
        self.crew_inputs.push_back(crew::Input::Recycle {
            which: Which::One(r.index),
            cause: RecycleCause::Bound(RecycleReason::MaxMail),
            reason,
            waiter: None,
        });
    }

    /// A mail write the store refused: kept, retried, shown in status.
    pub(super) fn refused(&mut self, what: &str, error: String, now: Instant) {
        let (attempt, delay) = self.writes.refused(error.clone(), now);
        let health = &self.shared().backlog.health;
        health.refused(&format!("mail of {}", self.id), &error);
        if attempt == 1 || attempt.is_multiple_of(10) {
            error!(deployment = %self.id, attempt, retry_in = %format_duration(delay), error = %error,
                "the store refused {what}; it is kept and retried, nothing is lost");
        }
    }

    /// The store took this deployment's mail writes: no longer refusing
    /// at the top of status once nothing of it waits for a retry.
    fn mail_accepted(&self) {
        if self.writes.error.is_none() {
            let health = &self.shared().backlog.health;
            health.accepted(&format!("mail of {}", self.id));
        }
    }
}
