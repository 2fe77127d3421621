//! The fleet's tables (DESIGN §10b), one migration of the PostgreSQL
//! schema (`schema.rs` lists it in order):
//!
//! - `fleet_hosts`: each host's heartbeat, by the database's clock;
//! - `fleet_leases`: one row per deployment ever owned: the epoch (raised
//!   by every acquisition, never reused), the holder (none once
//!   released), the expiry by the database's clock, a host it was handed
//!   to (`wfhost move`), and the owner's last status snapshot;
//! - `fleet_keys`: each host's journal key, so one chain signed by many
//!   hosts verifies record by record;
//! - `fleet_requests`: operator requests forwarded to a deployment's
//!   owner, and their answers;
//! - `children` gets the host that started each child, keyed by host and
//!   pid (pids repeat across hosts);
//! - `wfhost_fence`, the check at the top of every write (`fence.rs`);
//! - notifications: new mail (`wfhost_mail`, the deployment), committed
//!   events (`wfhost_events`), released leases (`wfhost_lease`),
//!   forwarded requests (`wfhost_request`, the owner) and their answers
//!   (`wfhost_answer`, the request id), so hosts wake at once.

/// Migration: host maintenance (`wfhost host drain`), kept apart from
/// `fleet_hosts` (whose row goes when a host stops) so a drained host
/// stays drained through its own restart until `host resume`; and how
/// each host's connections are protected, for `wfhost hosts`, and its
/// weight in the fair share (`[fleet] capacity`).
pub const MAINTENANCE: &str = "
    CREATE TABLE fleet_maintenance (
        host_id TEXT PRIMARY KEY,
        since TIMESTAMPTZ NOT NULL DEFAULT now(),
        asked_by TEXT NOT NULL
    );
    ALTER TABLE fleet_hosts ADD COLUMN connection TEXT;
    ALTER TABLE fleet_hosts ADD COLUMN capacity INT NOT NULL DEFAULT 1 CHECK (capacity > 0);
";

/// Migration: the fleet.
pub const FLEET: &str = "
    ALTER TABLE children ADD COLUMN host TEXT NOT NULL DEFAULT '';
    ALTER TABLE children DROP CONSTRAINT children_pkey;
    ALTER TABLE children ADD PRIMARY KEY (host, pid);
    CREATE TABLE fleet_hosts (
        host_id TEXT PRIMARY KEY,
        started_at TIMESTAMPTZ NOT NULL,
        heartbeat_at TIMESTAMPTZ NOT NULL,
        stopping BOOLEAN NOT NULL DEFAULT false
    );
    CREATE TABLE fleet_leases (
        deployment TEXT PRIMARY KEY,
        epoch BIGINT NOT NULL CHECK (epoch > 0),
        holder TEXT,
        expires_at TIMESTAMPTZ NOT NULL,
        acquired_at TIMESTAMPTZ NOT NULL,
        previous TEXT,
        reserved_for TEXT,
        status TEXT
    );
    CREATE TABLE fleet_keys (
        key_id BYTEA PRIMARY KEY,
        host_id TEXT NOT NULL,
        public_key BYTEA NOT NULL,
        registered_at TIMESTAMPTZ NOT NULL DEFAULT now()
    );
    CREATE TABLE fleet_requests (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        deployment TEXT NOT NULL,
        to_host TEXT NOT NULL,
        from_host TEXT NOT NULL,
        request TEXT NOT NULL,
        asked_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        answer TEXT,
        answered_at TIMESTAMPTZ
    );
    CREATE INDEX fleet_requests_open ON fleet_requests (to_host, id) WHERE answer IS NULL;
    CREATE FUNCTION wfhost_fence(d TEXT, h TEXT, e BIGINT) RETURNS void LANGUAGE plpgsql AS $$
    BEGIN
        -- A shared advisory lock (in memory: no row lock written to the
        -- table) that a takeover's exclusive one waits for (fence.rs).
        PERFORM pg_advisory_xact_lock_shared(2067, hashtext(d));
        PERFORM 1 FROM fleet_leases
            WHERE deployment = d AND holder = h AND epoch = e AND expires_at > clock_timestamp();
        IF NOT FOUND THEN
            RAISE EXCEPTION USING ERRCODE = 'WF001',
                MESSAGE = format('host %s does not hold the lease of %s at epoch %s', h, d, e);
        END IF;
    END $$;
    CREATE FUNCTION wfhost_notify() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_TABLE_NAME = 'mail' THEN
            PERFORM pg_notify('wfhost_mail', NEW.deployment);
        ELSIF TG_TABLE_NAME = 'events' THEN
            PERFORM pg_notify('wfhost_events', '');
        ELSIF TG_TABLE_NAME = 'fleet_leases' THEN
            PERFORM pg_notify('wfhost_lease', NEW.deployment);
        ELSIF TG_OP = 'INSERT' THEN
            PERFORM pg_notify('wfhost_request', NEW.to_host);
        ELSE
            PERFORM pg_notify('wfhost_answer', NEW.id::TEXT);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER mail_notify AFTER INSERT ON mail
        FOR EACH ROW EXECUTE FUNCTION wfhost_notify();
    CREATE TRIGGER events_notify AFTER INSERT ON events
        FOR EACH STATEMENT EXECUTE FUNCTION wfhost_notify();
    CREATE TRIGGER lease_released_notify AFTER UPDATE ON fleet_leases
        FOR EACH ROW WHEN (NEW.holder IS NULL AND OLD.holder IS NOT NULL)
        EXECUTE FUNCTION wfhost_notify();
    CREATE TRIGGER request_notify AFTER INSERT ON fleet_requests
        FOR EACH ROW EXECUTE FUNCTION wfhost_notify();
    CREATE TRIGGER answer_notify AFTER UPDATE OF answer ON fleet_requests
        FOR EACH ROW WHEN (NEW.answer IS NOT NULL) EXECUTE FUNCTION wfhost_notify();
";
