//! `events`: the durable event stream from a cursor, optionally followed
//! live, with no gap and no duplicate; optionally only one deployment's,
//! or one mail item's, a followed item's stream ending after its end.

use tokio::net::UnixStream;

use crate::control::protocol::{self, Response};
use crate::exit;
use crate::shared::Shared;
use crate::store::EventRecord;

/// Which events a follower wants.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only this item's (and, followed, until its end).
    pub mail: Option<u64>,
    /// Only this deployment's.
    pub deployment: Option<String>,
}

impl Filter {
    fn admits(&self, e: &EventRecord) -> bool {
        self.mail.is_none_or(|id| e.mail_id() == Some(id))
            && self
                .deployment
                .as_deref()
                .is_none_or(|d| e.deployment.as_deref() == Some(d))
    }
}

/// Refuses a filter naming an item that is not stored (never accepted,
/// or pruned after `mail_retention`): its stream would wait for nothing.
pub async fn known(shared: &Shared, filter: &Filter) -> Result<(), Response> {
    let Some(id) = filter.mail else {
        return Ok(());
    };
    let found = shared.reader.call(move |s| s.mail_item(id)).await;
    match found {
        Ok(Ok(Some(_))) => Ok(()),
        Ok(Ok(None)) => Err(Response::failed(
            exit::FAILED,
            format!(
                "no mail item {id} is stored (never accepted, or done and pruned after mail_retention)\n  help: `wfhost mail list` shows the items there are"
            ),
        )),
        Ok(Err(e)) => Err(Response::failed(exit::FAILED, e.to_string())),
        Err(e) => Err(Response::failed(exit::FAILED, e.to_string())),
    }
}

/// Whether the stream goes on after a page.
enum Next {
    More,
    /// The followed item ended: its end was written.
    Ended,
}

/// Events from the cursor, then (with `follow`) new ones as they are
/// committed, with no gap and no duplicate: the follower subscribes to the
/// commit ticks first, then reads the durable log from its cursor, and
/// reads from the cursor again after every tick.
pub async fn stream(
    mut stream: UnixStream,
    shared: &Shared,
    after: u64,
    follow: bool,
    filter: Filter,
) {
    let mut ticks = shared.events.subscribe();
    let started = Response::ok(serde_json::json!({"streaming": true}));
    if protocol::write_message(&mut stream, &started)
        .await
        .is_err()
    {
        return;
    }
    let mut last = after;
    match backlog(&mut stream, shared, &mut last, &filter).await {
        Ok(Next::More) if follow => {}
        _ => return,
    }
    let mut probe = [0u8; 1];
    loop {
        tokio::select! {
            tick = ticks.changed() => {
                if tick.is_err() {
                    return;
                }
                match backlog(&mut stream, shared, &mut last, &filter).await {
                    Ok(Next::More) => {}
                    Ok(Next::Ended) | Err(()) => return,
                }
            }
            // The follower hung up (or sent something it should not): done.
            _ = tokio::io::AsyncReadExt::read(&mut stream, &mut probe) => return,
        }
    }
}

/// Writes every stored event after `*last` that `filter` admits,
/// advancing it; stops after a followed item's end.
async fn backlog(
    stream: &mut UnixStream,
    shared: &Shared,
    last: &mut u64,
    filter: &Filter,
) -> Result<Next, ()> {
    const PAGE: usize = 1000;
    loop {
        let after = *last;
        let page = match shared
            .reader
            .call(move |s| s.events_after(after, PAGE))
            .await
        {
            Ok(Ok(page)) => page,
            _ => return Err(()),
        };
        for event in &page {
            *last = event.seq;
            if !filter.admits(event) {
                continue;
            }
            protocol::write_message(stream, event)
                .await
                .map_err(|_| ())?;
            if filter.mail.is_some() && event.ends_item() {
                return Ok(Next::Ended);
            }
        }
        if page.len() < PAGE {
            return Ok(Next::More);
        }
    }
}
