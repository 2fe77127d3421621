//! The credential grants handed to each child: read fresh from the
//! deployment's `grants_file` at every spawn, so a recycle picks up rotated
//! credentials, and timed from that read for the `max_grants_age` bound.
//! The file is read off the runtime thread under a timeout (a stuck
//! filesystem delays this deployment's spawn, never the supervisor), must
//! be a regular file, and must fit the `Welcome` frame that carries it.

use std::path::Path;
use std::time::Instant;

use sha2::{Digest, Sha256};
use wfhost_ipc::Grants;

use crate::clock::unix_ms;
use crate::config::DeploymentConfig;
use crate::config::file::{self, ReadError};
use crate::config::grants::{room, too_large_hint};

/// Grants as read, and when: the bound `max_grants_age` counts from then.
pub type Fresh = (Grants, Instant);

/// Reads and checks deployment `cfg`'s grants file at `path`: a regular
/// file, valid JSON, small enough for the Welcome ([`room`]), read within
/// [`file::READ_TIMEOUT`]. The error names the file and what to fix.
pub async fn read(cfg: &DeploymentConfig, path: &Path) -> Result<Fresh, String> {
    let room = room(&cfg.id, cfg.max_frame_bytes);
    let max_frame_bytes = cfg.max_frame_bytes;
    let owned = path.to_path_buf();
    let what = format!("grants_file {}", path.display());
    file::off_thread(&what, file::READ_TIMEOUT, move || {
        read_now(&owned, room, max_frame_bytes)
    })
    .await?
}

/// [`read`], blocking.
fn read_now(path: &Path, room: u64, max_frame_bytes: u32) -> Result<Fresh, String> {
    let body = file::read_regular(path, room).map_err(|e| match e {
        ReadError::Io(e) => format!(
            "cannot read grants_file {}: {e}; fix the path or its permissions",
            path.display()
        ),
        ReadError::NotRegular(what) => format!(
            "grants_file {} is {what}, not a regular file; point grants_file at a JSON file",
            path.display()
        ),
        ReadError::TooLarge => format!(
            "grants_file {} is larger than {room} bytes: {}",
            path.display(),
            too_large_hint(max_frame_bytes, room)
        ),
    })?;
    if let Err(e) = serde_json::from_slice::<serde_json::Value>(&body) {
        return Err(format!(
            "grants_file {} is not valid JSON: {e}",
            path.display()
        ));
    }
    let digest: [u8; 32] = Sha256::digest(&body).into();
    Ok((
        Grants {
            read_at_ms: unix_ms(),
            digest,
            body,
        },
        Instant::now(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::grants::MAX_GRANTS_BYTES;

    #[test]
    fn reads_json_and_refuses_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("good.json");
        std::fs::write(&good, br#"{"token":"abc"}"#).expect("write");
        let (grants, _) = read_now(&good, MAX_GRANTS_BYTES, 1 << 20).expect("good grants");
        assert_eq!(grants.body, br#"{"token":"abc"}"#);
        assert_eq!(
            grants.digest,
            <[u8; 32]>::from(Sha256::digest(&grants.body))
        );

        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, b"{not json").expect("write");
        let e = read_now(&bad, MAX_GRANTS_BYTES, 1 << 20).expect_err("bad JSON");
        assert!(
            e.contains("not valid JSON") && e.contains("bad.json"),
            "{e}"
        );

        let e = read_now(&dir.path().join("missing.json"), MAX_GRANTS_BYTES, 1 << 20)
            .expect_err("missing");
        assert!(e.contains("missing.json"), "{e}");

        let e = read_now(dir.path(), MAX_GRANTS_BYTES, 1 << 20).expect_err("a directory");
        assert!(e.contains("is a directory, not a regular file"), "{e}");
    }
}
