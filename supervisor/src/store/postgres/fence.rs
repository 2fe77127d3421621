//! The fence in PostgreSQL (DESIGN §10b): a write concerning a deployment
//! first calls `wfhost_fence` in its own transaction, which takes a shared
//! advisory lock for the deployment and raises [`FENCED`] unless this host
//! holds its lease at exactly the epoch its [`Fence`] names and it has not
//! run out. A takeover (and a release) takes that lock exclusively before
//! it changes the lease row, so it waits for every write already past its
//! check, and every later write sees the new epoch: a write of the old
//! owner either commits before the takeover or not at all. Advisory locks
//! live in the server's memory: unlike a row lock, a fence check writes
//! nothing to the table, and the holder's renewal never waits for its own
//! writes. A store without a fence (a single host) writes unconditioned.

use postgres::Transaction;

use super::session::{Lock, Statements, Tx};

use crate::store::fence::Fence;

/// The class of the fence's advisory locks (the first of their two keys;
/// the second is the deployment's `hashtext`), as `wfhost_fence` takes
/// them: shared by writes, exclusive for a takeover or a release.
pub(super) const FENCE_LOCKS: i32 = 2067;

/// Takes `deployment`'s fence lock exclusively in `tx`: waits for every
/// write already past its check, and holds back every later one until
/// `tx` ends (a takeover or a release changes the epoch or holder meanwhile).
pub(super) fn exclusive(tx: &mut Transaction<'_>, deployment: &str) -> Result<(), postgres::Error> {
    tx.execute(
        "SELECT pg_advisory_xact_lock($1, hashtext($2))",
        &[&FENCE_LOCKS, &deployment],
    )
    .map(drop)
}

/// The SQLSTATE `wfhost_fence` raises: the write was fenced.
pub const FENCED: &str = "WF001";

/// Whether `err` is the fence's refusal.
fn is_fenced(err: &postgres::Error) -> bool {
    err.as_db_error()
        .is_some_and(|db| db.code().code() == FENCED)
}

/// Conditions `tx` on this host holding `deployment` (the first statement
/// of every write concerning it); a refusal is also told to the lease loop.
/// Once per group: the shared lock it takes holds the lease still until
/// the group's transaction ends.
pub(super) fn check(
    tx: &mut Tx<'_>,
    fence: Option<&Fence>,
    deployment: &str,
) -> Result<(), postgres::Error> {
    let Some(fence) = fence else {
        return Ok(());
    };
    let lock = Lock::Fence(deployment.to_owned());
    if tx.holds(&lock) {
        return Ok(());
    }
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
        Err(e) => Err(e),
        Ok(_) => {
            tx.took(lock);
            Ok(())
        }
    }
}

/// Of `deployments`, those this host holds at its epochs, locked in `tx`
/// like [`check`] (a batch of events for several deployments keeps
/// the writable ones); with no fence, all of them. Each refused one is
/// told to the lease loop.
pub(super) fn writable(
    tx: &mut Tx<'_>,
    fence: Option<&Fence>,
    deployments: &[&str],
) -> Result<Vec<String>, postgres::Error> {
    let Some(fence) = fence else {
        return Ok(deployments.iter().map(|d| (*d).to_owned()).collect());
    };
    if deployments
        .iter()
        .all(|d| tx.holds(&Lock::Fence((*d).to_owned())))
    {
        return Ok(deployments.iter().map(|d| (*d).to_owned()).collect());
    }
    let (names, epochs): (Vec<String>, Vec<i64>) = fence
        .epochs()
        .into_iter()
        .filter(|(d, _)| deployments.contains(&d.as_str()))
        .unzip();
    tx.execute(
        "SELECT pg_advisory_xact_lock_shared($1, hashtext(d)) FROM unnest($2::TEXT[]) AS u(d)",
        &[&FENCE_LOCKS, &names],
    )?;
    let rows = tx.query(
        "SELECT l.deployment FROM fleet_leases l
             JOIN unnest($2::TEXT[], $3::BIGINT[]) AS h(deployment, epoch)
               ON l.deployment = h.deployment AND l.epoch = h.epoch
         WHERE l.holder = $1 AND l.expires_at > clock_timestamp()
         ORDER BY l.deployment",
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
    for h in &held {
        tx.took(Lock::Fence(h.clone()));
    }
    Ok(held)
}
