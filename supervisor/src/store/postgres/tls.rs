//! TLS to PostgreSQL with rustls (on `ring`: no OpenSSL, no C library
//! at run time), in libpq's terms (`config/conninfo.rs`): every
//! connection a host makes (the store, its reader, the fleet's, the
//! listener) is made here, so all of them are encrypted and verified
//! alike. A certificate that does not verify is refused with the host,
//! what failed and the setting to change; which connections are
//! encrypted is known after each connect, for status and the log.

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use postgres::config::{Host, SslMode as ClientMode};
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::WebPkiSupportedAlgorithms;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::config::conninfo::{Conninfo, SslMode};

/// Where Debian, Ubuntu, Fedora and Alpine keep the system's CAs, for
/// `sslrootcert = "system"` (libpq's word), unless `SSL_CERT_FILE` says.
const SYSTEM_CAS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// How a connection is protected, for status and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Encryption {
    /// No TLS (a Unix socket, `sslmode=disable`, or a server without TLS
    /// under `prefer`).
    Plaintext,
    /// TLS: the protocol and cipher suite, and what was verified.
    Tls {
        /// e.g. `TLSv1.3 TLS13_AES_256_GCM_SHA384`.
        session: String,
        /// `verify-full`, `verify-ca`, or `unverified`.
        verified: &'static str,
    },
}

impl std::fmt::Display for Encryption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Plaintext => f.write_str("plaintext"),
            Self::Tls { session, verified } => write!(f, "TLS ({session}, {verified})"),
        }
    }
}

impl Encryption {
    /// Whether the connection is encrypted.
    pub fn encrypted(&self) -> bool {
        matches!(self, Self::Tls { .. })
    }
}

/// How this process's latest connection to PostgreSQL is protected (every
/// connection of a host shares one setup), for `status`; changes are
/// logged.
static CURRENT: Mutex<Option<Encryption>> = Mutex::new(None);

/// How the latest connection is protected; none before the first.
pub fn current() -> Option<Encryption> {
    CURRENT.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// Records `encryption` of a connection to `location`; logs a change.
fn seen(encryption: &Encryption, location: &str) {
    let mut current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
    if current.as_ref() != Some(encryption) {
        if encryption.encrypted() {
            tracing::info!(store = %location, encryption = %encryption, "connected to the database: encrypted");
        } else {
            tracing::info!(store = %location, encryption = %encryption, "connected to the database: not encrypted");
        }
        *current = Some(encryption.clone());
    }
}

/// The TLS side of a connection string, ready to connect with.
#[derive(Clone)]
pub struct Tls {
    mode: SslMode,
    /// None for `disable` or a server reached only by Unix sockets.
    client: Option<Arc<ClientConfig>>,
    verified: &'static str,
}

impl Tls {
    /// The TLS setup `info` asks for, its files read and checked now.
    /// Sets the client's own mode on `config` (libpq's stricter modes
    /// are the client's `require` plus our verifier).
    pub fn new(info: &Conninfo, config: &mut postgres::Config) -> Result<Self, String> {
        let local = is_local(config);
        let mode = info.sslmode.unwrap_or(if local {
            SslMode::Prefer
        } else {
            SslMode::VerifyFull
        });
        let unix_only = config
            .get_hosts()
            .iter()
            .all(|h| matches!(h, Host::Unix(_)));
        let mode = match mode {
            // libpq: `require` with a root certificate verifies the chain.
            SslMode::Require if info.sslrootcert.is_some() => SslMode::VerifyCa,
            m => m,
        };
        config.ssl_mode(match mode {
            SslMode::Disable => ClientMode::Disable,
            _ if unix_only => ClientMode::Disable,
            SslMode::Prefer => ClientMode::Prefer,
            _ => ClientMode::Require,
        });
        if mode == SslMode::Disable || unix_only {
            return Ok(Self {
                mode,
                client: None,
                verified: "unverified",
            });
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let (verifier, verified): (Arc<dyn ServerCertVerifier>, _) = match mode {
            SslMode::VerifyCa | SslMode::VerifyFull => {
                let roots = roots(info.sslrootcert.as_deref(), mode)?;
                let webpki =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| format!("cannot use the CA certificates: {e}"))?;
                let full = mode == SslMode::VerifyFull;
                (
                    Arc::new(Verify { webpki, full }),
                    if full { "verify-full" } else { "verify-ca" },
                )
            }
            _ => (
                Arc::new(Unverified(provider.signature_verification_algorithms)),
                "unverified",
            ),
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("cannot set up TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let client = match (&info.sslcert, &info.sslkey) {
            (Some(cert), Some(key)) => {
                let (chain, key) = identity(cert, key)?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("sslcert/sslkey cannot be used together: {e}\n  help: give the certificate and the key that belong to it"))?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err("[store] sslcert and sslkey go together: set both (this host's certificate and its key), or neither".into());
            }
        };
        Ok(Self {
            mode,
            client: Some(Arc::new(client)),
            verified,
        })
    }

    /// Connects with `config` (as [`Tls::new`] set it up); the client and
    /// how the connection is protected.
    pub fn connect(
        &self,
        config: &postgres::Config,
        location: &str,
    ) -> Result<(postgres::Client, Encryption), postgres::Error> {
        let Some(client) = &self.client else {
            let connected = config.connect(postgres::NoTls)?;
            seen(&Encryption::Plaintext, location);
            return Ok((connected, Encryption::Plaintext));
        };
        let session = Arc::new(Mutex::new(None));
        let make = Make {
            config: client.clone(),
            mode: self.mode,
            session: session.clone(),
        };
        let connected = config.connect(make)?;
        let encryption = match session.lock().unwrap_or_else(|p| p.into_inner()).take() {
            Some(session) => Encryption::Tls {
                session,
                verified: self.verified,
            },
            None => Encryption::Plaintext,
        };
        seen(&encryption, location);
        Ok((connected, encryption))
    }
}

/// Whether every host of `config` is this machine (a socket, `localhost`
/// or a loopback address): there libpq's `prefer` stays the default, as
/// before TLS; any other host gets `verify-full`.
fn is_local(config: &postgres::Config) -> bool {
    config.get_hosts().iter().all(|h| match h {
        Host::Unix(_) => true,
        Host::Tcp(name) => {
            name == "localhost"
                || name
                    .trim_matches(['[', ']'])
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
    })
}

/// The CAs that verify the server: `sslrootcert`, `system`, or libpq's
/// default `~/.postgresql/root.crt`.
fn roots(path: Option<&Path>, mode: SslMode) -> Result<RootCertStore, String> {
    let path = match path {
        Some(p) if p == Path::new("system") => system_cas()?,
        Some(p) => p.to_path_buf(),
        None => {
            let default = std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".postgresql/root.crt"))
                .filter(|p| p.exists());
            default.ok_or_else(|| {
                format!(
                    "sslmode={} verifies the server's certificate, but no CA certificate is set\n  help: set [store] sslrootcert to the CA's PEM file (or \"system\" for the system's CAs), or put it in ~/.postgresql/root.crt",
                    mode.as_str()
                )
            })?
        }
    };
    let mut roots = RootCertStore::empty();
    let certs = read_certs(&path, "sslrootcert")?;
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "sslrootcert {} holds no usable CA certificate\n  help: point [store] sslrootcert at the PEM file of the CA that signed the server's certificate",
            path.display()
        ));
    }
    Ok(roots)
}

/// The system's CA bundle.
fn system_cas() -> Result<PathBuf, String> {
    if let Some(file) = std::env::var_os("SSL_CERT_FILE") {
        return Ok(PathBuf::from(file));
    }
    SYSTEM_CAS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .ok_or_else(|| {
            "sslrootcert = \"system\", but no system CA bundle was found (install ca-certificates, or set SSL_CERT_FILE)".to_owned()
        })
}

/// The certificates in PEM file `path` (the `setting` that named it).
fn read_certs(path: &Path, setting: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs: Result<Vec<_>, _> = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("cannot read {setting} {}: {e}", path.display()))?
        .collect();
    let certs = certs.map_err(|e| format!("{setting} {} is not PEM: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!(
            "{setting} {} holds no certificate (PEM, -----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(certs)
}

/// This host's certificate chain and key; the key file must be private.
fn identity(
    cert: &Path,
    key: &Path,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), String> {
    let chain = read_certs(cert, "sslcert")?;
    super::password::private_file(key, "sslkey")?;
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| format!("cannot read sslkey {}: {e}", key.display()))?;
    Ok((chain, key))
}

/// The chain checked against the roots, and the host name too for
/// `verify-full`.
#[derive(Debug)]
struct Verify {
    webpki: Arc<WebPkiServerVerifier>,
    full: bool,
}

impl ServerCertVerifier for Verify {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .webpki
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.full => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// `prefer` and `require` without a CA: encrypted, the certificate not
/// checked (libpq's meaning), the handshake's signatures still are.
#[derive(Debug)]
struct Unverified(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// Makes one connector per connection attempt (the client asks for each
/// host it tries).
struct Make {
    config: Arc<ClientConfig>,
    mode: SslMode,
    /// The session of the connection that succeeded, if it is TLS.
    session: Arc<Mutex<Option<String>>>,
}

impl<S> MakeTlsConnect<S> for Make
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type TlsConnect = Connect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<Connect, io::Error> {
        let name = ServerName::try_from(domain.to_owned()).map_err(|e| {
            io::Error::other(format!("{domain:?} is not a host name TLS can check: {e}"))
        })?;
        Ok(Connect {
            connector: tokio_rustls::TlsConnector::from(self.config.clone()),
            name,
            host: domain.to_owned(),
            mode: self.mode,
            session: self.session.clone(),
        })
    }
}

/// Wraps one connection in TLS.
struct Connect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    host: String,
    mode: SslMode,
    session: Arc<Mutex<Option<String>>>,
}

/// A handshake refused, in words an operator can act on.
#[derive(Debug)]
pub struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

type Handshake<S> = Pin<Box<dyn Future<Output = Result<Stream<S>, Refused>> + Send>>;

impl<S> TlsConnect<S> for Connect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = Stream<S>;
    type Error = Refused;
    type Future = Handshake<S>;

    fn connect(self, stream: S) -> Handshake<S> {
        Box::pin(async move {
            let tls = self
                .connector
                .connect(self.name, stream)
                .await
                .map_err(|e| Refused(explain(&e, &self.host, self.mode)))?;
            let (_, conn) = tls.get_ref();
            let session = format!(
                "{} {}",
                conn.protocol_version()
                    .and_then(|v| v.as_str())
                    .unwrap_or("TLS")
                    .replace('_', "."),
                conn.negotiated_cipher_suite()
                    .and_then(|s| s.suite().as_str())
                    .unwrap_or("")
            );
            *self.session.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(session.trim().to_owned());
            Ok(Stream(tls))
        })
    }
}

/// What failed in a handshake with `host`, and the setting to change.
fn explain(err: &io::Error, host: &str, mode: SslMode) -> String {
    let mode = mode.as_str();
    let tls = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<rustls::Error>());
    let Some(tls) = tls else {
        return format!("the TLS handshake with {host} failed: {err}");
    };
    let (what, help) = match tls {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer | CertificateError::BadSignature => (
                "was not signed by a CA in sslrootcert".to_owned(),
                "point [store] sslrootcert at the CA that signed the server's certificate".to_owned(),
            ),
            CertificateError::NotValidForName => (
                format!("is not valid for the name {host:?}"),
                name_help(host),
            ),
            CertificateError::NotValidForNameContext { presented, .. } => (
                format!(
                    "is not valid for the name {host:?} (it names {})",
                    presented.iter().map(|p| unquote(p)).collect::<Vec<_>>().join(", ")
                ),
                name_help(host),
            ),
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => (
                match c {
                    CertificateError::ExpiredContext { time, not_after } => format!(
                        "has expired ({} s ago)",
                        time.as_secs().saturating_sub(not_after.as_secs())
                    ),
                    _ => "has expired".to_owned(),
                },
                "renew the server's certificate (ssl_cert_file) and reload PostgreSQL".to_owned(),
            ),
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => (
                "is not valid yet".to_owned(),
                "check the clocks of this host and of whoever issued the certificate".to_owned(),
            ),
            other => (
                format!("was refused: {other:?}"),
                "check the server's certificate and [store] sslrootcert".to_owned(),
            ),
        },
        rustls::Error::AlertReceived(alert) => (
            format!("handshake was refused by the server: {alert:?}"),
            "if the server requires a client certificate, set [store] sslcert and sslkey to one its ssl_ca_file trusts".to_owned(),
        ),
        other => (
            format!("handshake failed: {other}"),
            "check that the server speaks TLS 1.2 or 1.3 and [store] sslmode".to_owned(),
        ),
    };
    let subject = if what.starts_with("handshake") {
        "the TLS"
    } else {
        "the server's certificate"
    };
    format!("{subject} of {host} {what} (sslmode={mode})\n  help: {help}")
}

/// What to do about a certificate not valid for `host`.
fn name_help(host: &str) -> String {
    format!(
        "connect by a name the certificate lists ([store] url's host), or reissue the server's certificate with {host} in its subjectAltName; sslmode=verify-ca checks the chain only"
    )
}

/// `DnsName("db.example")` as `db.example`: the name a certificate lists.
fn unquote(presented: &str) -> &str {
    match (presented.find('"'), presented.rfind('"')) {
        (Some(a), Some(b)) if b > a => &presented[a + 1..b],
        _ => presented,
    }
}

/// A TLS connection.
pub struct Stream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Stream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Stream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream for Stream<S> {
    // SCRAM's channel binding is left out: `tls-server-end-point` hashes
    // the certificate by its signature's algorithm, which the handshake
    // already verified under the modes that verify anything.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
