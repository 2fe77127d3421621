//! proptest strategies shared by the integration tests: every message type,
//! every variant, every field.
// Each test binary uses a different subset of these helpers.
#![allow(dead_code)]

use ed25519_dalek::SigningKey;
use proptest::prelude::*;
use wfhost_ipc::{
    CancelOrigin, CancelRequested, CancelVerdict, Control, DrainBehavior, Event, Grants, Hello,
    KeyId, Limits, MailCancelRequested, Outcome, SignedCancel, SignedMailCancel, Welcome,
};

/// A fixed signing key, so signed cases are reproducible.
pub fn supervisor_key() -> SigningKey {
    SigningKey::from_bytes(&[7; 32])
}

/// Another fixed key, never trusted.
pub fn other_key() -> SigningKey {
    SigningKey::from_bytes(&[9; 32])
}

/// Strings: empty, plain identifiers, and arbitrary printable Unicode
/// (multi-byte UTF-8 exercises length prefixes counted in bytes).
pub fn text() -> impl Strategy<Value = String> {
    prop_oneof![Just(String::new()), "[a-z0-9_.-]{1,16}", "\\PC{0,24}",]
}

/// Byte payloads, sometimes empty, sometimes past the one-byte varint range.
pub fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![Just(Vec::new()), prop::collection::vec(any::<u8>(), 0..300),]
}

pub fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Succeeded),
        text().prop_map(Outcome::Failed),
        Just(Outcome::Cancelled),
    ]
}

pub fn drain_behavior() -> impl Strategy<Value = DrainBehavior> {
    prop_oneof![Just(DrainBehavior::Cancel), Just(DrainBehavior::Wait)]
}

pub fn hello() -> impl Strategy<Value = Hello> {
    (any::<u32>(), text(), any::<u32>(), any::<bool>(), text()).prop_map(
        |(protocol, channel_id, pid, takes_mail, implementation)| Hello {
            protocol,
            channel_id,
            pid,
            takes_mail,
            implementation,
        },
    )
}

pub fn grants() -> impl Strategy<Value = Grants> {
    (any::<u64>(), any::<[u8; 32]>(), payload()).prop_map(|(read_at_ms, digest, body)| Grants {
        read_at_ms,
        digest,
        body,
    })
}

pub fn limits() -> impl Strategy<Value = Limits> {
    (any::<u32>(), any::<u32>(), any::<u64>(), any::<u64>()).prop_map(
        |(max_frame_bytes, max_mail_bytes, drain_timeout_ms, liveness_timeout_ms)| Limits {
            max_frame_bytes,
            max_mail_bytes,
            drain_timeout_ms,
            liveness_timeout_ms,
        },
    )
}

pub fn welcome() -> impl Strategy<Value = Welcome> {
    (any::<u32>(), text(), grants(), limits()).prop_map(
        |(protocol, deployment, grants_snapshot, limits)| Welcome {
            protocol,
            deployment,
            grants_snapshot,
            limits,
        },
    )
}

pub fn cancel_origin() -> impl Strategy<Value = CancelOrigin> {
    prop_oneof![
        Just(CancelOrigin::SupervisorDrain),
        Just(CancelOrigin::Operator),
        Just(CancelOrigin::Deadline)
    ]
}

pub fn cancel_requested() -> impl Strategy<Value = CancelRequested> {
    (
        cancel_origin(),
        text(),
        prop::option::of(text()),
        text(),
        any::<u64>(),
    )
        .prop_map(|(origin, deployment, run, reason, at_ms)| CancelRequested {
            origin,
            deployment,
            run,
            reason,
            at_ms,
        })
}

/// Either properly signed, or with arbitrary key id and signature bytes of
/// any length (the wire must carry what a verifier later refuses).
pub fn signed_cancel() -> impl Strategy<Value = SignedCancel> {
    prop_oneof![
        cancel_requested().prop_map(|r| SignedCancel::sign(r, &supervisor_key())),
        (
            cancel_requested(),
            any::<[u8; 8]>(),
            prop::collection::vec(any::<u8>(), 0..100)
        )
            .prop_map(|(record, id, signature)| SignedCancel {
                record,
                key_id: KeyId(id),
                signature,
            }),
    ]
}

pub fn signed_mail_cancel() -> impl Strategy<Value = SignedMailCancel> {
    (cancel_origin(), text(), any::<u64>(), text(), any::<u64>()).prop_map(
        |(origin, deployment, id, reason, at_ms)| {
            let record = MailCancelRequested {
                origin,
                deployment,
                id,
                reason,
                at_ms,
            };
            SignedMailCancel::sign(record, &supervisor_key())
        },
    )
}

pub fn cancel_verdict() -> impl Strategy<Value = CancelVerdict> {
    prop_oneof![
        Just(CancelVerdict::Acknowledged),
        Just(CancelVerdict::NotSupported),
        text().prop_map(CancelVerdict::Refused),
    ]
}

pub fn control() -> impl Strategy<Value = Control> {
    prop_oneof![
        welcome().prop_map(Control::Welcome),
        any::<u64>().prop_map(|budget_ms| Control::Drain { budget_ms }),
        signed_cancel().prop_map(Control::Cancel),
        (any::<u64>(), any::<u32>(), payload()).prop_map(|(id, attempt, payload)| {
            Control::Mail {
                id,
                attempt,
                payload,
            }
        }),
        any::<u64>().prop_map(|nonce| Control::Ping { nonce }),
        Just(Control::Shutdown),
        any::<u64>().prop_map(|valid_ms| Control::Lease { valid_ms }),
        signed_mail_cancel().prop_map(Control::CancelMail),
        (any::<u64>(), text(), payload()).prop_map(|(id, key, value)| Control::Answer {
            id,
            key,
            value
        }),
    ]
}

pub fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        hello().prop_map(Event::Hello),
        Just(Event::Ready),
        (text(), text(), drain_behavior()).prop_map(|(run, step, drain)| Event::StepStarted {
            run,
            step,
            drain
        }),
        (text(), text(), outcome()).prop_map(|(run, step, outcome)| Event::StepFinished {
            run,
            step,
            outcome
        }),
        (any::<u64>(), outcome()).prop_map(|(id, outcome)| Event::MailAck { id, outcome }),
        any::<u64>().prop_map(|nonce| Event::Pong { nonce }),
        (text(), outcome()).prop_map(|(run, outcome)| Event::RunTerminal { run, outcome }),
        Just(Event::Drained),
        text().prop_map(|reason| Event::RecycleRequest { reason }),
        (text(), payload()).prop_map(|(kind, bytes)| Event::Custom { kind, bytes }),
        (any::<u64>(), any::<bool>())
            .prop_map(|(id, cancellable)| Event::MailStarted { id, cancellable }),
        (any::<u64>(), outcome(), payload()).prop_map(|(id, outcome, result)| Event::MailDone {
            id,
            outcome,
            result
        }),
        (any::<u64>(), cancel_verdict())
            .prop_map(|(id, verdict)| Event::MailCancelVerdict { id, verdict }),
        (any::<u64>(), text(), payload()).prop_map(|(id, key, prompt)| Event::Ask {
            id,
            key,
            prompt
        }),
        (any::<u64>(), payload()).prop_map(|(id, data)| Event::Progress { id, data }),
        (any::<u64>(), any::<bool>()).prop_map(|(id, awaiting_answer)| Event::GiveBack {
            id,
            awaiting_answer
        }),
    ]
}

/// Every `Control` variant by name. The match has no wildcard, so a new
/// variant fails to compile here until the strategies above cover it.
pub fn control_variant(c: &Control) -> &'static str {
    match c {
        Control::Welcome(_)
        | Control::Drain { .. }
        | Control::Cancel(_)
        | Control::Mail { .. }
        | Control::Ping { .. }
        | Control::Shutdown
        | Control::Lease { .. }
        | Control::CancelMail(_)
        | Control::Answer { .. } => c.name(),
    }
}

pub const CONTROL_VARIANTS: [&str; 9] = [
    "Welcome",
    "Drain",
    "Cancel",
    "Mail",
    "Ping",
    "Shutdown",
    "Lease",
    "CancelMail",
    "Answer",
];

/// Every `Event` variant by name; no wildcard, as for [`control_variant`].
pub fn event_variant(e: &Event) -> &'static str {
    match e {
        Event::Hello(_)
        | Event::Ready
        | Event::StepStarted { .. }
        | Event::StepFinished { .. }
        | Event::MailAck { .. }
        | Event::Pong { .. }
        | Event::RunTerminal { .. }
        | Event::Drained
        | Event::RecycleRequest { .. }
        | Event::Custom { .. }
        | Event::MailStarted { .. }
        | Event::MailDone { .. }
        | Event::MailCancelVerdict { .. }
        | Event::Ask { .. }
        | Event::Progress { .. }
        | Event::GiveBack { .. } => e.name(),
    }
}

pub const EVENT_VARIANTS: [&str; 16] = [
    "Hello",
    "Ready",
    "StepStarted",
    "StepFinished",
    "MailAck",
    "Pong",
    "RunTerminal",
    "Drained",
    "RecycleRequest",
    "Custom",
    "MailStarted",
    "MailDone",
    "MailCancelVerdict",
    "Ask",
    "Progress",
    "GiveBack",
];
