//! How large a deployment's grants file may be: its bytes travel in the
//! `Welcome` frame, so the frame limit bounds them. Checked when a config
//! loads and again whenever the file is read.

use wfhost_ipc::frame::{Frame, HEADER_BYTES, encode_frame};
use wfhost_ipc::{Control, Grants, Limits, PROTOCOL_VERSION, Welcome};

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

#[cfg(test)]
mod tests {
    use super::*;

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
