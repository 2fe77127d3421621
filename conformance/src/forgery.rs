//! Signed cancels, honest and forged. The forgeries are built the way the
//! golden vectors' are (`ipc/tests/vectors.rs`), each over a cancel of the
//! run in flight so only the forgery itself can be the reason to refuse it.

use std::time::{SystemTime, UNIX_EPOCH};

use curve25519_dalek::scalar::Scalar;
use ed25519_dalek::{Signer, SigningKey};
use sha2::{Digest, Sha256, Sha512};
use wfhost_ipc::signed::signing_bytes;
use wfhost_ipc::{
    CancelOrigin, CancelRequested, KeyId, MailCancelRequested, SignedCancel, SignedMailCancel,
};

/// ed25519's group order L, little-endian.
const L: [u8; 32] = [
    0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9, 0xde, 0x14,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
];

/// The run a forged cancel names (unless it forges the run).
pub const RUN_IN_FLIGHT: &str = "target";

/// One way to forge a cancel; each must be refused and change nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forgery {
    /// One bit of a valid signature flipped.
    BadSignature,
    /// Signed by a key the child does not trust.
    OtherKey,
    /// Signed by another key, naming the trusted key's id.
    ClaimedKeyId,
    /// A valid signature over a cancel for another deployment.
    OtherDeployment,
    /// A valid signature over a cancel of a run the child does not have.
    UnknownRun,
    /// A valid signature with S + L in place of S.
    Malleated,
    /// A valid signature cut to 63 bytes.
    ShortSignature,
    /// Signed over the journal's domain instead of the cancel's.
    WrongDomain,
    /// R of small order (the identity) with S = k·a, which passes the
    /// cofactorless equation: only the small-order rule refuses it.
    SmallOrderR,
}

impl Forgery {
    /// Every forgery, in the order the kit plays them.
    pub const ALL: [Self; 9] = [
        Self::BadSignature,
        Self::OtherKey,
        Self::ClaimedKeyId,
        Self::OtherDeployment,
        Self::UnknownRun,
        Self::Malleated,
        Self::ShortSignature,
        Self::WrongDomain,
        Self::SmallOrderR,
    ];

    /// The scenario name's suffix.
    pub fn name(self) -> &'static str {
        match self {
            Self::BadSignature => "bad-signature",
            Self::OtherKey => "other-key",
            Self::ClaimedKeyId => "claimed-key-id",
            Self::OtherDeployment => "other-deployment",
            Self::UnknownRun => "unknown-run",
            Self::Malleated => "malleated",
            Self::ShortSignature => "short-signature",
            Self::WrongDomain => "wrong-domain",
            Self::SmallOrderR => "small-order-r",
        }
    }

    /// What is forged, for failure messages.
    pub fn describe(self) -> &'static str {
        match self {
            Self::BadSignature => "a cancel whose signature has one bit flipped",
            Self::OtherKey => "a cancel signed by another key",
            Self::ClaimedKeyId => "a cancel signed by another key claiming the trusted key's id",
            Self::OtherDeployment => "a validly signed cancel for another deployment",
            Self::UnknownRun => "a validly signed cancel of a run the child does not have",
            Self::Malleated => "a cancel whose signature's S was replaced by S + L",
            Self::ShortSignature => "a cancel with a 63-byte signature",
            Self::WrongDomain => "a cancel signed over the domain wfhost/journal/v1",
            Self::SmallOrderR => "a cancel whose signature has R of small order",
        }
    }

    /// The forged cancel, aimed at [`RUN_IN_FLIGHT`] of `deployment` whose
    /// children trust `key`.
    pub fn build(self, key: &SigningKey, deployment: &str) -> SignedCancel {
        let record = |deployment: &str, run: &str| {
            cancel_record(deployment, Some(run), &format!("forged: {}", self.name()))
        };
        let honest = || SignedCancel::sign(record(deployment, RUN_IN_FLIGHT), key);
        match self {
            Self::BadSignature => {
                let mut c = honest();
                c.signature[10] ^= 0x01;
                c
            }
            Self::OtherKey => {
                SignedCancel::sign(record(deployment, RUN_IN_FLIGHT), &other_key(key))
            }
            Self::ClaimedKeyId => {
                let mut c = SignedCancel::sign(record(deployment, RUN_IN_FLIGHT), &other_key(key));
                c.key_id = KeyId::of(&key.verifying_key());
                c
            }
            Self::OtherDeployment => SignedCancel::sign(
                record(&format!("{deployment}-elsewhere"), RUN_IN_FLIGHT),
                key,
            ),
            Self::UnknownRun => SignedCancel::sign(record(deployment, "ghost-run"), key),
            Self::Malleated => {
                let mut c = honest();
                let s = add_l(&c.signature[32..]);
                c.signature[32..].copy_from_slice(&s);
                c
            }
            Self::ShortSignature => {
                let mut c = honest();
                c.signature.truncate(63);
                c
            }
            Self::WrongDomain => {
                signed_in_domain(record(deployment, RUN_IN_FLIGHT), key, "wfhost/journal/v1")
            }
            Self::SmallOrderR => {
                let mut c = honest();
                let mut identity = [0u8; 32];
                identity[0] = 1;
                c.signature = small_order_r_signature(key, identity, &signing_bytes(&c.record));
                c
            }
        }
    }
}

/// A cancel of `run` (every run when `None`) of `deployment`, signed with
/// `key`: what a supervisor sends.
pub fn honest(key: &SigningKey, deployment: &str, run: Option<&str>) -> SignedCancel {
    SignedCancel::sign(
        cancel_record(deployment, run, "conformance kit: signed cancel"),
        key,
    )
}

fn cancel_record(deployment: &str, run: Option<&str>, reason: &str) -> CancelRequested {
    CancelRequested {
        origin: CancelOrigin::Operator,
        deployment: deployment.to_owned(),
        run: run.map(str::to_owned),
        reason: reason.to_owned(),
        at_ms: now_ms(),
    }
}

/// Protocol 3: a cancel of mail item `id` of `deployment`, signed with
/// `key`: what a supervisor sends.
pub fn honest_mail(key: &SigningKey, deployment: &str, id: u64) -> SignedMailCancel {
    SignedMailCancel::sign(
        MailCancelRequested {
            origin: CancelOrigin::Operator,
            deployment: deployment.to_owned(),
            id,
            reason: "conformance kit: cancel of one item".to_owned(),
            at_ms: now_ms(),
        },
        key,
    )
}

/// Protocol 3: [`honest_mail`] with one bit of its signature flipped.
pub fn forged_mail(key: &SigningKey, deployment: &str, id: u64) -> SignedMailCancel {
    let mut c = honest_mail(key, deployment, id);
    c.signature[10] ^= 0x01;
    c
}

/// Unix time in milliseconds.
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A key derived from `key` that is never it: the "another key" of the
/// forgeries, the same for the whole run.
fn other_key(key: &SigningKey) -> SigningKey {
    let seed: [u8; 32] = Sha256::new()
        .chain_update(b"wfhost-conformance: another key")
        .chain_update(key.to_bytes())
        .finalize()
        .into();
    SigningKey::from_bytes(&seed)
}

/// `s + L` as 32 little-endian bytes: the same signature, non-canonical.
fn add_l(s: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut carry = 0u16;
    for (i, byte) in out.iter_mut().enumerate() {
        let sum = u16::from(s.get(i).copied().unwrap_or(0)) + u16::from(L[i]) + carry;
        *byte = sum as u8;
        carry = sum >> 8;
    }
    out
}

/// A cancel signed over `domain` in place of the cancel's own.
fn signed_in_domain(record: CancelRequested, key: &SigningKey, domain: &str) -> SignedCancel {
    let honest = signing_bytes(&record);
    let own_domain_len = 8 + "wfhost/cancel/v1".len();
    let mut bytes = (domain.len() as u64).to_be_bytes().to_vec();
    bytes.extend_from_slice(domain.as_bytes());
    bytes.extend_from_slice(&honest[own_domain_len..]);
    SignedCancel {
        record,
        key_id: KeyId::of(&key.verifying_key()),
        signature: key.sign(&bytes).to_bytes().to_vec(),
    }
}

/// A signature with the small-order point `r` as R and S = k·a, made with
/// the real secret.
fn small_order_r_signature(key: &SigningKey, r: [u8; 32], message: &[u8]) -> Vec<u8> {
    let a = key.verifying_key().to_bytes();
    let hash: [u8; 64] = Sha512::new()
        .chain_update(r)
        .chain_update(a)
        .chain_update(message)
        .finalize()
        .into();
    let k = Scalar::from_bytes_mod_order_wide(&hash);
    let s = k * key.to_scalar();
    let mut sig = r.to_vec();
    sig.extend_from_slice(s.as_bytes());
    sig
}

#[cfg(test)]
mod tests {
    use wfhost_ipc::{CancelRefused, SignatureError};

    use super::*;

    const DEPLOYMENT: &str = "conformance";

    fn verdict(cancel: &SignedCancel, key: &SigningKey) -> Result<(), CancelRefused> {
        cancel.verify_for(&key.verifying_key(), DEPLOYMENT, |run| run == RUN_IN_FLIGHT)
    }

    /// Each forgery is refused for its own reason by the reference
    /// verifier, and the honest cancels it is made from are accepted: the
    /// kit tests what it claims to.
    #[test]
    fn every_forgery_is_refused_for_its_reason_and_honest_cancels_pass() {
        let key = SigningKey::from_bytes(&[42; 32]);
        assert_eq!(
            verdict(&honest(&key, DEPLOYMENT, Some(RUN_IN_FLIGHT)), &key),
            Ok(())
        );
        assert_eq!(verdict(&honest(&key, DEPLOYMENT, None), &key), Ok(()));
        for forgery in Forgery::ALL {
            let refused = verdict(&forgery.build(&key, DEPLOYMENT), &key);
            let ok = match forgery {
                Forgery::OtherKey => matches!(
                    refused,
                    Err(CancelRefused::Signature(SignatureError::UnknownKey { .. }))
                ),
                Forgery::ShortSignature => matches!(
                    refused,
                    Err(CancelRefused::Signature(SignatureError::Malformed(63)))
                ),
                Forgery::OtherDeployment => {
                    matches!(refused, Err(CancelRefused::WrongDeployment { .. }))
                }
                Forgery::UnknownRun => matches!(refused, Err(CancelRefused::UnknownRun { .. })),
                Forgery::BadSignature
                | Forgery::ClaimedKeyId
                | Forgery::Malleated
                | Forgery::WrongDomain
                | Forgery::SmallOrderR => matches!(
                    refused,
                    Err(CancelRefused::Signature(SignatureError::Invalid))
                ),
            };
            assert!(ok, "{}: {refused:?}", forgery.name());
        }
    }

    /// The cancels of one item: the honest one passes the reference
    /// verifier for a child holding the item, the forged one does not, and
    /// a child that does not hold it refuses naming the item.
    #[test]
    fn mail_cancels_verify_as_meant() {
        let key = SigningKey::from_bytes(&[42; 32]);
        let trusted = key.verifying_key();
        let honest = honest_mail(&key, DEPLOYMENT, 17);
        assert_eq!(
            honest.verify_for(&trusted, DEPLOYMENT, |id| id == 17),
            Ok(())
        );
        let unknown = honest
            .verify_for(&trusted, DEPLOYMENT, |_| false)
            .unwrap_err();
        assert!(unknown.to_string().contains("17"), "{unknown}");
        assert_eq!(
            forged_mail(&key, DEPLOYMENT, 17).verify_for(&trusted, DEPLOYMENT, |id| id == 17),
            Err(CancelRefused::Signature(SignatureError::Invalid))
        );
    }

    /// The small-order forgery passes the cofactorless equation, so a
    /// verifier without the small-order check would accept it.
    #[test]
    fn the_small_order_forgery_passes_the_plain_equation() {
        let key = SigningKey::from_bytes(&[42; 32]);
        let c = Forgery::SmallOrderR.build(&key, DEPLOYMENT);
        let sig = ed25519_dalek::Signature::from_slice(&c.signature).unwrap();
        use ed25519_dalek::Verifier;
        assert!(
            key.verifying_key()
                .verify(&signing_bytes(&c.record), &sig)
                .is_ok()
        );
    }
}
