//! The fence in PostgreSQL (DESIGN §10b): a write concerning a deployment
//! first calls `wfhost_fence` in its own transaction, which takes a key
//! share lock on the deployment's lease row and raises [`FENCED`] unless
//! this host holds it at exactly the epoch its [`Fence`] names and it has
//! not run out. A takeover locks that row `FOR UPDATE` before it changes
//! it, so it waits for every write already past its check, and every later
//! write sees the new epoch: a write of the old owner either commits
//! before the takeover or not at all. The holder's own renewal (`FOR NO
//! KEY UPDATE`) does not wait for its writes. A store without a fence (a
//! single host) writes unconditioned.

use postgres::Transaction;

use crate::store::fence::Fence;

/// The SQLSTATE `wfhost_fence` raises: the write was fenced.
pub const FENCED: &str = "WF001";

/// Whether `err` is the fence's refusal.
fn is_fenced(err: &postgres::Error) -> bool {
    err.as_db_error()
        .is_some_and(|db| db.code().code() == FENCED)
}

/// Conditions `tx` on this host holding `deployment` (the first statement
/// of every write concerning it); a refusal is also told to the lease loop.
pub(super) fn check(
    tx: &mut Transaction<'_>,
    fence: Option<&Fence>,
    deployment: &str,
) -> Result<(), postgres::Error> {
    let Some(fence) = fence else {
        return Ok(());
    };
    // No epoch: not held here (or past its deadline); the database says so.
    let epoch = fence.epoch(deployment).unwrap_or(-1);
    let checked = tx.execute(
        "SELECT wfhost_fence($1, $2, $3)",
        &[&deployment, &fence.host(), &epoch],
    );
    match checked {
        Err(e) if is_fenced(&e) => {
            fence.refused(deployment);
            Err(e)
        }
        other => other.map(drop),
    }
}

/// Of `deployments`, those this host holds at its epochs, locked in `tx`
/// like [`check`] (a batch of events for several deployments keeps
/// the writable ones); with no fence, all of them. Each refused one is
/// told to the lease loop.
pub(super) fn writable(
    tx: &mut Transaction<'_>,
    fence: Option<&Fence>,
    deployments: &[&str],
) -> Result<Vec<String>, postgres::Error> {
    let Some(fence) = fence else {
        return Ok(deployments.iter().map(|d| (*d).to_owned()).collect());
    };
    let (names, epochs): (Vec<String>, Vec<i64>) = fence
        .epochs()
        .into_iter()
        .filter(|(d, _)| deployments.contains(&d.as_str()))
        .unzip();
    let rows = tx.query(
        "SELECT l.deployment FROM fleet_leases l
             JOIN unnest($2::TEXT[], $3::BIGINT[]) AS h(deployment, epoch)
               ON l.deployment = h.deployment AND l.epoch = h.epoch
         WHERE l.holder = $1 AND l.expires_at > clock_timestamp()
         ORDER BY l.deployment FOR KEY SHARE OF l",
        &[&fence.host(), &names, &epochs],
    )?;
    let held = rows
        .iter()
        .map(|r| r.try_get(0))
        .collect::<Result<Vec<String>, _>>()?;
    for d in deployments {
        if !held.iter().any(|h| h == d) {
            fence.refused(d);
        }
    }
    Ok(held)
}
