//! Who may use the control socket: root, the supervisor's own user, and
//! members of `admin_group`, checked by peer credentials on every
//! connection. The group is held here rather than fixed at bind, so a
//! reload can change it: the socket's group and mode follow (0660 with a
//! group, 0600 without).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use anyhow::{Context, bail};
use nix::unistd::{Gid, Uid};

/// The admission rule in force, shared by the server and the reload.
#[derive(Debug, Clone)]
pub struct Admission {
    socket: PathBuf,
    admin_gid: Arc<RwLock<Option<Gid>>>,
}

impl Admission {
    /// Admits only root and our user until [`Admission::set_group`].
    pub fn new(socket: &Path) -> Self {
        Self {
            socket: socket.to_path_buf(),
            admin_gid: Arc::new(RwLock::new(None)),
        }
    }

    /// Admits the members of group `name` too (none: nobody else), and
    /// gives the socket that group and mode 0660 (0600 without one).
    pub fn set_group(&self, name: Option<&str>) -> anyhow::Result<()> {
        let gid = match name {
            Some(name) => match nix::unistd::Group::from_name(name) {
                Ok(Some(g)) => Some(g.gid),
                _ => bail!("admin_group {name:?} does not exist; create it or remove the setting"),
            },
            None => None,
        };
        let path = &self.socket;
        // 0600 unless an admin group is configured: then the group may
        // connect too (SO_PEERCRED still checks every caller).
        let mode = if let Some(gid) = gid {
            nix::unistd::chown(path, None, Some(gid))
                .with_context(|| format!("cannot give {} to admin_group", path.display()))?;
            0o660
        } else {
            0o600
        };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set mode {mode:o} on {}", path.display()))?;
        *self.admin_gid.write().unwrap_or_else(|p| p.into_inner()) = gid;
        Ok(())
    }

    /// Whether a peer may use the socket.
    pub fn admits(&self, uid: u32, gid: u32) -> bool {
        if uid == 0 || uid == Uid::current().as_raw() {
            return true;
        }
        let admin = *self.admin_gid.read().unwrap_or_else(|p| p.into_inner());
        let Some(admin) = admin else { return false };
        if gid == admin.as_raw() {
            return true;
        }
        match nix::unistd::User::from_uid(Uid::from_raw(uid)) {
            Ok(Some(user)) => std::ffi::CString::new(user.name)
                .ok()
                .and_then(|name| nix::unistd::getgrouplist(&name, user.gid).ok())
                .is_some_and(|groups| groups.contains(&admin)),
            _ => false,
        }
    }
}
