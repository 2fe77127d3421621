//! The fleet's statements (DESIGN §10b): heartbeats, leases as
//! compare-and-set on their row (acquire, renew, release, take over),
//! every expiry judged by the database's clock; host keys; the owners'
//! status snapshots; forwarded requests. The rules that decide what to
//! run are `wfhost_policy::lease`; these only carry them out, re-checking
//! each condition in the statement itself so a decision made on a stale
//! read changes nothing.

use ed25519_dalek::VerifyingKey;
use wfhost_ipc::KeyId;

use super::{PostgresStore, col, fence};
use crate::store::StoreError;
use wfhost_policy::lease::{Claim, HostRow, LeaseRow, View};

/// A timestamp column as Unix milliseconds.
macro_rules! ms {
    ($col:literal) => {
        concat!("(extract(epoch FROM ", $col, ") * 1000)::BIGINT")
    };
}

/// A lease this host just took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acquired {
    /// Its new epoch.
    pub epoch: i64,
    /// Who held it before, if anyone.
    pub previous: Option<String>,
}

/// One deployment's owner as `status` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Owner {
    /// The deployment.
    pub deployment: String,
    /// Its holder; none once released.
    pub holder: Option<String>,
    /// Its epoch.
    pub epoch: i64,
    /// When it runs out (Unix ms, the database's clock).
    pub expires_ms: i64,
    /// Whether it has run out by the database's clock.
    pub expired: bool,
    /// The holder's last status snapshot of it.
    pub status: Option<serde_json::Value>,
}

/// A registered host key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostKey {
    /// The host.
    pub host: String,
    /// Its public key.
    pub key: VerifyingKey,
}

/// A request forwarded to this host, not yet answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asked {
    /// Its id.
    pub id: i64,
    /// The deployment.
    pub deployment: String,
    /// Who asked.
    pub from: String,
    /// The request (control protocol JSON).
    pub request: String,
}

impl PostgresStore {
    /// Enters `host` into the fleet (heartbeating, not stopping) and
    /// registers its journal key; a key another host registered first is
    /// refused, since each record names its signer by its key.
    pub fn fleet_join(
        &mut self,
        host: &str,
        key: &VerifyingKey,
        capacity: u32,
    ) -> Result<(), StoreError> {
        let id = KeyId::of(key);
        let capacity = i32::try_from(capacity).unwrap_or(i32::MAX);
        // What `wfhost hosts` shows of this host's connections.
        let connection = self.encryption().to_string();
        let client = self.client()?;
        let result = (|| -> Result<Option<String>, postgres::Error> {
            let mut tx = client.transaction()?;
            tx.execute(
                "INSERT INTO fleet_hosts (host_id, started_at, heartbeat_at, stopping, connection, capacity)
                 VALUES ($1, now(), now(), false, $2, $3)
                 ON CONFLICT (host_id) DO UPDATE SET started_at = now(), heartbeat_at = now(),
                     stopping = false, connection = $2, capacity = $3",
                &[&host, &connection, &capacity],
            )?;
            tx.execute(
                "INSERT INTO fleet_keys (key_id, host_id, public_key) VALUES ($1, $2, $3)
                 ON CONFLICT (key_id) DO NOTHING",
                &[&id.0.as_slice(), &host, &key.as_bytes().as_slice()],
            )?;
            let owner: String = tx
                .query_one(
                    "SELECT host_id FROM fleet_keys WHERE key_id = $1",
                    &[&id.0.as_slice()],
                )?
                .try_get(0)?;
            if owner != host {
                return Ok(Some(owner));
            }
            tx.commit()?;
            Ok(None)
        })();
        match result.map_err(|e| self.fail("joining the fleet", &e))? {
            None => Ok(()),
            Some(owner) => Err(StoreError::Corrupt {
                location: self.location.clone(),
                what: format!(
                    "the signing key {id} is registered to host {owner:?}, not {host:?}: every host of a fleet signs with a key of its own (give this host its own signing_key, or its own state_dir, which gets one)"
                ),
            }),
        }
    }

    /// Takes `host` out of the fleet at a graceful stop: its row goes, so
    /// the others' fair shares no longer count it.
    pub fn fleet_leave(&mut self, host: &str) -> Result<(), StoreError> {
        let result = self
            .client()?
            .execute("DELETE FROM fleet_hosts WHERE host_id = $1", &[&host]);
        result
            .map(drop)
            .map_err(|e| self.fail("leaving the fleet", &e))
    }

    /// The database's clock, the hosts and every lease row.
    pub fn fleet_view(&mut self) -> Result<View, StoreError> {
        let client = self.client()?;
        let read =
            (|| -> Result<(i64, Vec<postgres::Row>, Vec<postgres::Row>), postgres::Error> {
                let mut tx = client.build_transaction().read_only(true).start()?;
                let now: i64 = tx
                    .query_one(concat!("SELECT ", ms!("clock_timestamp()")), &[])?
                    .try_get(0)?;
                let hosts = tx.query(
                    concat!(
                        "SELECT host_id, ",
                        ms!("heartbeat_at"),
                        ", stopping, EXISTS (SELECT 1 FROM fleet_maintenance m
                                            WHERE m.host_id = fleet_hosts.host_id), capacity
                         FROM fleet_hosts"
                    ),
                    &[],
                )?;
                let leases = tx.query(
                    concat!(
                        "SELECT deployment, epoch, holder, ",
                        ms!("expires_at"),
                        ", reserved_for FROM fleet_leases"
                    ),
                    &[],
                )?;
                tx.commit()?;
                Ok((now, hosts, leases))
            })();
        let (now_ms, hosts, leases) =
            read.map_err(|e| self.fail("reading the fleet's leases", &e))?;
        let parse = || -> Result<View, String> {
            Ok(View {
                now_ms,
                hosts: hosts
                    .iter()
                    .map(|r| {
                        Ok(HostRow {
                            host: col(r, 0)?,
                            heartbeat_ms: col(r, 1)?,
                            stopping: col(r, 2)?,
                            paused: col(r, 3)?,
                            capacity: u32::try_from(col::<i32>(r, 4)?).unwrap_or(1),
                        })
                    })
                    .collect::<Result<_, String>>()?,
                leases: leases
                    .iter()
                    .map(|r| {
                        Ok(LeaseRow {
                            deployment: col(r, 0)?,
                            epoch: col(r, 1)?,
                            holder: col(r, 2)?,
                            expires_ms: col(r, 3)?,
                            reserved_for: col(r, 4)?,
                        })
                    })
                    .collect::<Result<_, String>>()?,
            })
        };
        parse().map_err(|what| self.corrupt(what))
    }

    /// One renewal: `host`'s heartbeat (and whether it is `stopping`) and
    /// every lease it holds at its epoch, extended by `ttl_ms` from the
    /// database's now, in one statement; a status snapshot is stored with
    /// each lease that has one. Returns the leases renewed; a held one
    /// missing is lost (taken over, or run out).
    pub fn fleet_renew(
        &mut self,
        host: &str,
        ttl_ms: i64,
        held: &[(String, i64, Option<String>)],
        stopping: bool,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        let names: Vec<&str> = held.iter().map(|(d, _, _)| d.as_str()).collect();
        let epochs: Vec<i64> = held.iter().map(|(_, e, _)| *e).collect();
        let status: Vec<Option<&str>> = held.iter().map(|(_, _, s)| s.as_deref()).collect();
        // The holder's writes in flight hold only advisory locks
        // (`fence.rs`), so they never hold its renewal back.
        let rows = self.client()?.query(
            "WITH beat AS (
                 INSERT INTO fleet_hosts (host_id, started_at, heartbeat_at, stopping)
                 VALUES ($1, now(), now(), $5)
                 ON CONFLICT (host_id) DO UPDATE SET heartbeat_at = now(), stopping = excluded.stopping
             ), mine AS (
                 SELECT l.deployment, m.status FROM fleet_leases l
                     JOIN unnest($3::TEXT[], $4::BIGINT[], $6::TEXT[]) AS m(deployment, epoch, status)
                       ON l.deployment = m.deployment AND l.epoch = m.epoch
                 WHERE l.holder = $1 AND l.expires_at > now()
                 ORDER BY l.deployment FOR NO KEY UPDATE OF l
             )
             UPDATE fleet_leases l SET expires_at = now() + $2::BIGINT * interval '1 millisecond',
                 status = coalesce(mine.status, l.status)
             FROM mine WHERE l.deployment = mine.deployment
             RETURNING l.deployment, l.epoch",
            &[&host, &ttl_ms, &names, &epochs, &stopping, &status],
        );
        let rows = rows.map_err(|e| self.fail("renewing the leases", &e))?;
        rows.iter()
            .map(|r| Ok((col(r, 0)?, col(r, 1)?)))
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }

    /// Takes `deployment`'s lease for `host` by `claim` (compare-and-set on
    /// its epoch, the claim's condition re-checked by the database's
    /// clock), for `ttl_ms`; `None` when another host was first or the
    /// lease is no longer claimable.
    pub fn fleet_acquire(
        &mut self,
        host: &str,
        deployment: &str,
        claim: &Claim,
        ttl_ms: i64,
        grace_ms: i64,
    ) -> Result<Option<Acquired>, StoreError> {
        let client = self.client()?;
        let row = match claim {
            Claim::New => client.query_opt(
                "INSERT INTO fleet_leases (deployment, epoch, holder, expires_at, acquired_at)
                 SELECT $1, 1, $2, now() + $3::BIGINT * interval '1 millisecond', now()
                 WHERE NOT EXISTS (SELECT 1 FROM fleet_maintenance WHERE host_id = $2)
                 ON CONFLICT (deployment) DO NOTHING
                 RETURNING epoch, previous",
                &[&deployment, &host, &ttl_ms],
            ),
            Claim::Released { epoch } | Claim::Expired { epoch, .. } | Claim::Stale { epoch } => {
                (|| {
                    let mut tx = client.transaction()?;
                    // Waits for the old holder's writes past their fence.
                    fence::exclusive(&mut tx, deployment)?;
                    tx.execute(
                        "SELECT 1 FROM fleet_leases WHERE deployment = $1 FOR UPDATE",
                        &[&deployment],
                    )?;
                    let row = tx.query_opt(
                        "UPDATE fleet_leases SET epoch = epoch + 1, holder = $2,
                             previous = coalesce(holder, previous), reserved_for = NULL,
                             expires_at = now() + $3::BIGINT * interval '1 millisecond',
                             acquired_at = now(), status = NULL
                         WHERE deployment = $1 AND epoch = $4 AND (
                             (holder IS NULL AND (reserved_for IS NULL OR reserved_for = $2 OR expires_at <= now()))
                             OR holder = $2
                             OR expires_at + $5::BIGINT * interval '1 millisecond' < now())
                           AND NOT EXISTS (SELECT 1 FROM fleet_maintenance WHERE host_id = $2)
                         RETURNING epoch, previous",
                        &[&deployment, &host, &ttl_ms, epoch, &grace_ms],
                    )?;
                    tx.commit()?;
                    Ok(row)
                })()
            }
        };
        let row = row.map_err(|e| self.fail("acquiring a lease", &e))?;
        row.map(|r| {
            Ok(Acquired {
                epoch: col(&r, 0)?,
                previous: col(&r, 1)?,
            })
        })
        .transpose()
        .map_err(|what: String| self.corrupt(what))
    }

    /// Releases `host`'s lease of `deployment` at `epoch` (its task has
    /// ended: nothing runs for it here any more), handed to `to` for
    /// `ttl_ms` if given; false if it was no longer held at that epoch.
    pub fn fleet_release(
        &mut self,
        host: &str,
        deployment: &str,
        epoch: i64,
        to: Option<&str>,
        ttl_ms: i64,
    ) -> Result<bool, StoreError> {
        let client = self.client()?;
        let changed = (|| {
            let mut tx = client.transaction()?;
            fence::exclusive(&mut tx, deployment)?;
            tx.execute(
                "SELECT 1 FROM fleet_leases WHERE deployment = $1 FOR UPDATE",
                &[&deployment],
            )?;
            let n = tx.execute(
                "UPDATE fleet_leases SET holder = NULL, previous = holder, reserved_for = $4,
                     expires_at = CASE WHEN $4::TEXT IS NULL THEN now()
                                       ELSE now() + $5::BIGINT * interval '1 millisecond' END
                 WHERE deployment = $1 AND holder = $2 AND epoch = $3",
                &[&deployment, &host, &epoch, &to, &ttl_ms],
            )?;
            tx.commit()?;
            Ok(n)
        })();
        changed
            .map(|n| n == 1)
            .map_err(|e| self.fail("releasing a lease", &e))
    }

    /// Every lease row with its owner's status snapshot, by deployment.
    pub fn fleet_owners(&mut self) -> Result<Vec<Owner>, StoreError> {
        let rows = self.client()?.query(
            concat!(
                "SELECT deployment, holder, epoch, ",
                ms!("expires_at"),
                ", expires_at <= clock_timestamp(), status FROM fleet_leases ORDER BY deployment"
            ),
            &[],
        );
        let rows = rows.map_err(|e| self.fail("reading the fleet's owners", &e))?;
        rows.iter()
            .map(|r| {
                let status: Option<String> = col(r, 5)?;
                Ok(Owner {
                    deployment: col(r, 0)?,
                    holder: col(r, 1)?,
                    epoch: col(r, 2)?,
                    expires_ms: col(r, 3)?,
                    expired: col(r, 4)?,
                    status: status.and_then(|s| serde_json::from_str(&s).ok()),
                })
            })
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }

    /// Every registered host key.
    pub fn fleet_keys(&mut self) -> Result<Vec<HostKey>, StoreError> {
        let rows = self.client()?.query(
            "SELECT host_id, public_key FROM fleet_keys ORDER BY host_id, registered_at",
            &[],
        );
        let rows = rows.map_err(|e| self.fail("reading the fleet's host keys", &e))?;
        rows.iter()
            .map(|r| {
                let host: String = col(r, 0)?;
                let bytes: Vec<u8> = col(r, 1)?;
                let key = <[u8; 32]>::try_from(bytes.as_slice())
                    .ok()
                    .and_then(|b| VerifyingKey::from_bytes(&b).ok())
                    .ok_or_else(|| {
                        format!(
                            "host {host:?} has a registered key that is not an ed25519 public key"
                        )
                    })?;
                Ok(HostKey { host, key })
            })
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }

    /// Forwards `request` (control protocol JSON) about `deployment` from
    /// `from` to its owner `to`; returns the request's id.
    pub fn fleet_ask(
        &mut self,
        from: &str,
        to: &str,
        deployment: &str,
        request: &str,
    ) -> Result<i64, StoreError> {
        let row = self.client()?.query_one(
            "INSERT INTO fleet_requests (deployment, to_host, from_host, request)
             VALUES ($1, $2, $3, $4) RETURNING id",
            &[&deployment, &to, &from, &request],
        );
        let row = row.map_err(|e| self.fail("forwarding a request", &e))?;
        col(&row, 0).map_err(|what| self.corrupt(what))
    }

    /// The requests forwarded to `host` and not yet answered, oldest first.
    pub fn fleet_asked(&mut self, host: &str) -> Result<Vec<Asked>, StoreError> {
        let rows = self.client()?.query(
            "SELECT id, deployment, from_host, request FROM fleet_requests
             WHERE to_host = $1 AND answer IS NULL ORDER BY id",
            &[&host],
        );
        let rows = rows.map_err(|e| self.fail("reading forwarded requests", &e))?;
        rows.iter()
            .map(|r| {
                Ok(Asked {
                    id: col(r, 0)?,
                    deployment: col(r, 1)?,
                    from: col(r, 2)?,
                    request: col(r, 3)?,
                })
            })
            .collect::<Result<_, String>>()
            .map_err(|what| self.corrupt(what))
    }

    /// Answers forwarded request `id` (once: a second answer is ignored).
    pub fn fleet_answer(&mut self, id: i64, answer: &str) -> Result<(), StoreError> {
        let result = self.client()?.execute(
            "UPDATE fleet_requests SET answer = $2, answered_at = now() WHERE id = $1 AND answer IS NULL",
            &[&id, &answer],
        );
        result
            .map(drop)
            .map_err(|e| self.fail("answering a forwarded request", &e))
    }

    /// The answer to forwarded request `id`, once there is one; answered
    /// requests older than a day are deleted on the way.
    pub fn fleet_answer_of(&mut self, id: i64) -> Result<Option<String>, StoreError> {
        let client = self.client()?;
        let result = (|| -> Result<Option<String>, postgres::Error> {
            let row =
                client.query_opt("SELECT answer FROM fleet_requests WHERE id = $1", &[&id])?;
            let answer = match row {
                Some(r) => r.try_get(0)?,
                None => None,
            };
            if answer.is_some() {
                client.execute(
                    "DELETE FROM fleet_requests WHERE id = $1
                        OR answered_at < now() - interval '1 day'",
                    &[&id],
                )?;
            }
            Ok(answer)
        })();
        result.map_err(|e| self.fail("reading a forwarded request's answer", &e))
    }
}
