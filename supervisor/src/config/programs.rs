//! Every program a config names that can be checked before a spawn: each
//! deployment's `command[0]`, the command `wfhost-child exec` hosts, and
//! the script an interpreter is handed (`python3 orders.py`). `load`
//! refuses a missing `command[0]`; the rest only fail once a child starts,
//! so `check-config` lists every one that is missing at once, each with
//! its file, line and column, and the supervisor warns about them.

use std::path::{Path, PathBuf};

use toml::Spanned;

use super::error::{Problem, line_column};
use super::raw::{ARG_MAX, RawCommon, RawDeployment, RawFile, Text};
use super::resolve::{self, CHILD_PROGRAM, Lookup, NotFound};
use super::{ConfigError, DeploymentConfig, defaults};

/// One program checked.
#[derive(Debug)]
pub struct Checked {
    /// The deployment naming it.
    pub deployment: String,
    /// Where it was found, or why not (with its file, line and column).
    pub found: Result<PathBuf, ConfigError>,
}

/// Interpreters whose first argument, when it is not an option, is a
/// script file.
const INTERPRETERS: &[&str] = &[
    "python", "python3", "node", "nodejs", "ruby", "perl", "bash", "sh", "dash", "zsh",
];

type Arg = Spanned<Text<ARG_MAX>>;

/// Checks every program the config at `path` names. A file that does not
/// parse gets the parse error (`load` then reports the same).
pub fn programs(path: &Path) -> Result<Vec<Checked>, ConfigError> {
    let text = super::read(path)?;
    let raw: RawFile = toml::from_str(&text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        Problem::from_message(span, e.message()).into_error(&text, path)
    })?;
    let dir = resolve::config_dir(path);
    let defaults = raw.defaults.unwrap_or_default();
    let lookup = Lookup::from_process();
    let mut checked = Vec::new();
    for dep in &raw.deployment {
        let dep = dep.get_ref();
        let deployment = &dep.id.get_ref().0;
        let argv: &[Arg] = dep.command.get_ref();
        let names: Vec<&str> = argv.iter().map(|a| a.get_ref().0.as_str()).collect();
        let places = Places {
            config_dir: &dir,
            working_dir: working_dir(dep, &defaults, &dir),
            child_path: child_path(dep, &defaults),
            lookup: &lookup,
        };
        for (at, found) in places.command(&names) {
            let found = found.map_err(|(message, hint)| {
                let (line, column) = line_column(&text, argv[at].span().start);
                ConfigError::Invalid {
                    path: path.to_path_buf(),
                    line,
                    column,
                    message: format!("deployment {deployment:?}: {message}"),
                    hint,
                }
            });
            checked.push(Checked {
                deployment: deployment.clone(),
                found,
            });
        }
    }
    Ok(checked)
}

/// The first program of a loaded deployment that cannot be found now (a
/// script deleted or misspelt), in one line with its fix: what a child
/// that ended without a word on its channel most likely tripped on.
pub fn missing(cfg: &DeploymentConfig) -> Option<String> {
    let root = PathBuf::from("/");
    let working_dir = cfg.working_dir.clone().unwrap_or_else(|| root.clone());
    let places = Places {
        config_dir: &working_dir,
        working_dir: working_dir.clone(),
        child_path: cfg
            .env
            .get("PATH")
            .cloned()
            .unwrap_or_else(|| defaults::CHILD_PATH.to_owned()),
        lookup: &Lookup::from_process(),
    };
    let names: Vec<&str> = cfg.command.iter().map(String::as_str).collect();
    places
        .command(&names)
        .into_iter()
        .find_map(|(_, found)| found.err())
        .map(|(message, hint)| format!("{message}; help: {hint}"))
}

/// Where the deployment's child starts: its `working_dir` (own, else
/// `[defaults]`), relative to the config file's directory, else that
/// directory.
fn working_dir(dep: &RawDeployment, defaults: &RawCommon, dir: &Path) -> PathBuf {
    match dep.working_dir.as_ref().or(defaults.working_dir.as_ref()) {
        Some(wd) if !wd.get_ref().0.is_empty() => resolve::relative_to(dir, &wd.get_ref().0),
        _ => dir.to_path_buf(),
    }
}

/// The child's PATH: the deployment's `env.PATH`, else `[defaults]`'s,
/// else the one every child gets.
fn child_path(dep: &RawDeployment, defaults: &RawCommon) -> String {
    [dep.env.as_ref(), defaults.env.as_ref()]
        .into_iter()
        .flatten()
        .find_map(|env| {
            env.get_ref()
                .iter()
                .find(|(k, _)| k.0 == "PATH")
                .map(|(_, v)| v.0.clone())
        })
        .unwrap_or_else(|| defaults::CHILD_PATH.to_owned())
}

/// Each program checked, by the index of the argument naming it: where it
/// was found, or what is wrong and the fix.
type Found = Vec<(usize, Result<PathBuf, resolve::Failure>)>;

/// What one deployment's programs are looked up against.
struct Places<'a> {
    config_dir: &'a Path,
    working_dir: PathBuf,
    child_path: String,
    lookup: &'a Lookup,
}

impl Places<'_> {
    /// `command[0]`, then what it runs: the command `wfhost-child exec`
    /// hosts, or an interpreter's script.
    fn command(&self, argv: &[&str]) -> Found {
        let mut out = Vec::new();
        let Some(name) = argv.first() else {
            return out;
        };
        let found = resolve::program(name, self.config_dir, self.lookup);
        let is_child = found
            .as_ref()
            .is_ok_and(|p| p.file_name().is_some_and(|f| f == CHILD_PROGRAM));
        out.push((0, found));
        if is_child && argv.get(1) == Some(&"exec") {
            if let Some(at) = hosted_index(&argv[2..]) {
                self.hosted(&argv[2 + at..], 2 + at, &mut out);
            }
        } else {
            self.script(argv, 0, &mut out);
        }
        out
    }

    /// The command `wfhost-child exec` starts (at index `base` of the
    /// command): searched on the child's PATH, or relative to its working
    /// directory.
    fn hosted(&self, argv: &[&str], base: usize, out: &mut Found) {
        let Some(name) = argv.first() else {
            return;
        };
        let lookup = Lookup {
            exe_dir: None,
            path_var: Some(self.child_path.clone().into()),
        };
        let wd = self.working_dir.display();
        let found = resolve::find(name, &self.working_dir, &lookup).map_err(|why| match why {
            NotFound::NotOnPath(searched) => (
                format!("program {name:?} run by `wfhost-child exec` is not on the child's PATH ({searched})"),
                format!(
                    "install it, fix its spelling, or write its absolute path; the child's PATH is the \
                     deployment's env.PATH, else {}",
                    defaults::CHILD_PATH
                ),
            ),
            NotFound::Missing(p, e) => (
                format!("program {} run by `wfhost-child exec` cannot be found: {e}", p.display()),
                format!("check the path (a relative path is resolved against the child's working directory, {wd})"),
            ),
            NotFound::NotFile(p) => (
                format!("program {} run by `wfhost-child exec` is not a regular file", p.display()),
                "name the executable file itself".to_owned(),
            ),
            NotFound::NotExecutable(p) => (
                format!("program {} run by `wfhost-child exec` is not executable", p.display()),
                format!("make it executable: chmod +x {}", p.display()),
            ),
        });
        out.push((base, found));
        self.script(argv, base, out);
    }

    /// The script file an interpreter is handed, if `argv` (at index
    /// `base` of the command) is one.
    fn script(&self, argv: &[&str], base: usize, out: &mut Found) {
        let (Some(program), Some(name)) = (argv.first(), argv.get(1)) else {
            return;
        };
        let interpreter = Path::new(program)
            .file_name()
            .map(|f| f.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !is_interpreter(&interpreter) || name.starts_with('-') || name.is_empty() {
            return;
        }
        let path = resolve::relative_to(&self.working_dir, name);
        let found = match std::fs::metadata(&path) {
            Ok(m) if m.is_file() => Ok(path),
            Ok(_) => Err((
                format!(
                    "script {} for {interpreter} is not a regular file",
                    path.display()
                ),
                "name the script file itself".to_owned(),
            )),
            Err(e) => Err((
                format!(
                    "script {name:?} for {interpreter} cannot be found at {}: {e}",
                    path.display()
                ),
                format!(
                    "a relative path is resolved against the child's working directory, {} (working_dir, \
                     else the config file's directory); fix the path or set working_dir",
                    self.working_dir.display()
                ),
            )),
        };
        out.push((base + 1, found));
    }
}

/// Whether `name` (a file name) is an interpreter taking a script file:
/// `python3.11` and `node20` count as their family.
fn is_interpreter(name: &str) -> bool {
    let family = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    INTERPRETERS.contains(&family) || INTERPRETERS.contains(&name)
}

/// Where the hosted command starts among `wfhost-child exec`'s arguments
/// (`[--drain V] [--run NAME] [--] CMD…`), if it has one.
fn hosted_index(args: &[&str]) -> Option<usize> {
    let mut i = 0;
    while let Some(&a) = args.get(i) {
        match a {
            "--" => return (i + 1 < args.len()).then_some(i + 1),
            "--drain" | "--run" => i += 2,
            _ if a.starts_with("--drain=") || a.starts_with("--run=") => i += 1,
            // Help, version or a flag exec does not know: no command runs.
            _ if a.starts_with('-') => return None,
            _ => return Some(i),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args<'a>(list: &[&'a str]) -> Vec<&'a str> {
        list.to_vec()
    }

    #[test]
    fn the_hosted_command_follows_execs_own_options() {
        assert_eq!(hosted_index(&args(&["--", "sh", "-c", "x"])), Some(1));
        assert_eq!(hosted_index(&args(&["sleep", "1"])), Some(0));
        assert_eq!(
            hosted_index(&args(&["--drain", "wait", "--", "sh"])),
            Some(3)
        );
        assert_eq!(
            hosted_index(&args(&["--drain=wait", "--run", "r", "job"])),
            Some(3)
        );
        assert_eq!(hosted_index(&args(&["--help"])), None);
        assert_eq!(hosted_index(&args(&["--"])), None);
        assert_eq!(hosted_index(&args(&[])), None);
    }

    #[test]
    fn interpreters_are_known_by_family() {
        for name in ["python3", "python3.11", "node", "node20", "sh", "bash"] {
            assert!(is_interpreter(name), "{name}");
        }
        for name in ["sleep", "wfhost-child", "pythonic"] {
            assert!(!is_interpreter(name), "{name}");
        }
    }

    #[test]
    fn a_loaded_deployments_missing_script_is_named_with_its_fix() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = |command: &[&str]| {
            let text = format!(
                "[[deployment]]\nid = \"d\"\ncommand = {command:?}\nworking_dir = {:?}\n",
                dir.path().display().to_string()
            );
            let path = dir.path().join("wfhost.toml");
            crate::config::parse(&text, &path)
                .unwrap()
                .deployments
                .remove(0)
        };
        let said = missing(&cfg(&["/bin/sh", "sumarize.sh"])).unwrap();
        assert!(
            said.starts_with("script \"sumarize.sh\" for sh cannot be found at ")
                && said.contains("; help: "),
            "{said}"
        );
        std::fs::write(dir.path().join("sumarize.sh"), "exit 0").unwrap();
        assert_eq!(missing(&cfg(&["/bin/sh", "sumarize.sh"])), None);
        assert_eq!(missing(&cfg(&["/bin/sleep", "1"])), None);
    }
}
