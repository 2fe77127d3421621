//! The handshake check: a Hello from a stale or foreign child, or one that
//! speaks another protocol version, ends the wiring.

use wfhost_ipc::handshake::{
    CONTROL_FD, ENV_CHANNEL_ID, ENV_CONTROL_FD, ENV_DEPLOYMENT, ENV_PROTOCOL, ENV_PROTOCOL_MAX,
    ENV_SUPERVISOR_KEY,
};
use wfhost_ipc::{Hello, OLDEST_PROTOCOL, PROTOCOL_VERSION, ProtocolViolation, new_channel_id};

const CHANNEL: &str = "0123456789abcdef0123456789abcdef";

fn hello(protocol: u32, channel_id: &str) -> Hello {
    Hello {
        protocol,
        channel_id: channel_id.into(),
        pid: 4242,
        takes_mail: true,
        implementation: "test/1".into(),
    }
}

#[test]
fn matching_hello_passes() {
    assert_eq!(hello(PROTOCOL_VERSION, CHANNEL).check(CHANNEL), Ok(()));
}

#[test]
fn an_overlong_implementation_name_is_refused() {
    let mut h = hello(PROTOCOL_VERSION, CHANNEL);
    h.implementation = "x".repeat(wfhost_ipc::handshake::MAX_IMPLEMENTATION_BYTES);
    assert_eq!(h.check(CHANNEL), Ok(()));
    h.implementation.push('x');
    assert!(matches!(
        h.check(CHANNEL),
        Err(ProtocolViolation::Unexpected { .. })
    ));
}

#[test]
fn wrong_channel_is_refused() {
    // A child of an earlier spawn, an empty id, and a case change.
    let earlier = "fedcba9876543210fedcba9876543210";
    for got in [earlier, "", &CHANNEL.to_uppercase()] {
        assert_eq!(
            hello(PROTOCOL_VERSION, got).check(CHANNEL),
            Err(ProtocolViolation::WrongChannel {
                expected: CHANNEL.into(),
                got: got.into(),
            })
        );
    }
}

#[test]
fn unsupported_protocol_is_refused() {
    for got in [0, 1, PROTOCOL_VERSION + 1, u32::MAX] {
        assert_eq!(
            hello(got, CHANNEL).check(CHANNEL),
            Err(ProtocolViolation::UnsupportedProtocol {
                got,
                supported: PROTOCOL_VERSION,
            })
        );
    }
}

/// The version is checked first: under another version the channel field
/// may not mean what this side thinks.
#[test]
fn protocol_is_checked_before_channel() {
    assert!(matches!(
        hello(1, "stale").check(CHANNEL),
        Err(ProtocolViolation::UnsupportedProtocol { got: 1, .. })
    ));
}

#[test]
fn channel_ids_are_fresh_32_hex_chars() {
    let a = new_channel_id().unwrap();
    let b = new_channel_id().unwrap();
    assert_eq!(a.len(), 32);
    assert!(
        a.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
    );
    assert_ne!(a, b);
    assert_eq!(hello(PROTOCOL_VERSION, &a).check(&a), Ok(()));
}

/// The environment contract of DESIGN.md §2, which children of other
/// languages read by name.
#[test]
fn environment_names_match_the_design() {
    assert_eq!(CONTROL_FD, 3);
    assert_eq!(PROTOCOL_VERSION, 3);
    assert_eq!(OLDEST_PROTOCOL, 2);
    assert_eq!(ENV_PROTOCOL_MAX, "WFHOST_PROTOCOL_MAX");
    assert_eq!(ENV_CONTROL_FD, "WFHOST_CONTROL_FD");
    assert_eq!(ENV_CHANNEL_ID, "WFHOST_CHANNEL_ID");
    assert_eq!(ENV_PROTOCOL, "WFHOST_PROTOCOL");
    assert_eq!(ENV_DEPLOYMENT, "WFHOST_DEPLOYMENT");
    assert_eq!(ENV_SUPERVISOR_KEY, "WFHOST_SUPERVISOR_KEY");
}
