//! One connection to PostgreSQL and what it remembers: the statements it
//! prepared (each SQL text is parsed once per connection, not on every
//! call: a round trip and the server's planning saved), and the group of
//! writes open on it (`store::handle`'s group commit). In a group each
//! write runs in a savepoint of the group's transaction, so a refused
//! write rolls back only its own part, and a lock held to the end of the
//! transaction (the event log's, a deployment's fence) is taken once per
//! group, not once per write.
//!
//! Every transaction of the store's methods goes through [`Session::begin`]:
//! the client's own `transaction()` would send `COMMIT` and end a group
//! opened around it.

use std::collections::{HashMap, HashSet};

use postgres::types::ToSql;
use postgres::{Client, Row, Statement};

use crate::store::error::ErrorKind;

/// Most statements remembered per connection: the store's SQL is a fixed
/// set, far below this; a text built from input past it starts afresh.
const MAX_STATEMENTS: usize = 512;

/// A transaction-scoped lock a write takes before it writes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Lock {
    /// The event log's (`events::EVENTS_LOCK`).
    Events,
    /// A deployment's fence, checked at this host's epoch (`fence::check`).
    Fence(String),
}

/// The group open on a session.
#[derive(Default)]
struct Group {
    /// Locks the group's transaction holds until it ends.
    held: HashSet<Lock>,
    /// What failed outside any savepoint (its kind and words): PostgreSQL
    /// aborted the whole transaction, and nothing written in it will commit.
    aborted: Option<(ErrorKind, String)>,
    /// The last write's savepoint, kept: released with the next write's
    /// `SAVEPOINT` in one round trip, or by the group's `COMMIT`.
    unreleased: bool,
}

/// A connection with its prepared statements and its open group.
pub(super) struct Session {
    client: Client,
    statements: HashMap<String, Statement>,
    group: Option<Group>,
}

type Params<'p> = &'p [&'p (dyn ToSql + Sync)];

impl Session {
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            statements: HashMap::new(),
            group: None,
        }
    }

    /// The connection itself, for what runs outside groups (leases, page
    /// reads in a snapshot of their own).
    pub(super) fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// Whether the connection was lost.
    pub(super) fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    /// Opens a group: one transaction for the writes until [`Session::end_group`].
    /// A group left aborted is rolled back first.
    pub(super) fn begin_group(&mut self) -> Result<(), postgres::Error> {
        if self.group.take().is_some() {
            self.client.batch_execute("ROLLBACK")?;
        }
        self.client.batch_execute("BEGIN")?;
        self.group = Some(Group::default());
        Ok(())
    }

    /// Whether the open group can still commit what was written in it.
    pub(super) fn group_open(&self) -> bool {
        self.group.as_ref().is_some_and(|g| g.aborted.is_none()) && !self.client.is_closed()
    }

    /// Commits the open group (an aborted one is rolled back and reported).
    pub(super) fn end_group(&mut self) -> Result<(), postgres::Error> {
        match self.group.take() {
            Some(g) if g.aborted.is_some() => self.client.batch_execute("ROLLBACK"),
            Some(_) => self.client.batch_execute("COMMIT"),
            None => Ok(()),
        }
    }

    /// What aborted the open group, if anything did.
    pub(super) fn aborted_by(&self) -> Option<&(ErrorKind, String)> {
        self.group.as_ref().and_then(|g| g.aborted.as_ref())
    }

    /// Whether a group is open (the transaction may be aborted).
    pub(super) fn grouped(&self) -> bool {
        self.group.is_some()
    }

    /// Starts a write: a savepoint of the open group, else a transaction
    /// of its own.
    pub(super) fn begin(&mut self) -> Result<Tx<'_>, postgres::Error> {
        let part = self.group.is_some();
        if let Some(g) = &mut self.group {
            let sql = if std::mem::take(&mut g.unreleased) {
                "RELEASE SAVEPOINT w; SAVEPOINT w"
            } else {
                "SAVEPOINT w"
            };
            self.unless_aborted(|c| c.batch_execute(sql))?;
        } else {
            self.client.batch_execute("BEGIN")?;
        }
        Ok(Tx {
            session: self,
            part,
            taken: Vec::new(),
            done: false,
        })
    }

    /// `sql` prepared on this connection, once.
    fn statement(&mut self, sql: &str) -> Result<Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql)?;
        if self.statements.len() >= MAX_STATEMENTS {
            self.statements.clear();
        }
        self.statements.insert(sql.to_owned(), s.clone());
        Ok(s)
    }

    /// Runs `f` on the client; a failure in an open group outside any
    /// savepoint aborts the group's transaction.
    fn unless_aborted<T>(
        &mut self,
        f: impl FnOnce(&mut Client) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let result = f(&mut self.client);
        if let Err(e) = &result {
            self.abort(e);
        }
        result
    }

    /// Marks the open group aborted by `e`, unless something did first.
    fn abort(&mut self, e: &postgres::Error) {
        if let Some(g) = &mut self.group
            && g.aborted.is_none()
        {
            g.aborted = Some(super::errors::describe(e));
        }
    }

    /// Runs `sql`, prepared once, with `f`; `in_write` when inside a
    /// write, whose rollback keeps a failure from aborting the group.
    fn run_in<T>(
        &mut self,
        sql: &str,
        in_write: bool,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        let result = self.statement(sql).and_then(|st| f(&mut self.client, &st));
        if let Err(e) = &result {
            if !in_write {
                self.abort(e);
            }
            // feature_not_supported ("cached plan must not change result
            // type": a schema changed under it), invalid_sql_statement_name.
            if e.as_db_error()
                .is_some_and(|db| matches!(db.code().code(), "0A000" | "26000"))
            {
                self.statements.clear();
            }
        }
        result
    }
}

/// One write: a transaction of its own, or a savepoint of the open group
/// (committed with it). Dropped without [`Tx::commit`], it rolls back.
pub(super) struct Tx<'s> {
    session: &'s mut Session,
    part: bool,
    /// Locks this write took: the group's once it is released into it
    /// (a savepoint rolled back gives its locks up).
    taken: Vec<Lock>,
    done: bool,
}

impl Tx<'_> {
    /// Whether `lock` is held already, by the group or by this write.
    pub(super) fn holds(&self, lock: &Lock) -> bool {
        self.taken.contains(lock)
            || self
                .session
                .group
                .as_ref()
                .is_some_and(|g| g.held.contains(lock))
    }

    /// Notes that this write took `lock`.
    pub(super) fn took(&mut self, lock: Lock) {
        if !self.holds(&lock) {
            self.taken.push(lock);
        }
    }

    /// Takes the event log's lock, unless held already.
    pub(super) fn lock_events(&mut self) -> Result<(), postgres::Error> {
        if self.holds(&Lock::Events) {
            return Ok(());
        }
        self.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&super::events::EVENTS_LOCK],
        )?;
        self.took(Lock::Events);
        Ok(())
    }

    /// Commits a write of its own; keeps a savepoint for its group,
    /// whose locks it now holds (released with the next write's, or
    /// committed by the group's `COMMIT`).
    pub(super) fn commit(mut self) -> Result<(), postgres::Error> {
        self.done = true;
        match &mut self.session.group {
            None => self.session.client.batch_execute("COMMIT"),
            Some(g) => {
                g.unreleased = true;
                g.held.extend(self.taken.drain(..));
                Ok(())
            }
        }
    }
}

/// Statements, each prepared once per connection: run by a session
/// outside any write (in a group it joins the group's transaction, and a
/// failure aborts it), or by a write (whose rollback undoes only itself).
pub(super) trait Statements {
    /// Runs `sql` with `f`.
    fn run<T>(
        &mut self,
        sql: &str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error>;

    fn execute(&mut self, sql: &str, params: Params<'_>) -> Result<u64, postgres::Error> {
        self.run(sql, |c, s| c.execute(s, params))
    }

    fn query(&mut self, sql: &str, params: Params<'_>) -> Result<Vec<Row>, postgres::Error> {
        self.run(sql, |c, s| c.query(s, params))
    }

    fn query_one(&mut self, sql: &str, params: Params<'_>) -> Result<Row, postgres::Error> {
        self.run(sql, |c, s| c.query_one(s, params))
    }

    fn query_opt(&mut self, sql: &str, params: Params<'_>) -> Result<Option<Row>, postgres::Error> {
        self.run(sql, |c, s| c.query_opt(s, params))
    }
}

impl Statements for Session {
    fn run<T>(
        &mut self,
        sql: &str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        self.run_in(sql, false, f)
    }
}

impl Statements for Tx<'_> {
    fn run<T>(
        &mut self,
        sql: &str,
        f: impl FnOnce(&mut Client, &Statement) -> Result<T, postgres::Error>,
    ) -> Result<T, postgres::Error> {
        self.session.run_in(sql, true, f)
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if !self.part {
            // As the client's own transactions do: a failure here means the
            // connection is gone, and the server rolls back with it.
            let _ = self.session.client.batch_execute("ROLLBACK");
            return;
        }
        let _ = self
            .session
            .unless_aborted(|c| c.batch_execute("ROLLBACK TO SAVEPOINT w; RELEASE SAVEPOINT w"));
    }
}
