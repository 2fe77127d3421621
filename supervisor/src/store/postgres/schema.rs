//! The PostgreSQL schema, versioned in `wfhost_schema` and migrated in one
//! transaction under an advisory lock, so hosts opening the same database
//! at once never apply a step twice. Version 1 is the SQLite schema at its
//! version 4, in PostgreSQL's types.

use super::PostgresStore;
use crate::store::StoreError;

/// The advisory lock held while migrating ("wfhost" + 1).
const MIGRATE_LOCK: i64 = 0x7766_686f_7374_0001;

/// Schema migrations in order: entry `i` takes the schema from version `i`
/// to `i + 1`. To change the schema, append one entry; never edit a
/// shipped one.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: children, the signed journal and its head, mail with idempotency
    // keys, per-deployment mail counts kept by a trigger (one lookup for
    // the inbox limit and status however much mail is stored; a trigger,
    // not code, so no statement can move a row without its counts), and
    // the event log. Identity columns never reuse a value.
    "CREATE TABLE children (
         pid BIGINT PRIMARY KEY,
         deployment TEXT NOT NULL,
         start_time BIGINT NOT NULL,
         channel_id TEXT NOT NULL,
         spawned_at_ms BIGINT NOT NULL
     );
     CREATE TABLE journal (
         seq BIGINT PRIMARY KEY,
         at_ms BIGINT NOT NULL,
         kind TEXT NOT NULL,
         deployment TEXT,
         body TEXT NOT NULL,
         prev_hash BYTEA NOT NULL,
         hash BYTEA NOT NULL,
         key_id BYTEA NOT NULL,
         signature BYTEA NOT NULL
     );
     CREATE INDEX journal_by_deployment ON journal (deployment, seq);
     CREATE TABLE journal_head (
         id INT PRIMARY KEY CHECK (id = 1),
         seq BIGINT NOT NULL,
         hash BYTEA NOT NULL,
         verified_seq BIGINT,
         verified_hash BYTEA
     );
     INSERT INTO journal_head (id, seq, hash) VALUES (1, 0, decode(repeat('00', 32), 'hex'));
     CREATE TABLE mail (
         id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         deployment TEXT NOT NULL,
         state TEXT NOT NULL CHECK (state IN ('inbox', 'processing', 'done')),
         payload BYTEA NOT NULL,
         enqueued_at_ms BIGINT NOT NULL,
         deliveries BIGINT NOT NULL DEFAULT 0,
         outcome TEXT,
         done_at_ms BIGINT,
         idempotency_key TEXT,
         payload_sha256 BYTEA
     );
     CREATE INDEX mail_by_state ON mail (deployment, state, id);
     CREATE INDEX mail_processing ON mail (deployment, id) WHERE state = 'processing';
     CREATE INDEX mail_done ON mail (done_at_ms) WHERE state = 'done';
     CREATE UNIQUE INDEX mail_by_key ON mail (deployment, idempotency_key)
         WHERE idempotency_key IS NOT NULL;
     CREATE TABLE mail_counts (
         deployment TEXT PRIMARY KEY,
         inbox BIGINT NOT NULL DEFAULT 0,
         processing BIGINT NOT NULL DEFAULT 0,
         done BIGINT NOT NULL DEFAULT 0
     );
     CREATE FUNCTION wfhost_mail_counts() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
         IF TG_OP IN ('UPDATE', 'DELETE') THEN
             UPDATE mail_counts SET
                 inbox = inbox - (OLD.state = 'inbox')::int,
                 processing = processing - (OLD.state = 'processing')::int,
                 done = done - (OLD.state = 'done')::int
             WHERE deployment = OLD.deployment;
         END IF;
         IF TG_OP IN ('INSERT', 'UPDATE') THEN
             INSERT INTO mail_counts AS c (deployment, inbox, processing, done)
             VALUES (NEW.deployment, (NEW.state = 'inbox')::int,
                     (NEW.state = 'processing')::int, (NEW.state = 'done')::int)
             ON CONFLICT (deployment) DO UPDATE SET
                 inbox = c.inbox + excluded.inbox,
                 processing = c.processing + excluded.processing,
                 done = c.done + excluded.done;
         END IF;
         RETURN NULL;
     END $$;
     CREATE TRIGGER mail_counts_on_insert_delete AFTER INSERT OR DELETE ON mail
         FOR EACH ROW EXECUTE FUNCTION wfhost_mail_counts();
     CREATE TRIGGER mail_counts_on_update AFTER UPDATE OF deployment, state ON mail
         FOR EACH ROW
         WHEN (OLD.state IS DISTINCT FROM NEW.state OR OLD.deployment IS DISTINCT FROM NEW.deployment)
         EXECUTE FUNCTION wfhost_mail_counts();
     CREATE TABLE events (
         seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         at_ms BIGINT NOT NULL,
         deployment TEXT,
         kind TEXT NOT NULL,
         body TEXT NOT NULL
     );",
    // 2: mail held per child, failures counted, poison quarantined (the
    // `dead` state, counted by the trigger), and each item's history of
    // deliveries. A processing row from before holders were recorded is
    // held by an unknown holder ('' and pid 0) until the start-up replay
    // returns it.
    "ALTER TABLE mail DROP CONSTRAINT mail_state_check;
     ALTER TABLE mail ADD CONSTRAINT mail_state_check
         CHECK (state IN ('inbox', 'processing', 'done', 'dead'));
     ALTER TABLE mail
         ADD COLUMN holder_channel TEXT,
         ADD COLUMN holder_pid BIGINT,
         ADD COLUMN taken_at_ms BIGINT,
         ADD COLUMN failures BIGINT NOT NULL DEFAULT 0,
         ADD COLUMN last_cause TEXT,
         ADD COLUMN last_pid BIGINT,
         ADD COLUMN last_failed_at_ms BIGINT,
         ADD COLUMN dead_at_ms BIGINT;
     UPDATE mail SET holder_channel = '', holder_pid = 0 WHERE state = 'processing';
     DROP INDEX mail_processing;
     CREATE INDEX mail_held ON mail (deployment, holder_channel, id) WHERE state = 'processing';
     CREATE INDEX mail_dead ON mail (dead_at_ms) WHERE state = 'dead';
     ALTER TABLE mail_counts ADD COLUMN dead BIGINT NOT NULL DEFAULT 0;
     CREATE OR REPLACE FUNCTION wfhost_mail_counts() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
         IF TG_OP IN ('UPDATE', 'DELETE') THEN
             UPDATE mail_counts SET
                 inbox = inbox - (OLD.state = 'inbox')::int,
                 processing = processing - (OLD.state = 'processing')::int,
                 done = done - (OLD.state = 'done')::int,
                 dead = dead - (OLD.state = 'dead')::int
             WHERE deployment = OLD.deployment;
         END IF;
         IF TG_OP IN ('INSERT', 'UPDATE') THEN
             INSERT INTO mail_counts AS c (deployment, inbox, processing, done, dead)
             VALUES (NEW.deployment, (NEW.state = 'inbox')::int,
                     (NEW.state = 'processing')::int, (NEW.state = 'done')::int,
                     (NEW.state = 'dead')::int)
             ON CONFLICT (deployment) DO UPDATE SET
                 inbox = c.inbox + excluded.inbox,
                 processing = c.processing + excluded.processing,
                 done = c.done + excluded.done,
                 dead = c.dead + excluded.dead;
         END IF;
         RETURN NULL;
     END $$;
     CREATE TABLE mail_history (
         seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
         mail_id BIGINT NOT NULL,
         attempt BIGINT,
         holder_pid BIGINT,
         holder_channel TEXT,
         taken_at_ms BIGINT,
         ended_at_ms BIGINT,
         how TEXT
     );
     CREATE INDEX mail_history_by_mail ON mail_history (mail_id, seq);",
    // 3: the fleet: hosts, leases with epochs, host keys, forwarded
    // requests, children per host, the fence, notifications.
    super::lease_schema::FLEET,
    // 4: protocol 3's item: its result, kept with its outcome; its starts
    // (a delivery a handler took; `started`: the delivery in flight was),
    // which `attempt` counts (every earlier delivery counted as a start);
    // `cancel_reason`, a recorded cancel of the item in flight, so its
    // holder's end cancels it instead of returning it; `deadline_ms`, the
    // item's own deadline, counted from its first delivery
    // (`first_taken_at_ms`); and the `interrupted` state (`redeliver =
    // "hold"`: held for an operator instead of run again), counted.
    "ALTER TABLE mail
         ADD COLUMN result BYTEA,
         ADD COLUMN starts BIGINT NOT NULL DEFAULT 0,
         ADD COLUMN started BOOLEAN NOT NULL DEFAULT false,
         ADD COLUMN cancel_reason TEXT,
         ADD COLUMN deadline_ms BIGINT,
         ADD COLUMN first_taken_at_ms BIGINT;
     UPDATE mail SET starts = deliveries, started = (state = 'processing');
     ALTER TABLE mail DROP CONSTRAINT mail_state_check;
     ALTER TABLE mail ADD CONSTRAINT mail_state_check
         CHECK (state IN ('inbox', 'processing', 'done', 'dead', 'interrupted'));
     ALTER TABLE mail_counts ADD COLUMN interrupted BIGINT NOT NULL DEFAULT 0;
     CREATE OR REPLACE FUNCTION wfhost_mail_counts() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
         IF TG_OP IN ('UPDATE', 'DELETE') THEN
             UPDATE mail_counts SET
                 inbox = inbox - (OLD.state = 'inbox')::int,
                 processing = processing - (OLD.state = 'processing')::int,
                 done = done - (OLD.state = 'done')::int,
                 dead = dead - (OLD.state = 'dead')::int,
                 interrupted = interrupted - (OLD.state = 'interrupted')::int
             WHERE deployment = OLD.deployment;
         END IF;
         IF TG_OP IN ('INSERT', 'UPDATE') THEN
             INSERT INTO mail_counts AS c (deployment, inbox, processing, done, dead, interrupted)
             VALUES (NEW.deployment, (NEW.state = 'inbox')::int,
                     (NEW.state = 'processing')::int, (NEW.state = 'done')::int,
                     (NEW.state = 'dead')::int, (NEW.state = 'interrupted')::int)
             ON CONFLICT (deployment) DO UPDATE SET
                 inbox = c.inbox + excluded.inbox,
                 processing = c.processing + excluded.processing,
                 done = c.done + excluded.done,
                 dead = c.dead + excluded.dead,
                 interrupted = c.interrupted + excluded.interrupted;
         END IF;
         RETURN NULL;
     END $$;",
    // 5: questions a handler asked a person, keyed by (item, key), with
    // their answers; `awaiting`, an inbox item not taken until its open
    // questions are answered (given back, or returned, while its handler
    // waited).
    "ALTER TABLE mail ADD COLUMN awaiting BOOLEAN NOT NULL DEFAULT false;
     CREATE INDEX mail_awaiting ON mail (deployment) WHERE awaiting;
     CREATE TABLE questions (
         mail_id BIGINT NOT NULL,
         key TEXT NOT NULL,
         deployment TEXT NOT NULL,
         prompt BYTEA NOT NULL,
         attempt BIGINT NOT NULL,
         asked_at_ms BIGINT NOT NULL,
         answer BYTEA,
         answered_at_ms BIGINT,
         answered_by TEXT,
         PRIMARY KEY (mail_id, key)
     );
     CREATE INDEX questions_open ON questions (deployment, asked_at_ms) WHERE answer IS NULL;",
    // 6: fleet hosts drained for maintenance, and each host's connection.
    super::lease_schema::MAINTENANCE,
];

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

impl PostgresStore {
    /// Whether a wfhost schema exists in the database.
    pub(super) fn has_schema(&mut self) -> Result<bool, StoreError> {
        let row = self
            .client()?
            .query_one("SELECT to_regclass('wfhost_schema') IS NOT NULL", &[]);
        row.and_then(|r| r.try_get(0))
            .map_err(|e| self.fail("looking for wfhost's schema", &e))
    }

    /// The schema version, if there is a schema.
    fn version(&mut self) -> Result<Option<i64>, StoreError> {
        if !self.has_schema()? {
            return Ok(None);
        }
        let row = self
            .client()?
            .query_opt("SELECT version FROM wfhost_schema WHERE id = 1", &[]);
        row.and_then(|r| r.map(|r| r.try_get(0)).transpose())
            .map_err(|e| self.fail("reading the schema version", &e))
    }

    /// Brings the schema to [`SCHEMA_VERSION`] in one transaction; a
    /// current schema is only read (a read-only server opens too).
    pub(super) fn migrate(&mut self) -> Result<(), StoreError> {
        if self.version()? == Some(SCHEMA_VERSION) {
            return Ok(());
        }
        let location = self.location.clone();
        let result = (|| -> Result<Result<(i64, i64), i64>, postgres::Error> {
            let mut tx = self.session.client().transaction()?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])?;
            tx.batch_execute(
                "CREATE TABLE IF NOT EXISTS wfhost_schema (
                     id INT PRIMARY KEY CHECK (id = 1),
                     version BIGINT NOT NULL
                 );
                 INSERT INTO wfhost_schema VALUES (1, 0) ON CONFLICT (id) DO NOTHING;",
            )?;
            let found: i64 = tx
                .query_one("SELECT version FROM wfhost_schema WHERE id = 1", &[])?
                .try_get(0)?;
            if !(0..=SCHEMA_VERSION).contains(&found) {
                return Ok(Err(found));
            }
            for (step, sql) in (1i64..)
                .zip(MIGRATIONS)
                .skip(usize::try_from(found).unwrap_or(0))
            {
                tx.batch_execute(sql)?;
                tx.execute(
                    "UPDATE wfhost_schema SET version = $1 WHERE id = 1",
                    &[&step],
                )?;
            }
            tx.commit()?;
            Ok(Ok((found, SCHEMA_VERSION)))
        })();
        match result.map_err(|e| self.fail("migrating the schema", &e))? {
            Ok((from, to)) if from < to => {
                tracing::info!(store = %location, from, version = to, "store schema migrated");
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(found) if found < 0 => {
                Err(self.corrupt(format!("schema version {found} is negative")))
            }
            Err(found) => Err(StoreError::TooNew {
                location,
                found,
                known: SCHEMA_VERSION,
            }),
        }
    }
}
