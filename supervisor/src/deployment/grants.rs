//! The credential grants handed to each child: read fresh from the
//! deployment's `grants_file` at every spawn, so a recycle picks up rotated
//! credentials, and timed from that read for the `max_grants_age` bound.

use std::io::Read;
use std::path::Path;
use std::time::Instant;

use sha2::{Digest, Sha256};
use wfhost_ipc::Grants;

use crate::shared::unix_ms;

/// Grants as read, and when: the bound `max_grants_age` counts from then.
pub type Fresh = (Grants, Instant);

/// Largest grants file accepted.
pub const MAX_GRANTS_BYTES: u64 = 1 << 20;

/// Reads and checks a grants file: it must be JSON and at most
/// [`MAX_GRANTS_BYTES`]. The error names the file and what to fix.
pub fn read(path: &Path) -> Result<Fresh, String> {
    let file = std::fs::File::open(path).map_err(|e| {
        format!(
            "cannot read grants_file {}: {e}; fix the path or its permissions",
            path.display()
        )
    })?;
    let mut body = Vec::new();
    file.take(MAX_GRANTS_BYTES + 1)
        .read_to_end(&mut body)
        .map_err(|e| format!("cannot read grants_file {}: {e}", path.display()))?;
    if body.len() as u64 > MAX_GRANTS_BYTES {
        return Err(format!(
            "grants_file {} is larger than {MAX_GRANTS_BYTES} bytes",
            path.display()
        ));
    }
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

    #[test]
    fn reads_json_and_refuses_the_rest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let good = dir.path().join("good.json");
        std::fs::write(&good, br#"{"token":"abc"}"#).expect("write");
        let (grants, _) = read(&good).expect("good grants");
        assert_eq!(grants.body, br#"{"token":"abc"}"#);
        assert_eq!(
            grants.digest,
            <[u8; 32]>::from(Sha256::digest(&grants.body))
        );

        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, b"{not json").expect("write");
        let e = read(&bad).expect_err("bad JSON");
        assert!(
            e.contains("not valid JSON") && e.contains("bad.json"),
            "{e}"
        );

        let e = read(&dir.path().join("missing.json")).expect_err("missing");
        assert!(e.contains("missing.json"), "{e}");
    }
}
