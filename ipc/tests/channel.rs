//! The channel ends and their handshake over real socketpairs: the happy
//! path, and every way a peer can get the handshake wrong, each with the
//! message an operator reads.

use serde::Serialize;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use wfhost_ipc::{
    ChildEnd, Control, DEFAULT_MAX_FRAME_BYTES, Event, Frame, Grants, HandshakeError, Hello,
    Limits, PROTOCOL_VERSION, ProtocolViolation, SupervisorEnd, TransportError, Welcome,
    encode_frame,
};

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

fn welcome(protocol: u32, max_frame_bytes: u32) -> Welcome {
    Welcome {
        protocol,
        deployment: "billing".into(),
        grants_snapshot: Grants::default(),
        limits: Limits {
            max_frame_bytes,
            max_mail_bytes: 1024,
            drain_timeout_ms: 1000,
            liveness_timeout_ms: 5000,
        },
    }
}

/// A frame of `body` with sequence number `seq`, as bytes.
fn frame<B: Serialize>(seq: u64, body: B) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(&Frame { seq, body }, DEFAULT_MAX_FRAME_BYTES, &mut out).unwrap();
    out
}

/// The supervisor's end, and the raw child side of the socket.
fn supervisor_with_raw_child() -> (SupervisorEnd, UnixStream) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    (
        SupervisorEnd::new(ours, CHANNEL, DEFAULT_MAX_FRAME_BYTES),
        theirs,
    )
}

async fn hello_after_raw(bytes: &[u8]) -> Result<Hello, HandshakeError> {
    let (mut sup, mut child) = supervisor_with_raw_child();
    child.write_all(bytes).await.unwrap();
    sup.read_hello().await
}

#[tokio::test]
async fn hello_welcome_ready_between_the_two_ends() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let mut sup = SupervisorEnd::new(ours, CHANNEL, DEFAULT_MAX_FRAME_BYTES);
    let child = tokio::spawn(async move {
        let mut welcomed = ChildEnd::new(theirs)
            .handshake(hello(PROTOCOL_VERSION, CHANNEL))
            .await
            .unwrap();
        welcomed.writer.send(Event::Ready).await.unwrap();
        welcomed
    });
    let got = sup.read_hello().await.unwrap();
    assert_eq!(got, hello(PROTOCOL_VERSION, CHANNEL));
    sup.welcome(welcome(PROTOCOL_VERSION, 1 << 16))
        .await
        .unwrap();
    sup.await_ready().await.unwrap();
    let mut welcomed = child.await.unwrap();
    assert_eq!(welcomed.welcome, welcome(PROTOCOL_VERSION, 1 << 16));
    // The halves go on carrying frames, numbered on from the handshake.
    let (mut events, mut controls) = sup.into_parts();
    controls.send(Control::Ping { nonce: 9 }).await.unwrap();
    assert_eq!(
        welcomed.reader.next().await.unwrap(),
        Some(Control::Ping { nonce: 9 })
    );
    welcomed
        .writer
        .send(Event::Pong { nonce: 9 })
        .await
        .unwrap();
    assert_eq!(events.next().await.unwrap(), Some(Event::Pong { nonce: 9 }));
}

#[tokio::test]
async fn a_hello_of_another_channel_is_refused() {
    let other = "fedcba9876543210fedcba9876543210";
    let err = hello_after_raw(&frame(1, Event::Hello(hello(PROTOCOL_VERSION, other))))
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            HandshakeError::Hello(ProtocolViolation::WrongChannel { got, .. }) if got == other
        ),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        format!("wrong channel id {other} (expected {CHANNEL})")
    );
}

/// A protocol-1 Hello (version, channel id, pid) does not decode as a
/// protocol-2 one; the supervisor end still says which version it is.
#[tokio::test]
async fn a_protocol_1_hello_is_named_not_called_undecodable() {
    #[derive(Serialize)]
    struct HelloV1 {
        protocol: u32,
        channel_id: String,
        pid: u32,
    }
    #[derive(Serialize)]
    enum EventV1 {
        Hello(HelloV1),
    }
    let v1 = frame(
        1,
        EventV1::Hello(HelloV1 {
            protocol: 1,
            channel_id: CHANNEL.into(),
            pid: 7,
        }),
    );
    let err = hello_after_raw(&v1).await.unwrap_err();
    assert!(
        matches!(err, HandshakeError::ChildProtocol { got: 1 }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("protocol 1, this supervisor speaks 2 to 3"),
        "{text}"
    );
}

#[tokio::test]
async fn a_decodable_hello_of_another_version_is_refused_by_version() {
    let err = hello_after_raw(&frame(1, Event::Hello(hello(4, CHANNEL))))
        .await
        .unwrap_err();
    assert!(
        matches!(err, HandshakeError::ChildProtocol { got: 4 }),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_hello_of_either_spoken_version_is_taken() {
    for version in [2, 3] {
        let hello = hello_after_raw(&frame(1, Event::Hello(hello(version, CHANNEL))))
            .await
            .expect("a version the supervisor speaks");
        assert_eq!(hello.protocol, version);
    }
}

#[tokio::test]
async fn an_undecodable_first_frame_that_is_no_hello_stays_undecodable() {
    // Sequence 1, variant 99: no Event has it.
    let err = hello_after_raw(&[0, 0, 0, 2, 1, 99]).await.unwrap_err();
    assert!(
        matches!(
            err,
            HandshakeError::Transport(TransportError::Violation(ProtocolViolation::Undecodable(_)))
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn the_hello_must_be_the_first_frame_with_sequence_1() {
    let err = hello_after_raw(&frame(1, Event::Ready)).await.unwrap_err();
    assert!(
        matches!(
            err,
            HandshakeError::Unexpected {
                expected: "Hello",
                got: "Ready"
            }
        ),
        "{err:?}"
    );
    let err = hello_after_raw(&frame(2, Event::Hello(hello(PROTOCOL_VERSION, CHANNEL))))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            HandshakeError::Transport(TransportError::Violation(ProtocolViolation::SeqGap {
                expected: 1,
                got: 2
            }))
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_child_that_closes_before_hello_or_ready_is_named() {
    let (mut sup, child) = supervisor_with_raw_child();
    drop(child);
    let err = sup.read_hello().await.unwrap_err();
    assert!(
        err.to_string().starts_with("channel closed before Hello ("),
        "{err}"
    );

    let (mut sup, mut child) = supervisor_with_raw_child();
    child
        .write_all(&frame(1, Event::Hello(hello(PROTOCOL_VERSION, CHANNEL))))
        .await
        .unwrap();
    sup.read_hello().await.unwrap();
    sup.welcome(welcome(PROTOCOL_VERSION, DEFAULT_MAX_FRAME_BYTES))
        .await
        .unwrap();
    drop(child);
    let err = sup.await_ready().await.unwrap_err();
    assert!(
        err.to_string().starts_with("channel closed before Ready ("),
        "{err}"
    );
}

#[tokio::test]
async fn ready_must_follow_the_welcome() {
    let (mut sup, mut child) = supervisor_with_raw_child();
    let mut bytes = frame(1, Event::Hello(hello(PROTOCOL_VERSION, CHANNEL)));
    bytes.extend(frame(2, Event::Drained));
    child.write_all(&bytes).await.unwrap();
    sup.read_hello().await.unwrap();
    let err = sup.await_ready().await.unwrap_err();
    assert!(
        matches!(
            err,
            HandshakeError::Unexpected {
                expected: "Ready",
                got: "Drained"
            }
        ),
        "{err:?}"
    );
}

/// The child's end against a supervisor written by hand: what it answers
/// Hello with decides the handshake.
async fn child_answered_with(answer: Option<Control>) -> Result<(), HandshakeError> {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let child = tokio::spawn(async move {
        ChildEnd::new(theirs)
            .handshake(hello(PROTOCOL_VERSION, CHANNEL))
            .await
            .map(|_| ())
    });
    let mut sup = SupervisorEnd::new(ours, CHANNEL, DEFAULT_MAX_FRAME_BYTES);
    sup.read_hello().await.unwrap();
    match answer {
        Some(control) => sup.writer().send(control).await.unwrap(),
        None => drop(sup),
    }
    child.await.unwrap()
}

#[tokio::test]
async fn the_child_end_refuses_a_welcome_of_another_version() {
    // The child said 3; a Welcome of 2 (or of 4) is not its version.
    for other in [2, 4] {
        let err = child_answered_with(Some(Control::Welcome(welcome(other, 1 << 16))))
            .await
            .unwrap_err();
        assert!(
            matches!(err, HandshakeError::SupervisorProtocol { got, asked: 3 } if got == other),
            "{err:?}"
        );
        assert!(
            err.to_string().contains(&format!("protocol {other}")),
            "{err}"
        );
    }
}

#[tokio::test]
async fn the_child_end_refuses_anything_but_a_welcome() {
    let err = child_answered_with(Some(Control::Ping { nonce: 1 }))
        .await
        .unwrap_err();
    assert_eq!(err.to_string(), "unexpected Ping while waiting for Welcome");
    let err = child_answered_with(None).await.unwrap_err();
    assert!(
        err.to_string()
            .starts_with("channel closed before Welcome ("),
        "{err}"
    );
}

#[tokio::test]
async fn after_the_welcome_the_child_holds_both_directions_to_its_limit() {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let child = tokio::spawn(async move {
        ChildEnd::new(theirs)
            .handshake(hello(PROTOCOL_VERSION, CHANNEL))
            .await
            .unwrap()
    });
    let std_ours = ours.into_std().unwrap();
    let mut raw = UnixStream::from_std(std_ours.try_clone().unwrap()).unwrap();
    let mut sup = SupervisorEnd::new(
        UnixStream::from_std(std_ours).unwrap(),
        CHANNEL,
        DEFAULT_MAX_FRAME_BYTES,
    );
    sup.read_hello().await.unwrap();
    sup.welcome(welcome(PROTOCOL_VERSION, 1 << 16))
        .await
        .unwrap();
    let mut welcomed = child.await.unwrap();

    let big = Event::Custom {
        kind: "big".into(),
        bytes: vec![0; 1 << 16],
    };
    let err = welcomed.writer.send(big).await.unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Violation(ProtocolViolation::FrameTooLarge { max: 65536, .. })
        ),
        "{err:?}"
    );

    // A header announcing one byte more than the limit, and no body.
    raw.write_all(&(65_537u32).to_be_bytes()).await.unwrap();
    let err = welcomed.reader.next().await.unwrap_err();
    assert!(
        matches!(
            err,
            TransportError::Violation(ProtocolViolation::FrameTooLarge {
                len: 65_537,
                max: 65_536
            })
        ),
        "{err:?}"
    );
}
