//! No process escapes its deployment. Each child, and everything it ever
//! starts, is held by one of two things:
//!
//! - **a cgroup of its own** (`cgroup`), where the supervisor may make
//!   them: the child enters it between fork and exec, so nothing it runs
//!   starts outside; `cgroup.kill` ends all of it at once, however it
//!   forked; `memory.current` is its memory for the recycle bound, and the
//!   deployment's `limits` are written to it where the controllers are
//!   enabled;
//! - **its process tree** (`process-tree`), where there are no cgroups to
//!   be had: the supervisor is a child subreaper, so whatever leaves the
//!   child's process group and loses its parent is re-parented to the
//!   supervisor, which tells it apart by the [`ENV_ORIGIN`] (the child's
//!   channel id) in its environment and kills it with that child.
//!
//! Either way the supervisor is a subreaper and reaps what it adopts, by
//! pid (never `waitpid(-1)`, which would steal the runtime's children).
//!
//! Layout of the cgroups (`<root>` is `cgroup_root`, or the supervisor's own
//! cgroup when systemd delegated it with `Delegate=yes`):
//!
//! ```text
//! <root>/                          controllers enabled for children: memory pids cpu (those offered)
//! <root>/supervisor/               the supervisor itself, when it ran in <root> (cgroup v2
//!                                  puts processes only in leaves of a tree that shares resources)
//! <root>/<deployment>.<channel_id>/  one live child and all it started; removed once empty
//! ```
//!
//! A `<deployment>.<channel_id>` cgroup found at start-up was left by a
//! supervisor that died without cleaning up: what is in it is killed and
//! it is removed. Other directories in `<root>` are left alone.
//!
//! [`ENV_ORIGIN`]: wfhost_process::ENV_ORIGIN

mod cgroups;
mod enclosure;
pub mod orphans;

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use tokio::task::JoinHandle;
use tracing::{info, warn};
use wfhost_process::Spawner;

use crate::config::SupervisorSettings;
use cgroups::Root;
pub use enclosure::{Enclosure, NotApplied};

/// How this supervisor contains its children.
pub struct Containment {
    kind: Kind,
    /// Channel ids of the children alive now, with their deployment: an
    /// adopted orphan whose origin is not here has no owner left.
    live: Mutex<HashMap<String, String>>,
    /// Limit problems already logged, as `deployment/limit/why`.
    said: Mutex<HashSet<String>>,
    /// Clean-ups of exited children still under way.
    releases: Mutex<Vec<JoinHandle<()>>>,
}

/// What holds each child.
enum Kind {
    Cgroup(Root),
    ProcessTree { why: String },
}

static HOST: OnceLock<Containment> = OnceLock::new();

/// Sets this supervisor's containment up once (later calls, after a
/// reload, return the first: a new `cgroup_root` takes effect at the next
/// start): becomes a subreaper, finds the cgroup root, logs which it is.
pub fn init(settings: &SupervisorSettings) -> &'static Containment {
    HOST.get_or_init(|| {
        if let Err(e) = wfhost_process::become_subreaper() {
            warn!(error = %e, "cannot become a child subreaper; processes that leave a child's process group and lose their parent go to init, beyond reach");
        }
        let kind = match Root::find(&settings.cgroup_root) {
            Ok(root) => {
                info!(root = %root.path().display(), controllers = %root.enabled().join(" "),
                    "containment: a cgroup per child");
                Kind::Cgroup(root)
            }
            Err(why) => {
                info!(why = %why, "containment: process-tree (the supervisor adopts and kills what leaves a child's process group)");
                Kind::ProcessTree { why }
            }
        };
        Containment::new(kind)
    })
}

/// The containment set up by [`init`]; before it (unit tests) children
/// are contained by their process tree.
pub fn host() -> &'static Containment {
    HOST.get_or_init(|| {
        Containment::new(Kind::ProcessTree {
            why: "containment was not set up".into(),
        })
    })
}

impl Containment {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            live: Mutex::default(),
            said: Mutex::default(),
            releases: Mutex::default(),
        }
    }

    fn root(&self) -> Option<&Root> {
        match &self.kind {
            Kind::Cgroup(root) => Some(root),
            Kind::ProcessTree { .. } => None,
        }
    }

    /// Why there are no cgroups, if there are none.
    fn without_cgroups(&self) -> Option<&str> {
        match &self.kind {
            Kind::Cgroup(_) => None,
            Kind::ProcessTree { why } => Some(why),
        }
    }

    /// Logs a limit of `deployment` that cannot apply, once for each
    /// reason (a respawn does not repeat it).
    fn say_once(&self, deployment: &str, n: &NotApplied) {
        let key = format!("{deployment}/{}/{}", n.limit, n.why);
        if self
            .said
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key)
        {
            warn!(
                deployment,
                limit = n.limit,
                "limits.{} cannot apply: {}",
                n.limit,
                n.why
            );
        }
    }

    fn set_live(&self, channel_id: &str, deployment: Option<&str>) {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        match deployment {
            Some(d) => live.insert(channel_id.to_owned(), d.to_owned()),
            None => live.remove(channel_id),
        };
    }

    /// Whether a child with this channel id is alive.
    fn is_live(&self, channel_id: &str) -> bool {
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(channel_id)
    }

    fn track(&self, release: JoinHandle<()>) {
        let mut releases = self.releases.lock().unwrap_or_else(|p| p.into_inner());
        releases.retain(|r| !r.is_finished());
        releases.push(release);
    }

    /// At start-up, before any child is spawned: kills what a previous
    /// supervisor's children left in their cgroups; they are removed in
    /// the background once empty.
    pub fn clean_up_after_crash(&'static self) {
        if let Some(root) = self.root() {
            let stale = root.kill_stale("left by a previous supervisor");
            if !stale.is_empty()
                && let Ok(rt) = tokio::runtime::Handle::try_current()
            {
                self.track(rt.spawn(cgroups::remove_all(stale)));
            }
        }
    }

    /// At the end, once every deployment has stopped: waits for the
    /// clean-ups under way, then kills and reaps whatever is left (nothing
    /// has an owner any more: every child cgroup is emptied and removed,
    /// every adopted orphan killed) and reaps it.
    pub async fn finish(&self, spawner: &Spawner) {
        let releases =
            std::mem::take(&mut *self.releases.lock().unwrap_or_else(|p| p.into_inner()));
        for r in releases {
            let _ = r.await;
        }
        if let Some(root) = self.root() {
            cgroups::remove_all(root.kill_stale("still there at the end")).await;
        }
        orphans::end_all(spawner).await;
    }
}
