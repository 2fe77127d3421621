//! Signed cancels and keys: a child must refuse any cancel that is not
//! exactly what the trusted supervisor key signed, for this deployment.

mod common;

use common::{cancel_requested, other_key, supervisor_key};
use ed25519_dalek::SigningKey;
use proptest::prelude::*;
use sha2::{Digest, Sha256};
use wfhost_ipc::key::{self, KeyError};
use wfhost_ipc::signed::signing_bytes;
use wfhost_ipc::{
    CancelOrigin, CancelRefused, CancelRequested, Control, DEFAULT_MAX_FRAME_BYTES, Frame,
    FrameDecoder, KeyId, SignatureError, SignedCancel, encode_frame,
};

const DEPLOYMENT: &str = "billing";

fn record() -> CancelRequested {
    CancelRequested {
        origin: CancelOrigin::SupervisorDrain,
        deployment: DEPLOYMENT.into(),
        run: Some("run-42".into()),
        reason: "drain budget of 90s spent".into(),
        at_ms: 1_700_000_000_000,
    }
}

fn signed() -> SignedCancel {
    SignedCancel::sign(record(), &supervisor_key())
}

/// Verifies as a child of `DEPLOYMENT` that runs only `run-42`.
fn verify(cancel: &SignedCancel) -> Result<(), CancelRefused> {
    cancel.verify_for(&supervisor_key().verifying_key(), DEPLOYMENT, |r| {
        r == "run-42"
    })
}

fn invalid() -> Result<(), CancelRefused> {
    Err(CancelRefused::Signature(SignatureError::Invalid))
}

#[test]
fn a_proper_cancel_is_accepted() {
    assert_eq!(verify(&signed()), Ok(()));
}

/// Changes exactly one field of a record, so it differs from the original.
fn mutate(r: &mut CancelRequested, field: usize) {
    match field {
        0 => {
            r.origin = match r.origin {
                CancelOrigin::SupervisorDrain => CancelOrigin::Operator,
                CancelOrigin::Operator => CancelOrigin::Deadline,
                CancelOrigin::Deadline => CancelOrigin::SupervisorDrain,
            }
        }
        1 => r.deployment.push('x'),
        2 => {
            r.run = r
                .run
                .as_ref()
                .map(|run| format!("{run}x"))
                .or(Some(String::new()))
        }
        3 => r.run = None,
        4 => r.reason.push('x'),
        5 => r.at_ms ^= 1,
        6 => r.at_ms ^= 1 << 63,
        _ => unreachable!(),
    }
}

#[test]
fn every_field_is_covered_by_the_signature() {
    let names = [
        "origin",
        "deployment",
        "run",
        "run removed",
        "reason",
        "at_ms",
        "at_ms high bit",
    ];
    for (field, name) in names.iter().enumerate() {
        let mut cancel = signed();
        mutate(&mut cancel.record, field);
        assert_ne!(cancel.record, record(), "{name} unchanged");
        let got = cancel.verify(&supervisor_key().verifying_key());
        assert_eq!(got, Err(SignatureError::Invalid), "edited {name}");
    }
}

proptest! {
    /// For any record and any one field edited after signing, the
    /// signature no longer verifies.
    #[test]
    fn any_edited_field_is_refused(r in cancel_requested(), field in 0usize..7) {
        let key = supervisor_key();
        let mut cancel = SignedCancel::sign(r.clone(), &key);
        prop_assert_eq!(cancel.verify(&key.verifying_key()), Ok(()));
        mutate(&mut cancel.record, field);
        prop_assume!(cancel.record != r); // `run = None` on a None run
        prop_assert_eq!(cancel.verify(&key.verifying_key()), Err(SignatureError::Invalid));
    }

    /// Any single flipped bit of the signature is refused.
    #[test]
    fn any_flipped_signature_bit_is_refused(bit in 0usize..512) {
        let mut cancel = signed();
        cancel.signature[bit / 8] ^= 1 << (bit % 8);
        prop_assert_eq!(verify(&cancel), invalid());
    }
}

#[test]
fn another_key_is_an_unknown_key() {
    let cancel = SignedCancel::sign(record(), &other_key());
    assert_eq!(
        verify(&cancel),
        Err(CancelRefused::Signature(SignatureError::UnknownKey {
            got: KeyId::of(&other_key().verifying_key()),
            trusted: KeyId::of(&supervisor_key().verifying_key()),
        }))
    );
}

/// Naming the trusted key id does not help a forger: the signature itself
/// is checked against the trusted key.
#[test]
fn another_key_with_forged_key_id_is_invalid() {
    let mut cancel = SignedCancel::sign(record(), &other_key());
    cancel.key_id = KeyId::of(&supervisor_key().verifying_key());
    assert_eq!(verify(&cancel), invalid());
}

/// ed25519 group order L, little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// S + L is the classic malleation: the same point equation holds, so a
/// lax verifier would accept it. `verify_strict` must not.
#[test]
fn malleated_signature_is_refused() {
    let mut cancel = signed();
    let s = &mut cancel.signature[32..];
    let mut carry = 0u16;
    for (b, l) in s.iter_mut().zip(L) {
        let sum = u16::from(*b) + u16::from(l) + carry;
        *b = sum as u8;
        carry = sum >> 8;
    }
    assert_eq!(carry, 0, "S + L fits in 256 bits");
    assert_ne!(cancel.signature, signed().signature);
    assert_eq!(verify(&cancel), invalid());
}

/// The all-zero signature (R = identity, S = 0) is a small-order trick.
#[test]
fn zero_signature_is_refused() {
    let mut cancel = signed();
    cancel.signature = vec![0; 64];
    assert_eq!(verify(&cancel), invalid());
}

#[test]
fn wrong_length_signature_is_malformed() {
    for len in [0, 32, 63, 65, 128] {
        let mut cancel = signed();
        cancel.signature.resize(len, 0);
        assert_eq!(
            verify(&cancel),
            Err(CancelRefused::Signature(SignatureError::Malformed(len))),
            "{len} bytes"
        );
    }
}

#[test]
fn cancel_for_another_deployment_is_refused() {
    let mut r = record();
    r.deployment = "payroll".into();
    let cancel = SignedCancel::sign(r, &supervisor_key());
    assert_eq!(
        verify(&cancel),
        Err(CancelRefused::WrongDeployment {
            expected: DEPLOYMENT.into(),
            got: "payroll".into(),
        })
    );
}

#[test]
fn cancel_for_an_unknown_run_is_refused() {
    let mut r = record();
    r.run = Some("run-7".into());
    let cancel = SignedCancel::sign(r, &supervisor_key());
    assert_eq!(
        verify(&cancel),
        Err(CancelRefused::UnknownRun {
            got: "run-7".into()
        })
    );
}

/// `run: None` means every run; the child's run list is not consulted.
#[test]
fn cancel_of_every_run_is_accepted() {
    let mut r = record();
    r.run = None;
    let cancel = SignedCancel::sign(r, &supervisor_key());
    let result = cancel.verify_for(
        &supervisor_key().verifying_key(),
        DEPLOYMENT,
        |run| -> bool { panic!("asked about {run}") },
    );
    assert_eq!(result, Ok(()));
}

/// The signature is checked first: a forged cancel learns nothing about
/// which deployments or runs exist.
#[test]
fn signature_is_checked_before_deployment_and_run() {
    let mut r = record();
    r.deployment = "payroll".into();
    r.run = Some("run-7".into());
    let cancel = SignedCancel::sign(r, &other_key());
    assert!(matches!(
        verify(&cancel),
        Err(CancelRefused::Signature(SignatureError::UnknownKey { .. }))
    ));
}

/// A cancel still verifies after crossing the wire inside `Control::Cancel`.
#[test]
fn cancel_verifies_after_the_wire() {
    let mut wire = Vec::new();
    let frame = Frame {
        seq: 1,
        body: Control::Cancel(signed()),
    };
    encode_frame(&frame, DEFAULT_MAX_FRAME_BYTES, &mut wire).unwrap();
    let got = FrameDecoder::new(DEFAULT_MAX_FRAME_BYTES)
        .decode_one::<Control>(&wire)
        .unwrap();
    let Control::Cancel(cancel) = got.body else {
        panic!("not a cancel: {:?}", got.body);
    };
    assert_eq!(verify(&cancel), Ok(()));
}

/// The canonical layout is pinned: changing it would invalidate every
/// signed cancel and journal record already issued.
#[test]
fn signing_bytes_layout_is_pinned() {
    fn field(out: &mut Vec<u8>, s: &str) {
        out.extend_from_slice(&(s.len() as u64).to_be_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    let mut want = Vec::new();
    field(&mut want, "wfhost/cancel/v1");
    field(&mut want, "supervisor-drain");
    field(&mut want, DEPLOYMENT);
    want.push(1);
    field(&mut want, "run-42");
    field(&mut want, "drain budget of 90s spent");
    want.extend_from_slice(&1_700_000_000_000u64.to_be_bytes());
    assert_eq!(signing_bytes(&record()), want);

    let mut r = record();
    r.run = None;
    let bytes = signing_bytes(&r);
    let at = 8 + 16 + 8 + 16 + 8 + DEPLOYMENT.len();
    assert_eq!(bytes[at], 0, "absent run is a 0 presence byte");
}

/// Length prefixes keep field boundaries: moving a character from one field
/// to the next changes what is signed.
#[test]
fn field_boundaries_are_signed() {
    let mut a = record();
    a.deployment = "ab".into();
    a.run = Some("c".into());
    let mut b = a.clone();
    b.deployment = "a".into();
    b.run = Some("bc".into());
    assert_ne!(signing_bytes(&a), signing_bytes(&b));
}

#[test]
fn pem_round_trip() {
    let key = key::generate().unwrap();
    let pem = key::to_pem(&key).unwrap();
    assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\n"), "{pem}");
    assert!(pem.trim_end().ends_with("-----END PRIVATE KEY-----"));
    let back = key::from_pem(&pem).unwrap();
    assert_eq!(back.to_bytes(), key.to_bytes());
    // A key read back signs cancels the original's public key accepts.
    let cancel = SignedCancel::sign(record(), &back);
    assert_eq!(cancel.verify(&key.verifying_key()), Ok(()));
}

#[test]
fn generated_keys_differ() {
    let a = key::generate().unwrap();
    let b = key::generate().unwrap();
    assert_ne!(a.to_bytes(), b.to_bytes());
}

#[test]
fn garbage_pem_is_refused() {
    let good = key::to_pem(&supervisor_key()).unwrap();
    // The DER header says 0x51 bytes follow; claim 0x52 instead.
    let bad_len = good.replacen("MFEC", "MFIC", 1);
    assert_ne!(bad_len, good);
    // The embedded public key does not belong to the private key.
    let wrong_public = good.replacen("6kpsY", "6kpsZ", 1);
    assert_ne!(wrong_public, good);
    let cases = [
        String::new(),
        "not a key".to_owned(),
        "-----BEGIN PRIVATE KEY-----\n!!!!\n-----END PRIVATE KEY-----\n".to_owned(),
        good.replace("PRIVATE KEY", "PUBLIC KEY"),
        good[..good.len() / 2].to_owned(),
        bad_len,
        wrong_public,
    ];
    for pem in cases {
        assert!(
            matches!(key::from_pem(&pem), Err(KeyError::Pem(_))),
            "accepted {pem:?}"
        );
    }
}

#[test]
fn public_hex_round_trip() {
    let public = supervisor_key().verifying_key();
    let hex = key::public_hex(&public);
    assert_eq!(hex.len(), 64);
    assert!(
        hex.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    assert_eq!(key::public_from_hex(&hex).unwrap(), public);
    // As read from an environment variable or a file, with a newline.
    assert_eq!(key::public_from_hex(&format!(" {hex}\n")).unwrap(), public);
}

/// RFC 8032 test 1: the public key of a known secret, in our hex form.
#[test]
fn public_hex_known_answer() {
    let secret: [u8; 32] =
        hex::decode("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
            .unwrap()
            .try_into()
            .unwrap();
    assert_eq!(
        key::public_hex(&SigningKey::from_bytes(&secret).verifying_key()),
        "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a"
    );
}

#[test]
fn bad_public_hex_is_refused() {
    let hex = key::public_hex(&supervisor_key().verifying_key());
    for text in [
        String::new(),
        hex[..62].to_owned(),
        format!("{hex}00"),
        hex.replacen(&hex[..1], "g", 1),
    ] {
        assert!(
            matches!(key::public_from_hex(&text), Err(KeyError::PublicHex(_))),
            "accepted {text:?}"
        );
    }
}

#[test]
fn key_id_is_sha256_prefix_of_the_public_key() {
    let public = supervisor_key().verifying_key();
    let digest = Sha256::digest(public.as_bytes());
    let id = KeyId::of(&public);
    assert_eq!(id.0[..], digest[..8]);
    assert_eq!(id.to_string(), hex::encode(&digest[..8]));
    assert_ne!(id, KeyId::of(&other_key().verifying_key()));
}
