//! The supervisor's ed25519 signing key on disk (DESIGN §7, §9): a PKCS#8
//! PEM file that only its owner may read or write. It signs cancel requests
//! and journal records; children get only the public key.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use ed25519_dalek::SigningKey;
use thiserror::Error;
use wfhost_ipc::KeyId;
use wfhost_ipc::key::{self, KeyError};

use crate::config::SupervisorSettings;

/// The key file's name inside `state_dir` when the config names none.
pub const DEFAULT_KEY_FILE: &str = "supervisor.key";

/// A PEM ed25519 key is about 120 bytes; anything much bigger is not one.
const MAX_KEY_FILE_BYTES: u64 = 16 << 10;

/// Why a key file could not be read or written; each names the file and
/// the fix.
#[derive(Debug, Error)]
pub enum KeyFileError {
    /// The key file does not exist.
    #[error(
        "signing key {} does not exist\n  help: create one with `wfhost keygen --out {}`",
        path.display(), path.display()
    )]
    NotFound {
        /// The key file.
        path: PathBuf,
    },
    /// Group or others may read or write the key.
    #[error(
        "signing key {} is accessible to group or others (mode {mode:04o}), so it may have leaked or been replaced\n  help: chmod 600 {}",
        path.display(), path.display()
    )]
    Insecure {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The path is not a regular file, or is far too big for a key.
    #[error("{} is not a key file ({what})\n  help: point at a key written by `wfhost keygen`", path.display())]
    NotAKeyFile {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        what: &'static str,
    },
    /// The file could not be read.
    #[error("cannot read signing key {}: {source}\n  help: check that this user may read it", path.display())]
    Read {
        /// The key file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The contents are not a PKCS#8 PEM ed25519 private key.
    #[error("{}: {source}\n  help: point at a key written by `wfhost keygen`", path.display())]
    Parse {
        /// The key file.
        path: PathBuf,
        /// What the decoder said.
        source: KeyError,
    },
    /// A file already exists where a new key should go.
    #[error(
        "refusing to overwrite {}: a file is already there\n  help: choose another path, or move the old key aside first (records it signed verify only with it)",
        path.display()
    )]
    Exists {
        /// The existing file.
        path: PathBuf,
    },
    /// The new key could not be written.
    #[error("cannot write signing key {}: {source}\n  help: check that the directory exists, is writable by this user, and has free space", path.display())]
    Write {
        /// The key file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The directory for the default key could not be created.
    #[error("cannot create state directory {}: {source}\n  help: create it, or make its parent writable by this user", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// No key could be generated.
    #[error("cannot generate a signing key: {0}")]
    Generate(KeyError),
}

/// Reads the key at `path`, refusing a file that group or others may
/// read or write.
pub fn load(path: &Path) -> Result<SigningKey, KeyFileError> {
    let read_err = |source| KeyFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(KeyFileError::NotFound {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(read_err(e)),
    };
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(KeyFileError::NotAKeyFile {
            path: path.to_path_buf(),
            what: "not a regular file",
        });
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Insecure {
            path: path.to_path_buf(),
            mode,
        });
    }
    let mut pem = String::new();
    file.take(MAX_KEY_FILE_BYTES + 1)
        .read_to_string(&mut pem)
        .map_err(read_err)?;
    if pem.len() as u64 > MAX_KEY_FILE_BYTES {
        return Err(KeyFileError::NotAKeyFile {
            path: path.to_path_buf(),
            what: "far too large",
        });
    }
    key::from_pem(&pem).map_err(|source| KeyFileError::Parse {
        path: path.to_path_buf(),
        source,
    })
}

/// Generates a key and writes it to `path` (mode 0600, flushed to disk);
/// never overwrites an existing file.
pub fn write_new(path: &Path) -> Result<SigningKey, KeyFileError> {
    let key = key::generate().map_err(KeyFileError::Generate)?;
    write(path, &key)?;
    Ok(key)
}

/// Writes `key` to a file that must not exist yet, durably (the file and
/// its directory entry), readable by its owner only.
pub fn write(path: &Path, key: &SigningKey) -> Result<(), KeyFileError> {
    let pem = key::to_pem(key).map_err(KeyFileError::Generate)?;
    let write_err = |source| KeyFileError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            return Err(KeyFileError::Exists {
                path: path.to_path_buf(),
            });
        }
        Err(e) => return Err(write_err(e)),
    };
    if let Err(e) = file
        .write_all(pem.as_bytes())
        .and_then(|()| file.sync_all())
    {
        // A half-written key must not be found and loaded later.
        let _ = std::fs::remove_file(path);
        return Err(write_err(e));
    }
    // Make the new directory entry durable too.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(dir) = File::open(dir)
    {
        let _ = dir.sync_all();
    }
    Ok(())
}

/// The supervisor's key and where it lives: the configured `signing_key`
/// (which must exist), else `state_dir/supervisor.key`, created on first
/// start.
pub fn load_or_create(
    settings: &SupervisorSettings,
) -> Result<(SigningKey, PathBuf), KeyFileError> {
    if let Some(path) = &settings.signing_key {
        return load(path).map(|key| (key, path.clone()));
    }
    let path = settings.state_dir.join(DEFAULT_KEY_FILE);
    match load(&path) {
        Err(KeyFileError::NotFound { .. }) => {}
        other => return other.map(|key| (key, path)),
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&settings.state_dir)
        .map_err(|source| KeyFileError::CreateDir {
            dir: settings.state_dir.clone(),
            source,
        })?;
    match write_new(&path) {
        Ok(key) => {
            let public = key.verifying_key();
            tracing::info!(
                path = %path.display(),
                public_key = %key::public_hex(&public),
                key_id = %KeyId::of(&public),
                "created a new signing key"
            );
            Ok((key, path))
        }
        // Another process created it first: use theirs.
        Err(KeyFileError::Exists { .. }) => load(&path).map(|key| (key, path)),
        Err(e) => Err(e),
    }
}

/// The key a start-up found: on disk already, or new and not written
/// yet ([`find_or_generate`]).
pub enum Found {
    /// Loaded from this file.
    Loaded(SigningKey, PathBuf),
    /// Generated for this file, which must be written ([`write`]) before
    /// anything it signs is stored or sent.
    New(SigningKey, PathBuf),
}

impl Found {
    /// The key.
    pub fn key(&self) -> &SigningKey {
        match self {
            Self::Loaded(key, _) | Self::New(key, _) => key,
        }
    }

    /// Where it lives (or will).
    pub fn path(&self) -> &Path {
        match self {
            Self::Loaded(_, path) | Self::New(_, path) => path,
        }
    }

    /// Writes a new key (a loaded one is already there), and says so.
    pub fn persist(&self) -> Result<(), KeyFileError> {
        let Self::New(key, path) = self else {
            return Ok(());
        };
        write(path, key)?;
        let public = key.verifying_key();
        tracing::info!(
            path = %path.display(),
            public_key = %key::public_hex(&public),
            key_id = %KeyId::of(&public),
            "created a new signing key"
        );
        Ok(())
    }
}

/// As [`load_or_create`], but a key that does not exist yet is only
/// generated: the caller writes it with [`Found::persist`] off the path
/// to the first spawn (children need only its public half), before the
/// store takes anything it signs.
pub fn find_or_generate(settings: &SupervisorSettings) -> Result<Found, KeyFileError> {
    if let Some(path) = &settings.signing_key {
        return load(path).map(|key| Found::Loaded(key, path.clone()));
    }
    let path = settings.state_dir.join(DEFAULT_KEY_FILE);
    match load(&path) {
        Err(KeyFileError::NotFound { .. }) => {}
        other => return other.map(|key| Found::Loaded(key, path)),
    }
    let key = key::generate().map_err(KeyFileError::Generate)?;
    Ok(Found::New(key, path))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::*;

    fn settings(state_dir: &Path, signing_key: Option<PathBuf>) -> SupervisorSettings {
        SupervisorSettings {
            state_dir: state_dir.to_path_buf(),
            signing_key,
            policy_interval: Duration::from_secs(60),
            admin_group: None,
            metrics_listen: None,
            event_retention: 100,
            mail_retention: Duration::from_secs(60),
            cgroup_root: Default::default(),
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_written_key_is_private_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        let key = write_new(&path).unwrap();
        assert_eq!(mode(&path), 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("-----BEGIN PRIVATE KEY-----"), "{text}");
        assert_eq!(load(&path).unwrap().to_bytes(), key.to_bytes());
    }

    #[test]
    fn write_new_never_overwrites() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        std::fs::write(&path, "precious").unwrap();
        let err = write_new(&path).unwrap_err();
        assert!(matches!(err, KeyFileError::Exists { .. }), "{err}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "precious");
    }

    #[test]
    fn a_key_others_can_access_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        write_new(&path).unwrap();
        for bad in [0o640, 0o604, 0o620, 0o602] {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(bad)).unwrap();
            let err = load(&path).unwrap_err();
            assert!(
                matches!(err, KeyFileError::Insecure { .. }),
                "{bad:o}: {err}"
            );
            assert!(
                err.to_string()
                    .contains(&format!("chmod 600 {}", path.display())),
                "{err}"
            );
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        load(&path).unwrap();
    }

    #[test]
    fn missing_and_malformed_keys_say_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.pem");
        let err = load(&path).unwrap_err().to_string();
        assert!(
            err.contains(&format!("wfhost keygen --out {}", path.display())),
            "{err}"
        );
        std::fs::write(&path, "not a key").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let err = load(&path).unwrap_err();
        assert!(matches!(err, KeyFileError::Parse { .. }), "{err}");
        let err = load(dir.path()).unwrap_err();
        assert!(matches!(err, KeyFileError::NotAKeyFile { .. }), "{err}");
    }

    #[test]
    fn the_default_key_is_created_once_in_the_state_dir() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let (first, path) = load_or_create(&settings(&state, None)).unwrap();
        assert_eq!(path, state.join(DEFAULT_KEY_FILE));
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&state), 0o700);
        let (second, _) = load_or_create(&settings(&state, None)).unwrap();
        assert_eq!(first.to_bytes(), second.to_bytes());
    }

    #[test]
    fn a_configured_key_must_already_exist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("configured.key");
        let err = load_or_create(&settings(dir.path(), Some(path.clone()))).unwrap_err();
        assert!(matches!(err, KeyFileError::NotFound { .. }), "{err}");
        assert!(!path.exists());
        assert!(!dir.path().join(DEFAULT_KEY_FILE).exists());
        let key = write_new(&path).unwrap();
        let (loaded, used) = load_or_create(&settings(dir.path(), Some(path.clone()))).unwrap();
        assert_eq!((loaded.to_bytes(), used), (key.to_bytes(), path));
    }

    #[test]
    fn an_insecure_default_key_is_refused_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DEFAULT_KEY_FILE);
        write_new(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = load_or_create(&settings(dir.path(), None)).unwrap_err();
        assert!(matches!(err, KeyFileError::Insecure { .. }), "{err}");
    }

    #[test]
    fn a_generated_key_is_on_disk_only_once_persisted_and_then_found() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), None);
        let found = find_or_generate(&s).unwrap();
        assert!(matches!(found, Found::New(..)));
        assert!(!found.path().exists(), "nothing written before persist");
        found.persist().unwrap();
        assert_eq!(mode(found.path()), 0o600);
        let again = find_or_generate(&s).unwrap();
        assert!(matches!(again, Found::Loaded(..)));
        assert_eq!(again.key().to_bytes(), found.key().to_bytes());
        again.persist().unwrap();
        assert!(
            matches!(
                Found::New(found.key().clone(), found.path().to_path_buf()).persist(),
                Err(KeyFileError::Exists { .. })
            ),
            "a key already there is never overwritten"
        );
    }
}
