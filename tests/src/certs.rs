//! Certificates for TLS tests, made with the `openssl` command as an
//! operator would (README, TLS to PostgreSQL): a CA, a server certificate
//! for `localhost`, an expired one, a client certificate for the
//! database user, and a second CA that signed none of them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The files [`make`] writes.
pub struct Certs {
    /// The CA that signed everything below.
    pub ca: PathBuf,
    /// A CA that signed nothing here (the wrong `sslrootcert`).
    pub other_ca: PathBuf,
    /// The server's certificate, for `localhost` only.
    pub server_crt: PathBuf,
    /// Its key.
    pub server_key: PathBuf,
    /// An expired certificate for `localhost`, and its key.
    pub expired_crt: PathBuf,
    /// Its key.
    pub expired_key: PathBuf,
    /// A client certificate whose CN is `user`.
    pub client_crt: PathBuf,
    /// Its key (mode 0600).
    pub client_key: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run openssl (apt-get install openssl): {e}"));
    assert!(
        out.status.success(),
        "openssl {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A new P-256 key and a CA certificate named `name` in `dir`.
fn ca(dir: &Path, name: &str) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "30",
            "-subj",
            &format!("/CN={name}"),
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
}

/// A key and a certificate `name` for `cn`, signed by CA `ca`, valid for
/// `days` (-1: already expired), with extensions `ext`.
fn leaf(dir: &Path, name: &str, cn: &str, days: &str, ext: &str) {
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={cn}"),
        ],
    );
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("write the extensions");
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.crt"),
            "-days",
            days,
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
    private(&dir.join(format!("{name}.key")));
}

/// Mode 0600.
pub fn private(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .expect("chmod 600 a key");
}

/// Makes the certificates in `dir`; the client certificate is `user`'s.
pub fn make(dir: &Path, user: &str) -> Certs {
    std::fs::create_dir_all(dir).expect("create the certificates' dir");
    ca(dir, "ca");
    ca(dir, "other-ca");
    let server = "subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n";
    leaf(dir, "server", "localhost", "30", server);
    leaf(dir, "expired", "localhost", "-1", server);
    let client =
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n";
    leaf(dir, "client", user, "30", client);
    Certs {
        ca: dir.join("ca.crt"),
        other_ca: dir.join("other-ca.crt"),
        server_crt: dir.join("server.crt"),
        server_key: dir.join("server.key"),
        expired_crt: dir.join("expired.crt"),
        expired_key: dir.join("expired.key"),
        client_crt: dir.join("client.crt"),
        client_key: dir.join("client.key"),
    }
}
