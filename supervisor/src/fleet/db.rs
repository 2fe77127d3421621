//! A connection of the fleet's own on a thread of its own, like the
//! store's (`store/handle.rs`), but holding the PostgreSQL store itself so
//! the fleet's statements (`store::postgres::lease`) can be called: the
//! lease loop has one, so a renewal never queues behind mail writes or a
//! slow status read, and the control socket's fleet requests another.

use crate::store::PostgresStore;
use crate::store::handle::OnThread;

/// A cheap handle on one fleet connection's thread.
pub type Db = OnThread<PostgresStore>;
