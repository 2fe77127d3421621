//! Signed records: any record that can lay itself out as an explicit,
//! versioned, domain-separated byte string can be signed and verified.
//! Cancel requests use this today; journal records use the same helpers.

use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::key::KeyId;

/// A record with a canonical signing layout. The layout is written by hand
/// (not derived) so a serde change can never silently change what is signed.
pub trait Signable {
    /// Domain and version, e.g. `wfhost/cancel/v1`; distinct per record type
    /// so a signature over one kind can never pass as another.
    const DOMAIN: &'static str;

    /// Writes every field that the signature must cover.
    fn write_canonical(&self, out: &mut Canonical);
}

/// Builder of canonical bytes: every variable-length field is length-prefixed
/// so no two different records share a layout.
#[derive(Debug, Default)]
pub struct Canonical(Vec<u8>);

impl Canonical {
    /// Appends a string, length-prefixed.
    pub fn str(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }

    /// Appends bytes, length-prefixed.
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(&(b.len() as u64).to_be_bytes());
        self.0.extend_from_slice(b);
        self
    }

    /// Appends a fixed-width integer.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// Appends an optional string: a presence byte, then the string.
    pub fn opt_str(&mut self, s: Option<&str>) -> &mut Self {
        match s {
            Some(s) => {
                self.0.push(1);
                self.str(s)
            }
            None => {
                self.0.push(0);
                self
            }
        }
    }
}

/// The exact bytes a signature over `record` covers.
pub fn signing_bytes<T: Signable>(record: &T) -> Vec<u8> {
    let mut c = Canonical::default();
    c.str(T::DOMAIN);
    record.write_canonical(&mut c);
    c.0
}

/// Why a signed record was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SignatureError {
    /// The record names a key other than the one we trust.
    #[error("signed by unknown key {got} (trusted key is {trusted})")]
    UnknownKey { got: KeyId, trusted: KeyId },
    /// The signature is not 64 bytes.
    #[error("malformed signature ({0} bytes, expected 64)")]
    Malformed(usize),
    /// The signature does not verify (edited record, wrong key, malleated).
    #[error("signature does not verify")]
    Invalid,
}

/// A record with the id of the key that signed it and the signature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signed<T> {
    /// What was signed.
    pub record: T,
    /// Which key signed it.
    pub key_id: KeyId,
    /// 64-byte ed25519 signature over [`signing_bytes`] of `record`.
    pub signature: Vec<u8>,
}

impl<T: Signable> Signed<T> {
    /// Signs `record` with `key`.
    pub fn sign(record: T, key: &SigningKey) -> Self {
        let signature = key.sign(&signing_bytes(&record)).to_bytes().to_vec();
        Self {
            record,
            key_id: KeyId::of(&key.verifying_key()),
            signature,
        }
    }

    /// Verifies strictly (no malleable or small-order signatures) against
    /// the one trusted key.
    pub fn verify(&self, trusted: &VerifyingKey) -> Result<(), SignatureError> {
        let trusted_id = KeyId::of(trusted);
        if self.key_id != trusted_id {
            return Err(SignatureError::UnknownKey {
                got: self.key_id,
                trusted: trusted_id,
            });
        }
        let bytes: [u8; 64] = self
            .signature
            .as_slice()
            .try_into()
            .map_err(|_| SignatureError::Malformed(self.signature.len()))?;
        trusted
            .verify_strict(&signing_bytes(&self.record), &Signature::from_bytes(&bytes))
            .map_err(|_| SignatureError::Invalid)
    }
}
