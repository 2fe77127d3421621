//! `wfhost keygen --out PATH`: writes a new ed25519 signing key for the
//! supervisor (PKCS#8 PEM, mode 0600) and prints its public half.

use std::path::PathBuf;

use wfhost_ipc::KeyId;
use wfhost_ipc::key::public_hex;

use crate::exit;
use crate::signing_key;

/// Arguments of `wfhost keygen`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Point `signing_key` in [supervisor] at the file to use it. \
An existing file is never overwritten (exit status 1)."
)]
pub struct Args {
    /// Where to write the private key (must not exist yet).
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
}

/// Writes the key; prints its path, public key (hex) and key id.
pub fn run(args: Args) -> u8 {
    match signing_key::write_new(&args.out) {
        Ok(key) => {
            let public = key.verifying_key();
            println!("wrote signing key {} (mode 0600)", args.out.display());
            println!("public key: {}", public_hex(&public));
            println!("key id: {}", KeyId::of(&public));
            exit::OK
        }
        Err(e) => {
            eprintln!("error: {e}");
            exit::FAILED
        }
    }
}
