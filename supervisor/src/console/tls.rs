//! The console's TLS: rustls on the ring provider (no aws-lc-rs, no
//! OpenSSL), TLS 1.2 and 1.3, the certificate chain and key read from
//! the PEM files `[console]` names, once at start-up.

use std::sync::Arc;

use anyhow::Context as _;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::{self, ServerConfig};

use crate::config::ConsoleTls;

/// An acceptor serving `files`' certificate.
pub fn acceptor(files: &ConsoleTls) -> anyhow::Result<TlsAcceptor> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&files.cert)
        .with_context(|| format!("cannot read [console] tls_cert {}", files.cert.display()))?
        .collect::<Result<_, _>>()
        .with_context(|| {
            format!(
                "[console] tls_cert {} is not PEM certificates",
                files.cert.display()
            )
        })?;
    if certs.is_empty() {
        anyhow::bail!(
            "[console] tls_cert {} holds no certificate",
            files.cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).with_context(|| {
        format!(
            "cannot read a PEM private key from [console] tls_key {}",
            files.key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("the TLS provider offers no protocol version")?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("[console] tls_cert and tls_key do not make a usable certificate")?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}
