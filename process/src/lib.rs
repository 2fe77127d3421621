//! Process plumbing shared by the supervisor, `wfhost-child exec` and the
//! conformance kit: one copy of the code that must be exactly right.
//!
//! - [`ChildSetup`]: what a child gets between `fork` and `exec` (its own
//!   process group, a parent-death signal checked against a parent that may
//!   already be gone, the control channel at exactly fd 3, every other fd
//!   close-on-exec, the soft `RLIMIT_NOFILE` reset), all async-signal-safe;
//! - [`spawn_with_channel`] and [`Spawner`]: a child started as the
//!   supervisor starts one, with a fresh socketpair, a cleared environment
//!   and captured output, forked from a thread that outlives it;
//! - [`signal_group`] and [`kill_tree`]: signalling a child's process group,
//!   and killing its whole tree (the group, every descendant found in
//!   `/proc`, and the groups they lead);
//! - [`raise_nofile_limit`]: room for many children's fds;
//! - [`Rlimits`]: what `setrlimit` bounds in a child before it runs;
//! - [`Cgroup`]: cgroup v2 groups that hold a child and all it starts, and
//!   `cgroup.kill` for all of it at once;
//! - [`one_arena`] and [`trim`]: what a long-lived process keeps resident
//!   without using it (allocator arenas, start-up code pages);
//! - [`become_subreaper`] and the rest of `orphans`: containment without
//!   cgroups, by adopting what escapes the process group and telling it
//!   apart by its [`ENV_ORIGIN`].
//!
//! No policy lives here: when to signal and what to log is the caller's.

mod cgroup;
mod group;
mod nofile;
mod orphans;
mod resident;
mod rlimits;
mod setup;
mod spawn;
mod tree;

pub use cgroup::{Cgroup, Counter, is_cgroup2, own_cgroup, unified_mount};
pub use group::{kill_tree, signal_group};
pub use nix::sys::signal::Signal;
pub use nofile::{CHILD_NOFILE_SOFT, raise_nofile_limit};
pub use orphans::{
    ENV_ORIGIN, become_subreaper, is_subreaper, is_zombie, origin_of, own_children, processes_from,
    try_reap,
};
pub use resident::{Trimmed, one_arena, trim};
pub use rlimits::{Capped, Rlimits};
pub use setup::ChildSetup;
pub use spawn::{ChildSpec, Spawned, Spawner, spawn_with_channel};
pub use tree::descendants;

/// The fd at which a child finds its control channel (the protocol's
/// `WFHOST_CONTROL_FD`).
pub const CONTROL_FD: i32 = 3;
