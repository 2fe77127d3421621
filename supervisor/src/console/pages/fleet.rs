//! `/fleet`: in a fleet, this host, the hosts holding leases, and who
//! owns which deployment (as `wfhost status` on a fleet host shows it).

use std::collections::BTreeSet;

use super::super::html::{self, esc};
use super::{Seen, at};
use crate::console::http::Response;
use crate::control::protocol::Request;

/// The page.
pub async fn page(seen: &Seen<'_>) -> Response {
    if seen.ctx.shared.fleet.is_none() {
        let main = html::note(
            "this supervisor runs on its own: it is not a host of a fleet ([fleet] in the config)",
        );
        return seen.page("Fleet", &main).await;
    }
    let data = match seen.ask(Request::Status).await {
        Ok(d) => d,
        Err(e) => return seen.page("Fleet", &html::refusal(&e)).await,
    };
    let empty = Vec::new();
    let deployments = data["deployments"].as_array().unwrap_or(&empty);
    let mut hosts = BTreeSet::new();
    let rows: Vec<Vec<String>> = deployments
        .iter()
        .map(|d| {
            let owner = &d["owner"];
            if let Some(h) = owner["host"].as_str() {
                hosts.insert(h.to_owned());
            }
            vec![
                html::deployment_link(d["id"].as_str().unwrap_or("?")),
                html::value(&owner["host"], 80),
                html::value(&owner["epoch"], 20),
                at(&owner["expires_ms"]),
                html::value(&owner["expired"], 10),
                html::value(&d["state"], 20),
            ]
        })
        .collect();
    let mut main = format!(
        "<p>This host: <strong>{}</strong>. Hosts holding leases: {}</p>",
        html::value(&data["host"], 80),
        esc(&hosts.into_iter().collect::<Vec<_>>().join(", "))
    );
    main.push_str(&html::table(
        &[
            "Deployment",
            "Owner",
            "Epoch",
            "Lease ends",
            "Expired",
            "State",
        ],
        &rows,
    ));
    main.push_str(&html::cli("wfhost status"));
    seen.page("Fleet", &main).await
}
