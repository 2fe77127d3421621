//! cgroup v2 groups: found, created, filled, killed and removed.
//!
//! A cgroup holds a child and everything it ever starts, however it forks
//! (`setsid`, double forks, a new process group): `cgroup.kill` SIGKILLs
//! the lot at once, and `cgroup.events` says when it is empty. Only the
//! unified (v2) hierarchy is used; which controllers it offers differs
//! from machine to machine (a hybrid layout's `unified` mount may offer
//! none worth having), so everything here reports what it found rather
//! than assuming.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// `statfs` type of a cgroup v2 file system.
const CGROUP2_SUPER_MAGIC: libc::c_long = 0x6367_7270;

/// Whether `path` is a directory of a cgroup v2 hierarchy.
pub fn is_cgroup2(path: &Path) -> io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let mut c = path.as_os_str().as_bytes().to_vec();
    c.push(0);
    // SAFETY: statfs reads the NUL-terminated path and writes the struct.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr().cast(), &mut fs) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fs.f_type as libc::c_long == CGROUP2_SUPER_MAGIC)
}

/// Where the cgroup v2 hierarchy is mounted (the first `cgroup2` mount in
/// `/proc/self/mountinfo`), if anywhere.
pub fn unified_mount() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let point = left.split_whitespace().nth(4)?;
        (right.split_whitespace().next() == Some("cgroup2")).then(|| unescape(point))
    })
}

/// A mountinfo path with its octal escapes (`\040` for a space) undone.
fn unescape(field: &str) -> PathBuf {
    use std::os::unix::ffi::OsStringExt;
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (bytes[i], octal) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    PathBuf::from(std::ffi::OsString::from_vec(out))
}

/// This process's own cgroup v2 directory: the `0::` line of
/// `/proc/self/cgroup` below the hierarchy's mount point.
pub fn own_cgroup() -> io::Result<Cgroup> {
    let mount = unified_mount().ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "no cgroup v2 hierarchy is mounted")
    })?;
    let text = std::fs::read_to_string("/proc/self/cgroup")?;
    let own = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "this process is in no cgroup v2 group (/proc/self/cgroup has no 0:: line)",
            )
        })?;
    Cgroup::open(&mount.join(own.trim().trim_start_matches('/')))
}

/// One cgroup v2 directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup {
    path: PathBuf,
}

impl Cgroup {
    /// The cgroup at `path`, which must be a directory of a cgroup v2
    /// hierarchy.
    pub fn open(path: &Path) -> io::Result<Self> {
        if !is_cgroup2(path)? {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not in a cgroup v2 hierarchy", path.display()),
            ));
        }
        if !path.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a cgroup directory", path.display()),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
        })
    }

    /// The cgroup `name` below this one, created (an existing one is used
    /// as it is).
    pub fn create_child(&self, name: &str) -> io::Result<Self> {
        let path = self.path.join(name);
        match std::fs::create_dir(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        Ok(Self { path })
    }

    /// Its directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its name, the last component of its path.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// The cgroups directly below it.
    pub fn children(&self) -> io::Result<Vec<Cgroup>> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&self.path)?.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(Cgroup { path: entry.path() });
            }
        }
        Ok(out)
    }

    /// Reads one of its files, trimmed.
    pub fn read(&self, file: &str) -> io::Result<String> {
        let mut text = String::new();
        File::open(self.path.join(file))?.read_to_string(&mut text)?;
        Ok(text.trim().to_owned())
    }

    /// Writes `value` to one of its files (a controller's knob).
    pub fn write(&self, file: &str, value: &str) -> io::Result<()> {
        std::fs::write(self.path.join(file), value)
    }

    /// Whether it has the interface file `file` (e.g. `cgroup.kill`, new
    /// in Linux 5.14).
    pub fn has(&self, file: &str) -> bool {
        self.path.join(file).exists()
    }

    /// The controllers its children may be given (`cgroup.controllers`).
    pub fn controllers(&self) -> io::Result<Vec<String>> {
        Ok(self
            .read("cgroup.controllers")?
            .split_whitespace()
            .map(str::to_owned)
            .collect())
    }

    /// The controllers its children have (`cgroup.subtree_control`).
    pub fn subtree_controllers(&self) -> io::Result<Vec<String>> {
        Ok(self
            .read("cgroup.subtree_control")?
            .split_whitespace()
            .map(str::to_owned)
            .collect())
    }

    /// Gives its children `controller`. Fails (EBUSY) while it holds
    /// processes of its own: cgroup v2 distributes resources only between
    /// leaves.
    pub fn enable(&self, controller: &str) -> io::Result<()> {
        self.write("cgroup.subtree_control", &format!("+{controller}"))
    }

    /// Its member processes (`cgroup.procs`; zombies are not members).
    pub fn pids(&self) -> io::Result<Vec<u32>> {
        Ok(self
            .read("cgroup.procs")?
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect())
    }

    /// Moves process `pid` (all its threads) into it.
    pub fn adopt(&self, pid: u32) -> io::Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Its `cgroup.procs`, opened for writing before a fork, so the child
    /// can enter it between fork and exec with one raw `write`
    /// ([`ChildSetup::cgroup`](crate::ChildSetup::cgroup)). Close-on-exec:
    /// the program never holds it.
    pub fn procs_for_spawn(&self) -> io::Result<File> {
        std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(self.path.join("cgroup.procs"))
    }

    /// Whether any process is in it or below it (`cgroup.events`).
    pub fn populated(&self) -> io::Result<bool> {
        let events = self.read("cgroup.events")?;
        Ok(events
            .lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == ["populated", "1"]))
    }

    /// SIGKILLs every process in it and below it, however they forked:
    /// `cgroup.kill` where the kernel has it (5.14), else frozen
    /// (`cgroup.freeze`, so nothing forks meanwhile), every member
    /// killed, and thawed. Returns how many members it had.
    pub fn kill(&self) -> io::Result<usize> {
        let members = self.member_count();
        if self.has("cgroup.kill") {
            self.write("cgroup.kill", "1")?;
            return Ok(members);
        }
        let frozen = self.write("cgroup.freeze", "1").is_ok();
        let result = self.kill_members();
        if frozen {
            let _ = self.write("cgroup.freeze", "0");
        }
        result.map(|()| members)
    }

    /// Members of it and every cgroup below it.
    fn member_count(&self) -> usize {
        let below: usize = self
            .children()
            .unwrap_or_default()
            .iter()
            .map(Cgroup::member_count)
            .sum();
        self.pids().map_or(0, |p| p.len()) + below
    }

    fn kill_members(&self) -> io::Result<()> {
        for child in self.children()? {
            child.kill_members()?;
        }
        for pid in self.pids()? {
            if let Ok(raw) = i32::try_from(pid)
                && raw > 1
            {
                // SAFETY: kill with a positive pid and a valid signal.
                unsafe { libc::kill(raw, libc::SIGKILL) };
            }
        }
        Ok(())
    }

    /// Removes it and every (empty) cgroup below it.
    pub fn remove(&self) -> io::Result<()> {
        for child in self.children()? {
            child.remove()?;
        }
        match std::fs::remove_dir(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A counter file of a cgroup (e.g. `memory.current`) kept open and
/// re-read from offset 0: one `pread` per reading, fresh every time.
#[derive(Debug)]
pub struct Counter {
    file: File,
}

impl Counter {
    /// Opens `file` of `cgroup`.
    pub fn open(cgroup: &Cgroup, file: &str) -> io::Result<Self> {
        Ok(Self {
            file: File::open(cgroup.path().join(file))?,
        })
    }

    /// The counter's value now.
    pub fn read(&self) -> io::Result<u64> {
        let mut buf = [0u8; 64];
        let n = self.file.read_at(&mut buf, 0)?;
        std::str::from_utf8(&buf[..n])
            .ok()
            .and_then(|t| t.split_whitespace().next())
            .and_then(|t| t.parse().ok())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mountinfo_escapes_are_undone() {
        assert_eq!(
            unescape(r"/sys/fs/cgroup/a\040b"),
            PathBuf::from("/sys/fs/cgroup/a b")
        );
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
        assert_eq!(unescape(r"/odd\04"), PathBuf::from(r"/odd\04"));
    }

    #[test]
    fn a_plain_directory_is_not_a_cgroup() {
        let err = Cgroup::open(Path::new("/tmp")).expect_err("/tmp is no cgroup");
        assert!(err.to_string().contains("not in a cgroup v2"), "{err}");
        assert!(Cgroup::open(Path::new("/nonexistent/wfh")).is_err());
    }
}
