//! What the config names outside itself, looked up at load time so a typo
//! fails `check-config` instead of the first spawn: programs, users, groups,
//! directories, and paths relative to the config file.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Group, User};

/// The companion binary that hosts plain commands and the demo workflow;
/// looked up beside the running `wfhost` first so a build tree or a package
/// works without PATH changes.
pub const CHILD_PROGRAM: &str = "wfhost-child";

/// Where programs named without a `/` are searched for.
#[derive(Debug, Clone, Default)]
pub struct Lookup {
    /// Directory of the running executable (searched first for
    /// [`CHILD_PROGRAM`]).
    pub exe_dir: Option<PathBuf>,
    /// The `PATH` to search.
    pub path_var: Option<OsString>,
}

impl Lookup {
    /// The running process's executable directory and `PATH`.
    pub fn from_process() -> Self {
        Self {
            exe_dir: std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(Path::to_path_buf)),
            path_var: std::env::var_os("PATH"),
        }
    }
}

/// A lookup that failed: what is wrong and what to do.
pub type Failure = (String, String);

/// The directory relative paths in the config file resolve against.
pub fn config_dir(config_path: &Path) -> PathBuf {
    let absolute = std::path::absolute(config_path).unwrap_or_else(|_| config_path.to_path_buf());
    absolute
        .parent()
        .map_or_else(|| PathBuf::from("/"), Path::to_path_buf)
}

/// `path` made absolute against the config file's directory (with `.`
/// components dropped, so messages show clean paths).
pub fn relative_to(dir: &Path, path: &str) -> PathBuf {
    dir.join(path).components().collect()
}

/// Whether `path` is a regular file someone may execute.
fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Why a program could not be found.
#[derive(Debug)]
pub enum NotFound {
    /// A path (with a `/`) that does not exist or cannot be read.
    Missing(PathBuf, std::io::Error),
    /// A path that is not a regular file.
    NotFile(PathBuf),
    /// A regular file without an execute bit.
    NotExecutable(PathBuf),
    /// A bare name found in none of these directories.
    NotOnPath(String),
}

/// Finds the program `name`: a name with a `/` is a path (relative to
/// `dir`); a bare name is searched in the absolute directories of
/// `lookup`'s PATH, [`CHILD_PROGRAM`] beside the running executable first.
pub fn find(name: &str, dir: &Path, lookup: &Lookup) -> Result<PathBuf, NotFound> {
    if name.contains('/') {
        let path = relative_to(dir, name);
        return match std::fs::metadata(&path) {
            Err(e) => Err(NotFound::Missing(path, e)),
            Ok(m) if !m.is_file() => Err(NotFound::NotFile(path)),
            Ok(_) if !is_executable(&path) => Err(NotFound::NotExecutable(path)),
            Ok(_) => Ok(path),
        };
    }
    if name == CHILD_PROGRAM
        && let Some(beside) = lookup.exe_dir.as_ref().map(|d| d.join(name))
        && is_executable(&beside)
    {
        return Ok(beside);
    }
    let dirs: Vec<PathBuf> = lookup
        .path_var
        .as_ref()
        .map(|p| std::env::split_paths(p).collect())
        .unwrap_or_default();
    // An empty PATH entry means the current directory; a supervisor must
    // never run whatever happens to sit in its working directory.
    if let Some(found) = dirs
        .iter()
        .filter(|d| d.is_absolute())
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
    {
        return Ok(found);
    }
    let searched = std::env::join_paths(&dirs)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    Err(NotFound::NotOnPath(searched))
}

/// The absolute path of the program `name` (`command[0]`): a name with a
/// `/` is a path (relative to the config file's directory); a bare name is
/// searched on PATH, [`CHILD_PROGRAM`] beside the running executable first.
pub fn program(name: &str, dir: &Path, lookup: &Lookup) -> Result<PathBuf, Failure> {
    if name.is_empty() {
        return Err((
            "command[0] is empty".into(),
            "name the program to run, e.g. command = [\"/usr/local/bin/worker\"]".into(),
        ));
    }
    find(name, dir, lookup).map_err(|why| match why {
        NotFound::Missing(path, e) => (
            format!("program {} cannot be found: {e}", path.display()),
            format!(
                "check the path (a relative path is resolved against the config file's directory, {})",
                dir.display()
            ),
        ),
        NotFound::NotFile(path) => (
            format!("program {} is not a regular file", path.display()),
            "name the executable file itself".into(),
        ),
        NotFound::NotExecutable(path) => (
            format!("program {} is not executable", path.display()),
            format!("make it executable: chmod +x {}", path.display()),
        ),
        NotFound::NotOnPath(searched) => {
            let hint = if name == CHILD_PROGRAM {
                let beside = lookup.exe_dir.as_ref().map_or_else(
                    || "the wfhost binary".to_string(),
                    |d| d.display().to_string(),
                );
                format!(
                    "install {CHILD_PROGRAM} beside wfhost ({beside}) or on PATH (`cargo build --workspace --bins` builds it)"
                )
            } else {
                "install it, or write its absolute path in command[0]".to_string()
            };
            (format!("program {name:?} is not on PATH ({searched})"), hint)
        }
    })
}

/// The uid and primary gid of the user `name`.
pub fn user(name: &str) -> Result<(u32, u32), Failure> {
    match User::from_name(name) {
        Ok(Some(u)) => Ok((u.uid.as_raw(), u.gid.as_raw())),
        Ok(None) => Err((
            format!("no user named {name:?} on this host"),
            format!("create it (useradd --system {name}) or fix the name"),
        )),
        Err(e) => Err((
            format!("cannot look up user {name:?}: {e}"),
            "check /etc/nsswitch.conf and the user database".into(),
        )),
    }
}

/// The gid of the group `name`.
pub fn group(name: &str) -> Result<u32, Failure> {
    match Group::from_name(name) {
        Ok(Some(g)) => Ok(g.gid.as_raw()),
        Ok(None) => Err((
            format!("no group named {name:?} on this host"),
            format!("create it (groupadd --system {name}) or fix the name"),
        )),
        Err(e) => Err((
            format!("cannot look up group {name:?}: {e}"),
            "check /etc/nsswitch.conf and the group database".into(),
        )),
    }
}

/// Checks that `path` is an existing directory.
pub fn directory(path: &Path) -> Result<(), Failure> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err((
            format!("{} is not a directory", path.display()),
            "point working_dir at a directory".into(),
        )),
        Err(e) => Err((
            format!("working_dir {} cannot be used: {e}", path.display()),
            "create it, or fix the path (relative paths are resolved against the config file's directory)".into(),
        )),
    }
}

/// Checks a PostgreSQL connection string (`postgresql://…` or `key=value`
/// pairs) the way the store will read it: it must parse and name a server
/// and a database.
pub fn store_url(url: &str) -> Result<(), Failure> {
    let example =
        "e.g. \"postgresql://wfhost@db.example/wfhost\" or \"host=/run/postgresql dbname=wfhost\"";
    let info = super::conninfo::Conninfo::parse(url).map_err(|e| {
        (
            format!("[store] url is not a PostgreSQL connection string: {e}"),
            format!("write a postgresql:// URL or key=value pairs, {example}"),
        )
    })?;
    let config = info.config;
    if config.get_hosts().is_empty() {
        return Err((
            "[store] url names no server".into(),
            format!("add the host or socket directory, {example}"),
        ));
    }
    if config.get_dbname().is_none() {
        return Err((
            "[store] url names no database".into(),
            format!("add the database name, {example}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn executable(path: &Path) {
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn child_program_is_found_beside_the_executable_before_path() {
        let exe_dir = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        executable(&exe_dir.path().join(CHILD_PROGRAM));
        executable(&on_path.path().join(CHILD_PROGRAM));
        let lookup = Lookup {
            exe_dir: Some(exe_dir.path().to_path_buf()),
            path_var: Some(on_path.path().as_os_str().to_owned()),
        };
        assert_eq!(
            program(CHILD_PROGRAM, Path::new("/"), &lookup),
            Ok(exe_dir.path().join(CHILD_PROGRAM))
        );
        let path_only = Lookup {
            exe_dir: Some(PathBuf::from("/nonexistent")),
            ..lookup
        };
        assert_eq!(
            program(CHILD_PROGRAM, Path::new("/"), &path_only),
            Ok(on_path.path().join(CHILD_PROGRAM))
        );
    }

    #[test]
    fn other_programs_come_from_path_only() {
        let exe_dir = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        executable(&exe_dir.path().join("worker"));
        let lookup = Lookup {
            exe_dir: Some(exe_dir.path().to_path_buf()),
            path_var: Some(on_path.path().as_os_str().to_owned()),
        };
        let (msg, hint) = program("worker", Path::new("/"), &lookup).unwrap_err();
        assert!(msg.contains("not on PATH"), "{msg}");
        assert!(hint.contains("absolute path"), "{hint}");
        executable(&on_path.path().join("worker"));
        assert_eq!(
            program("worker", Path::new("/"), &lookup),
            Ok(on_path.path().join("worker"))
        );
    }

    #[test]
    fn missing_child_program_says_how_to_get_it() {
        let lookup = Lookup {
            exe_dir: Some(PathBuf::from("/nonexistent")),
            path_var: Some(OsString::from("/nonexistent-bin")),
        };
        let (_, hint) = program(CHILD_PROGRAM, Path::new("/"), &lookup).unwrap_err();
        assert!(hint.contains("cargo build --workspace --bins"), "{hint}");
    }

    #[test]
    fn relative_program_paths_resolve_against_the_config_dir() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("bin")).unwrap();
        executable(&dir.path().join("bin/run"));
        let lookup = Lookup::default();
        assert_eq!(
            program("bin/run", dir.path(), &lookup),
            Ok(dir.path().join("bin/run"))
        );
        std::fs::write(dir.path().join("bin/data"), "").unwrap();
        let (msg, hint) = program("./bin/data", dir.path(), &lookup).unwrap_err();
        assert!(msg.contains("not executable"), "{msg}");
        assert!(hint.contains("chmod +x"), "{hint}");
        let (msg, _) = program("bin", dir.path(), &Lookup::default()).unwrap_err();
        assert!(msg.contains("not on PATH"), "{msg}");
        let (msg, _) = program("./bin", dir.path(), &lookup).unwrap_err();
        assert!(msg.contains("not a regular file"), "{msg}");
        let (msg, _) = program("./nope", dir.path(), &lookup).unwrap_err();
        assert!(msg.contains("cannot be found"), "{msg}");
    }

    #[test]
    fn empty_path_entries_never_mean_the_working_directory() {
        let lookup = Lookup {
            exe_dir: None,
            path_var: Some(OsString::from(":relative")),
        };
        assert!(program("sh", Path::new("/"), &lookup).is_err());
    }

    #[test]
    fn users_and_groups_resolve_by_name() {
        assert_eq!(user("root"), Ok((0, 0)));
        assert_eq!(group("root"), Ok(0));
        assert!(
            user("wfhost-no-such-user")
                .unwrap_err()
                .0
                .contains("no user")
        );
        assert!(
            group("wfhost-no-such-group")
                .unwrap_err()
                .0
                .contains("no group")
        );
    }

    #[test]
    fn relative_paths_are_joined_cleanly() {
        let dir = Path::new("/etc/wfhost");
        assert_eq!(
            relative_to(dir, "./a/./b"),
            PathBuf::from("/etc/wfhost/a/b")
        );
        assert_eq!(relative_to(dir, "../x"), PathBuf::from("/etc/wfhost/../x"));
        assert_eq!(relative_to(dir, "/abs/./y"), PathBuf::from("/abs/y"));
    }

    #[test]
    fn config_dir_is_absolute() {
        assert!(config_dir(Path::new("wfhost.toml")).is_absolute());
        assert_eq!(
            config_dir(Path::new("/etc/wfhost/a.toml")),
            PathBuf::from("/etc/wfhost")
        );
    }
}
