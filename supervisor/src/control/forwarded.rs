//! Requests other hosts forwarded to this one (`control::forward`), each
//! answered on a task of its own through the database, exactly as the
//! control socket would have answered it here. The fleet's lease loop,
//! which hears that one came, calls the [`answerer`] made here.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tracing::warn;

use crate::control::handlers::{self, Context};
use crate::control::protocol::{Request, Response};
use crate::deployment::Registry;
use crate::exit;
use crate::fleet::Fleet;
use crate::shared::Shared;
use crate::store::postgres::lease::Asked;

/// No fetch runs.
const IDLE: u8 = 0;
/// A fetch runs.
const FETCHING: u8 = 1;
/// A fetch runs, and another was asked for meanwhile.
const AGAIN: u8 = 2;

/// What the lease loop calls when another host forwarded a request here:
/// this host's forwarded requests are looked up and answered.
pub fn answerer(
    fleet: Arc<Fleet>,
    shared: Arc<Shared>,
    registry: Registry,
) -> Arc<dyn Fn() + Send + Sync> {
    let serving = Serving::default();
    Arc::new(move || serving.start(&fleet, &shared, &registry))
}

/// The forwarded requests being answered.
#[derive(Default)]
struct Serving {
    busy: Arc<Mutex<HashSet<i64>>>,
    fetch: Arc<AtomicU8>,
}

impl Serving {
    /// Looks for requests forwarded to this host and answers each new one;
    /// asked again while looking, it looks once more afterwards (a
    /// notification may have come for a request the look missed).
    fn start(&self, fleet: &Arc<Fleet>, shared: &Arc<Shared>, registry: &Registry) {
        if self.fetch.fetch_max(FETCHING, Ordering::AcqRel) != IDLE {
            self.fetch.store(AGAIN, Ordering::Release);
            return;
        }
        let (busy, fetch, fleet) = (self.busy.clone(), self.fetch.clone(), fleet.clone());
        let ctx = Context {
            registry: registry.clone(),
            shared: shared.clone(),
            // Reload and stop are never forwarded (`handlers::fleet::local`
            // refuses them): a control loop that takes none.
            host: tokio::sync::mpsc::channel(1).0,
            // Forwarded requests carry no payloads (sends are never
            // forwarded): a budget of their own.
            budget: Arc::default(),
        };
        tokio::spawn(async move {
            loop {
                let host = fleet.host().to_owned();
                let asked = fleet.query.call(move |s| s.fleet_asked(&host)).await;
                match asked {
                    Ok(Ok(asked)) => {
                        for a in asked {
                            let new = busy.lock().unwrap_or_else(|p| p.into_inner()).insert(a.id);
                            if new {
                                tokio::spawn(serve(a, fleet.clone(), ctx.clone(), busy.clone()));
                            }
                        }
                    }
                    Ok(Err(e)) => {
                        warn!(error = %e, "cannot read the requests forwarded to this host; the next round looks again")
                    }
                    Err(_) => return,
                }
                if fetch
                    .compare_exchange(FETCHING, IDLE, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return;
                }
                fetch.store(FETCHING, Ordering::Release);
            }
        });
    }
}

/// Answers one forwarded request and stores the answer.
async fn serve(asked: Asked, fleet: Arc<Fleet>, ctx: Context, busy: Arc<Mutex<HashSet<i64>>>) {
    let response = match serde_json::from_str::<Request>(&asked.request) {
        Ok(request) => handlers::fleet::local(request, &asked.deployment, &ctx).await,
        Err(e) => Response::failed(
            exit::USAGE,
            format!(
                "host {} forwarded a request this host cannot read ({e}); use the same wfhost version on every host",
                asked.from
            ),
        ),
    };
    let text = serde_json::to_string(&response).unwrap_or_else(|e| {
        format!("{{\"ok\":false,\"code\":1,\"error\":\"cannot encode the answer: {e}\"}}")
    });
    let id = asked.id;
    if let Ok(Err(e)) = fleet.query.call(move |s| s.fleet_answer(id, &text)).await {
        warn!(request = id, from = %asked.from, error = %e, "cannot store the answer to a forwarded request; its sender is told its owner did not answer");
    }
    busy.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
}
