//! The credential grants handed to each child: read fresh from the
//! deployment's `grants_file` at every spawn, so a recycle picks up rotated
//! credentials, and timed from that read for the `max_grants_age` bound.
//! The file is read off the runtime thread under a timeout (a stuck
//! filesystem delays this deployment's spawn, never the supervisor), must
//! be a regular file, and must fit the `Welcome` frame that carries it.

use std::path::Path;
use std::time::Instant;

use sha2::{Digest, Sha256};
use wfhost_ipc::frame::{Frame, HEADER_BYTES, encode_frame};
use wfhost_ipc::{Control, Grants, Limits, PROTOCOL_VERSION, Welcome};

use crate::config::DeploymentConfig;
use crate::config::file::{self, ReadError};
use crate::shared::unix_ms;

/// Grants as read, and when: the bound `max_grants_age` counts from then.
pub type Fresh = (Grants, Instant);

/// Largest grants file accepted, whatever the frame limit.
pub const MAX_GRANTS_BYTES: u64 = 1 << 20;

/// Bytes a grants body's length prefix may need beyond the one byte of
/// an empty body's (a varint of a length below 2^32 takes at most 5).
const LENGTH_PREFIX_GROWTH: u64 = 4;

/// The largest grants file a `Welcome` to deployment `id` can carry in
/// frames of `max_frame_bytes`: the frame less everything else in the
/// Welcome, measured by encoding one with the widest value of every field
/// (so the bound holds for any sequence number, time or limit).
pub fn room(id: &str, max_frame_bytes: u32) -> u64 {
    let widest = Frame {
        seq: u64::MAX,
        body: Control::Welcome(Welcome {
            protocol: PROTOCOL_VERSION,
            deployment: id.to_owned(),
            grants_snapshot: Grants {
                read_at_ms: u64::MAX,
                digest: [0xff; 32],
                body: Vec::new(),
            },
            limits: Limits {
                max_frame_bytes: u32::MAX,
                max_mail_bytes: u32::MAX,
                drain_timeout_ms: u64::MAX,
                liveness_timeout_ms: u64::MAX,
            },
        }),
    };
    let mut out = Vec::new();
    // Encoding a small message cannot fail; should it, leave no room.
    let around = match encode_frame(&widest, u32::MAX, &mut out) {
        Ok(()) => (out.len() - HEADER_BYTES) as u64 + LENGTH_PREFIX_GROWTH,
        Err(_) => u64::from(max_frame_bytes),
    };
    u64::from(max_frame_bytes)
        .saturating_sub(around)
        .min(MAX_GRANTS_BYTES)
}

/// What to do about a grants file too large for the frame limit.
pub fn too_large_hint(max_frame_bytes: u32, room: u64) -> String {
    format!(
        "its Welcome frame must fit max_frame_bytes ({max_frame_bytes} bytes), which leaves {room} bytes \
         for grants (and never more than {MAX_GRANTS_BYTES}); shrink the file, or raise max_frame_bytes"
    )
}

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

    #[test]
    fn the_room_is_what_a_welcome_can_carry() {
        let id = "a".repeat(64);
        for frame in [8u32 << 10, 1 << 20, 2 << 20] {
            let room = room(&id, frame);
            let welcome = |n: u64| {
                let w = Welcome {
                    protocol: PROTOCOL_VERSION,
                    deployment: id.clone(),
                    grants_snapshot: Grants {
                        read_at_ms: u64::MAX,
                        digest: [0xff; 32],
                        body: vec![b' '; n as usize],
                    },
                    limits: Limits {
                        max_frame_bytes: u32::MAX,
                        max_mail_bytes: u32::MAX,
                        drain_timeout_ms: u64::MAX,
                        liveness_timeout_ms: u64::MAX,
                    },
                };
                encode_frame(
                    &Frame {
                        seq: u64::MAX,
                        body: Control::Welcome(w),
                    },
                    frame,
                    &mut Vec::new(),
                )
            };
            assert!(welcome(room).is_ok(), "{room} bytes of grants fit {frame}");
            if room < MAX_GRANTS_BYTES {
                assert!(
                    welcome(room + LENGTH_PREFIX_GROWTH + 1).is_err(),
                    "little more would not fit {frame}"
                );
            }
        }
        assert_eq!(room("a", 64 << 20), MAX_GRANTS_BYTES);
        assert_eq!(room("a", 16), 0);
    }
}
