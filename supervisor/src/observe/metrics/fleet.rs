//! The fleet's families (DESIGN §10b): which host owns what, as the
//! database says when scraped, so one scrape of any host shows the whole
//! fleet's ownership, and each host's own count of leases held.

use std::fmt::Write as _;

use super::render::escape_label;
use crate::fleet::{Fleet, view};

/// The fleet's exposition text; the ownership families are left out when
/// the database cannot be read (the rest of the scrape still answers).
pub async fn render(fleet: &Fleet) -> String {
    let mut out = String::new();
    let held = fleet.fence.epochs().len();
    let _ = writeln!(
        out,
        "# HELP wfhost_fleet_leases_held Deployment leases this host holds and acts on.\n\
         # TYPE wfhost_fleet_leases_held gauge\n\
         wfhost_fleet_leases_held{{host=\"{}\"}} {held}",
        escape_label(fleet.host())
    );
    let Ok(owners) = view::owners(fleet).await else {
        return out;
    };
    let _ = writeln!(
        out,
        "# HELP wfhost_fleet_lease_owner 1 for the host holding each deployment's unexpired lease.\n\
         # TYPE wfhost_fleet_lease_owner gauge"
    );
    for o in &owners {
        if let Some(host) = view::holder(o) {
            let _ = writeln!(
                out,
                "wfhost_fleet_lease_owner{{deployment=\"{}\",host=\"{}\"}} 1",
                escape_label(&o.deployment),
                escape_label(host)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP wfhost_fleet_lease_epoch Each deployment's lease epoch (raised by every acquisition).\n\
         # TYPE wfhost_fleet_lease_epoch gauge"
    );
    for o in &owners {
        let _ = writeln!(
            out,
            "wfhost_fleet_lease_epoch{{deployment=\"{}\"}} {}",
            escape_label(&o.deployment),
            o.epoch
        );
    }
    out
}
