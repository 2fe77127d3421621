//! Signing keys: generation, PKCS#8 PEM, hex public keys, and key ids.

use std::fmt;

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, EncodePrivateKey};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use thiserror::Error;

/// First 8 bytes of the SHA-256 of a public key: names the key in every
/// signed record so keys can rotate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyId(pub [u8; 8]);

impl KeyId {
    /// The id of `key`.
    pub fn of(key: &VerifyingKey) -> Self {
        let digest = Sha256::digest(key.as_bytes());
        let mut id = [0u8; 8];
        id.copy_from_slice(&digest[..8]);
        Self(id)
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

/// What can go wrong reading or making a key.
#[derive(Debug, Error)]
pub enum KeyError {
    /// The OS random source failed.
    #[error("cannot read the OS random source: {0}")]
    Random(String),
    /// The PEM text is not a PKCS#8 ed25519 private key.
    #[error("not a PKCS#8 PEM ed25519 private key: {0}")]
    Pem(String),
    /// The hex text is not a 32-byte ed25519 public key.
    #[error("not a hex ed25519 public key: {0}")]
    PublicHex(String),
}

/// A new signing key seeded from the OS random source.
pub fn generate() -> Result<SigningKey, KeyError> {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| KeyError::Random(e.to_string()))?;
    Ok(SigningKey::from_bytes(&seed))
}

/// The key as PKCS#8 PEM text.
pub fn to_pem(key: &SigningKey) -> Result<String, KeyError> {
    key.to_pkcs8_pem(LineEnding::LF)
        .map(|pem| pem.to_string())
        .map_err(|e| KeyError::Pem(e.to_string()))
}

/// Reads a key from PKCS#8 PEM text.
pub fn from_pem(pem: &str) -> Result<SigningKey, KeyError> {
    SigningKey::from_pkcs8_pem(pem).map_err(|e| KeyError::Pem(e.to_string()))
}

/// The public key as 64 hex chars (what children get in their environment).
pub fn public_hex(key: &VerifyingKey) -> String {
    hex::encode(key.as_bytes())
}

/// Reads a public key from 64 hex chars.
pub fn public_from_hex(text: &str) -> Result<VerifyingKey, KeyError> {
    let bytes = hex::decode(text.trim()).map_err(|e| KeyError::PublicHex(e.to_string()))?;
    let arr: [u8; 32] = bytes
        .try_into()
        .map_err(|b: Vec<u8>| KeyError::PublicHex(format!("{} bytes, expected 32", b.len())))?;
    VerifyingKey::from_bytes(&arr).map_err(|e| KeyError::PublicHex(e.to_string()))
}
