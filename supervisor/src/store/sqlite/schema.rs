//! The SQLite schema, versioned by `PRAGMA user_version` and migrated one
//! transaction per step.

use rusqlite::TransactionBehavior;

use super::SqliteStore;
use crate::store::StoreError;

/// Schema migrations in order: entry `i` takes the schema from version `i`
/// to `i + 1`. To change the schema, append one entry; never edit a
/// shipped one.
pub const MIGRATIONS: &[&str] = &[
    // 1: children (for orphan clean-up) and the signed journal.
    "CREATE TABLE children (
         pid INTEGER PRIMARY KEY,
         deployment TEXT NOT NULL,
         start_time INTEGER NOT NULL,
         channel_id TEXT NOT NULL,
         spawned_at_ms INTEGER NOT NULL
     ) STRICT;
     CREATE TABLE journal (
         seq INTEGER PRIMARY KEY,
         at_ms INTEGER NOT NULL,
         kind TEXT NOT NULL,
         deployment TEXT,
         body TEXT NOT NULL,
         prev_hash BLOB NOT NULL,
         hash BLOB NOT NULL,
         key_id BLOB NOT NULL,
         signature BLOB NOT NULL
     ) STRICT;
     CREATE INDEX journal_by_deployment ON journal (deployment, seq);",
    // 2: mail (inbox -> processing -> done, DESIGN §6) and the event log
    // (§7). AUTOINCREMENT so an id or seq is never reused after pruning.
    // `mail_counts` is kept by triggers, so the inbox limit and status
    // cost one lookup however much mail is stored; a trigger (not code)
    // keeps it because every write of a mail row, whatever statement
    // makes it, then moves the counts in the same transaction: they
    // cannot drift from the rows.
    "CREATE TABLE mail (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         deployment TEXT NOT NULL,
         state TEXT NOT NULL CHECK (state IN ('inbox', 'processing', 'done')),
         payload BLOB NOT NULL,
         enqueued_at_ms INTEGER NOT NULL,
         deliveries INTEGER NOT NULL DEFAULT 0,
         outcome TEXT,
         done_at_ms INTEGER
     ) STRICT;
     CREATE INDEX mail_by_state ON mail (deployment, state, id);
     CREATE INDEX mail_processing ON mail (deployment, id) WHERE state = 'processing';
     CREATE TABLE mail_counts (
         deployment TEXT PRIMARY KEY,
         inbox INTEGER NOT NULL DEFAULT 0,
         processing INTEGER NOT NULL DEFAULT 0,
         done INTEGER NOT NULL DEFAULT 0
     ) STRICT, WITHOUT ROWID;
     CREATE TRIGGER mail_counts_on_insert AFTER INSERT ON mail BEGIN
         INSERT INTO mail_counts (deployment, inbox, processing, done)
         VALUES (new.deployment, new.state = 'inbox', new.state = 'processing', new.state = 'done')
         ON CONFLICT (deployment) DO UPDATE SET
             inbox = inbox + excluded.inbox,
             processing = processing + excluded.processing,
             done = done + excluded.done;
     END;
     CREATE TRIGGER mail_counts_on_update AFTER UPDATE OF deployment, state ON mail
     WHEN old.state IS NOT new.state OR old.deployment IS NOT new.deployment BEGIN
         UPDATE mail_counts SET
             inbox = inbox - (old.state = 'inbox'),
             processing = processing - (old.state = 'processing'),
             done = done - (old.state = 'done')
         WHERE deployment = old.deployment;
         INSERT INTO mail_counts (deployment, inbox, processing, done)
         VALUES (new.deployment, new.state = 'inbox', new.state = 'processing', new.state = 'done')
         ON CONFLICT (deployment) DO UPDATE SET
             inbox = inbox + excluded.inbox,
             processing = processing + excluded.processing,
             done = done + excluded.done;
     END;
     CREATE TRIGGER mail_counts_on_delete AFTER DELETE ON mail BEGIN
         UPDATE mail_counts SET
             inbox = inbox - (old.state = 'inbox'),
             processing = processing - (old.state = 'processing'),
             done = done - (old.state = 'done')
         WHERE deployment = old.deployment;
     END;
     CREATE TABLE events (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         at_ms INTEGER NOT NULL,
         deployment TEXT,
         kind TEXT NOT NULL,
         body TEXT NOT NULL
     ) STRICT;",
    // 3: idempotency keys for `wfhost send --key`, unique per deployment,
    // with the SHA-256 of the payload they were first used with (a done
    // item's payload is cleared).
    "ALTER TABLE mail ADD COLUMN idempotency_key TEXT;
     ALTER TABLE mail ADD COLUMN payload_sha256 BLOB;
     CREATE UNIQUE INDEX mail_by_key ON mail (deployment, idempotency_key)
         WHERE idempotency_key IS NOT NULL;",
    // 4: the journal's head (the highest seq ever assigned, and its hash),
    // so a cut tail never gets its numbers reused and shows in `verify`,
    // and the head the start-up check last verified. One row, from the
    // journal as it stands.
    "CREATE TABLE journal_head (
         id INTEGER PRIMARY KEY CHECK (id = 1),
         seq INTEGER NOT NULL,
         hash BLOB NOT NULL,
         verified_seq INTEGER,
         verified_hash BLOB
     ) STRICT;
     INSERT INTO journal_head (id, seq, hash)
     SELECT 1,
            coalesce((SELECT seq FROM journal ORDER BY seq DESC LIMIT 1), 0),
            coalesce((SELECT hash FROM journal ORDER BY seq DESC LIMIT 1), zeroblob(32));",
    // 5: mail held per child, failures counted, poison quarantined (the
    // `dead` state), and each item's history of deliveries. SQLite cannot
    // change a CHECK, so `mail` is rebuilt: rows keep their ids, the id
    // sequence keeps its high mark (ids are never reused), and a
    // processing row from before holders were recorded is held by an
    // unknown holder ('' and pid 0) until the start-up replay returns it.
    // Dropping the old table drops its triggers; the counts' triggers
    // come back with `dead`.
    "CREATE TABLE mail_next (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         deployment TEXT NOT NULL,
         state TEXT NOT NULL CHECK (state IN ('inbox', 'processing', 'done', 'dead')),
         payload BLOB NOT NULL,
         enqueued_at_ms INTEGER NOT NULL,
         deliveries INTEGER NOT NULL DEFAULT 0,
         outcome TEXT,
         done_at_ms INTEGER,
         idempotency_key TEXT,
         payload_sha256 BLOB,
         holder_channel TEXT,
         holder_pid INTEGER,
         taken_at_ms INTEGER,
         failures INTEGER NOT NULL DEFAULT 0,
         last_cause TEXT,
         last_pid INTEGER,
         last_failed_at_ms INTEGER,
         dead_at_ms INTEGER
     ) STRICT;
     INSERT INTO mail_next (id, deployment, state, payload, enqueued_at_ms, deliveries, outcome,
                            done_at_ms, idempotency_key, payload_sha256, holder_channel, holder_pid)
     SELECT id, deployment, state, payload, enqueued_at_ms, deliveries, outcome, done_at_ms,
            idempotency_key, payload_sha256,
            CASE WHEN state = 'processing' THEN '' END,
            CASE WHEN state = 'processing' THEN 0 END
     FROM mail;
     DELETE FROM sqlite_sequence WHERE name = 'mail_next';
     INSERT INTO sqlite_sequence (name, seq) SELECT 'mail_next', seq FROM sqlite_sequence WHERE name = 'mail';
     DROP TABLE mail;
     ALTER TABLE mail_next RENAME TO mail;
     CREATE INDEX mail_by_state ON mail (deployment, state, id);
     CREATE INDEX mail_held ON mail (deployment, holder_channel, id) WHERE state = 'processing';
     CREATE INDEX mail_done ON mail (done_at_ms) WHERE state = 'done';
     CREATE INDEX mail_dead ON mail (dead_at_ms) WHERE state = 'dead';
     CREATE UNIQUE INDEX mail_by_key ON mail (deployment, idempotency_key)
         WHERE idempotency_key IS NOT NULL;
     ALTER TABLE mail_counts ADD COLUMN dead INTEGER NOT NULL DEFAULT 0;
     CREATE TRIGGER mail_counts_on_insert AFTER INSERT ON mail BEGIN
         INSERT INTO mail_counts (deployment, inbox, processing, done, dead)
         VALUES (new.deployment, new.state = 'inbox', new.state = 'processing',
                 new.state = 'done', new.state = 'dead')
         ON CONFLICT (deployment) DO UPDATE SET
             inbox = inbox + excluded.inbox,
             processing = processing + excluded.processing,
             done = done + excluded.done,
             dead = dead + excluded.dead;
     END;
     CREATE TRIGGER mail_counts_on_update AFTER UPDATE OF deployment, state ON mail
     WHEN old.state IS NOT new.state OR old.deployment IS NOT new.deployment BEGIN
         UPDATE mail_counts SET
             inbox = inbox - (old.state = 'inbox'),
             processing = processing - (old.state = 'processing'),
             done = done - (old.state = 'done'),
             dead = dead - (old.state = 'dead')
         WHERE deployment = old.deployment;
         INSERT INTO mail_counts (deployment, inbox, processing, done, dead)
         VALUES (new.deployment, new.state = 'inbox', new.state = 'processing',
                 new.state = 'done', new.state = 'dead')
         ON CONFLICT (deployment) DO UPDATE SET
             inbox = inbox + excluded.inbox,
             processing = processing + excluded.processing,
             done = done + excluded.done,
             dead = dead + excluded.dead;
     END;
     CREATE TRIGGER mail_counts_on_delete AFTER DELETE ON mail BEGIN
         UPDATE mail_counts SET
             inbox = inbox - (old.state = 'inbox'),
             processing = processing - (old.state = 'processing'),
             done = done - (old.state = 'done'),
             dead = dead - (old.state = 'dead')
         WHERE deployment = old.deployment;
     END;
     CREATE TABLE mail_history (
         seq INTEGER PRIMARY KEY,
         mail_id INTEGER NOT NULL,
         attempt INTEGER,
         holder_pid INTEGER,
         holder_channel TEXT,
         taken_at_ms INTEGER,
         ended_at_ms INTEGER,
         how TEXT
     ) STRICT;
     CREATE INDEX mail_history_by_mail ON mail_history (mail_id, seq);",
    // 7: protocol 3's item: its result, kept with its outcome; its starts
    // (a delivery a handler took; `started`: the delivery in flight was),
    // which `attempt` counts (every earlier delivery counted as a start);
    // `cancel_reason`, a recorded cancel of the item in flight, so its
    // holder's end cancels it instead of returning it; `deadline_ms`, the
    // item's own deadline, counted from its first delivery
    // (`first_taken_at_ms`); and the `interrupted` state (`redeliver =
    // "hold"`: held for an operator instead of run again), counted. SQLite
    // cannot change a CHECK, so `mail` is rebuilt as in step 5.
    "CREATE TABLE mail_next (
         id INTEGER PRIMARY KEY AUTOINCREMENT,
         deployment TEXT NOT NULL,
         state TEXT NOT NULL
             CHECK (state IN ('inbox', 'processing', 'done', 'dead', 'interrupted')),
         payload BLOB NOT NULL,
         enqueued_at_ms INTEGER NOT NULL,
         deliveries INTEGER NOT NULL DEFAULT 0,
         outcome TEXT,
         done_at_ms INTEGER,
         idempotency_key TEXT,
         payload_sha256 BLOB,
         holder_channel TEXT,
         holder_pid INTEGER,
         taken_at_ms INTEGER,
         failures INTEGER NOT NULL DEFAULT 0,
         last_cause TEXT,
         last_pid INTEGER,
         last_failed_at_ms INTEGER,
         dead_at_ms INTEGER,
         result BLOB,
         starts INTEGER NOT NULL DEFAULT 0,
         started INTEGER NOT NULL DEFAULT 0,
         cancel_reason TEXT,
         deadline_ms INTEGER,
         first_taken_at_ms INTEGER
     ) STRICT;
     INSERT INTO mail_next (id, deployment, state, payload, enqueued_at_ms, deliveries, outcome,
                            done_at_ms, idempotency_key, payload_sha256, holder_channel,
                            holder_pid, taken_at_ms, failures, last_cause, last_pid,
                            last_failed_at_ms, dead_at_ms, starts, started)
     SELECT id, deployment, state, payload, enqueued_at_ms, deliveries, outcome, done_at_ms,
            idempotency_key, payload_sha256, holder_channel, holder_pid, taken_at_ms, failures,
            last_cause, last_pid, last_failed_at_ms, dead_at_ms, deliveries, state = 'processing'
     FROM mail;
     DELETE FROM sqlite_sequence WHERE name = 'mail_next';
     INSERT INTO sqlite_sequence (name, seq) SELECT 'mail_next', seq FROM sqlite_sequence WHERE name = 'mail';
     DROP TABLE mail;
     ALTER TABLE mail_next RENAME TO mail;
     CREATE INDEX mail_by_state ON mail (deployment, state, id);
     CREATE INDEX mail_held ON mail (deployment, holder_channel, id) WHERE state = 'processing';
     CREATE INDEX mail_done ON mail (done_at_ms) WHERE state = 'done';
     CREATE INDEX mail_dead ON mail (dead_at_ms) WHERE state = 'dead';
     CREATE UNIQUE INDEX mail_by_key ON mail (deployment, idempotency_key)
         WHERE idempotency_key IS NOT NULL;
     ALTER TABLE mail_counts ADD COLUMN interrupted INTEGER NOT NULL DEFAULT 0;
     CREATE TRIGGER mail_counts_on_insert AFTER INSERT ON mail BEGIN
         INSERT INTO mail_counts (deployment, inbox, processing, done, dead, interrupted)
         VALUES (new.deployment, new.state = 'inbox', new.state = 'processing',
                 new.state = 'done', new.state = 'dead', new.state = 'interrupted')
         ON CONFLICT (deployment) DO UPDATE SET
             inbox = inbox + excluded.inbox,
             processing = processing + excluded.processing,
             done = done + excluded.done,
             dead = dead + excluded.dead,
             interrupted = interrupted + excluded.interrupted;
     END;
     CREATE TRIGGER mail_counts_on_update AFTER UPDATE OF deployment, state ON mail
     WHEN old.state IS NOT new.state OR old.deployment IS NOT new.deployment BEGIN
         UPDATE mail_counts SET
             inbox = inbox - (old.state = 'inbox'),
             processing = processing - (old.state = 'processing'),
             done = done - (old.state = 'done'),
             dead = dead - (old.state = 'dead'),
             interrupted = interrupted - (old.state = 'interrupted')
         WHERE deployment = old.deployment;
         INSERT INTO mail_counts (deployment, inbox, processing, done, dead, interrupted)
         VALUES (new.deployment, new.state = 'inbox', new.state = 'processing',
                 new.state = 'done', new.state = 'dead', new.state = 'interrupted')
         ON CONFLICT (deployment) DO UPDATE SET
             inbox = inbox + excluded.inbox,
             processing = processing + excluded.processing,
             done = done + excluded.done,
             dead = dead + excluded.dead,
             interrupted = interrupted + excluded.interrupted;
     END;
     CREATE TRIGGER mail_counts_on_delete AFTER DELETE ON mail BEGIN
         UPDATE mail_counts SET
             inbox = inbox - (old.state = 'inbox'),
             processing = processing - (old.state = 'processing'),
             done = done - (old.state = 'done'),
             dead = dead - (old.state = 'dead'),
             interrupted = interrupted - (old.state = 'interrupted')
         WHERE deployment = old.deployment;
     END;",
    // 8: questions a handler asked a person, keyed by (item, key), with
    // their answers; `awaiting`, an inbox item not taken until its open
    // questions are answered (given back, or returned, while its handler
    // waited).
    "ALTER TABLE mail ADD COLUMN awaiting INTEGER NOT NULL DEFAULT 0;
     CREATE INDEX mail_awaiting ON mail (deployment) WHERE awaiting = 1;
     CREATE TABLE questions (
         mail_id INTEGER NOT NULL,
         key TEXT NOT NULL,
         deployment TEXT NOT NULL,
         prompt BLOB NOT NULL,
         attempt INTEGER NOT NULL,
         asked_at_ms INTEGER NOT NULL,
         answer BLOB,
         answered_at_ms INTEGER,
         answered_by TEXT,
         PRIMARY KEY (mail_id, key)
     ) STRICT, WITHOUT ROWID;
     CREATE INDEX questions_open ON questions (deployment, asked_at_ms) WHERE answer IS NULL;",
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

impl SqliteStore {
    /// Brings the schema to [`SCHEMA_VERSION`], one transaction per step,
    /// rechecking the version under the write lock so two processes
    /// opening the same database never apply a step twice.
    pub(super) fn migrate(&mut self) -> Result<(), StoreError> {
        let version: i64 = self
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(|e| self.fail("reading the schema version", &e))?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::TooNew {
                location: self.location.clone(),
                found: version,
                known: SCHEMA_VERSION,
            });
        }
        if version < 0 {
            return Err(self.corrupt(format!("schema version {version} is negative")));
        }
        for (step, sql) in (1..)
            .zip(MIGRATIONS)
            .skip(usize::try_from(version).unwrap_or(0))
        {
            let result = (|| {
                let tx = self
                    .conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)?;
                let current: i64 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
                if current >= step {
                    return Ok(false);
                }
                tx.execute_batch(sql)?;
                tx.pragma_update(None, "user_version", step)?;
                tx.commit()?;
                Ok(true)
            })();
            if result.map_err(|e| self.fail("migrating the schema", &e))? {
                tracing::info!(db = %self.path.display(), version = step, "store schema migrated");
            }
        }
        Ok(())
    }
}
