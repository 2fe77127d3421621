//! `wfhost check-config PATH`: validates a config file exactly as the
//! supervisor would load it (including programs, users and groups), so a
//! bad file is caught before a start or a reload.

use std::path::PathBuf;

use crate::config;
use crate::exit;

/// Arguments of `wfhost check-config`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Exit status: 0 if the file is valid, 2 if not (the error names file:line:column and what to do)."
)]
pub struct Args {
    /// The config file to check.
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
}

/// Loads the file; prints a one-line summary, or the error with its
/// position and a hint.
pub fn run(args: Args) -> u8 {
    match config::load(&args.path) {
        Ok(cfg) => {
            let n = cfg.deployments.len();
            let ids: Vec<&str> = cfg.deployments.iter().map(|d| d.id.as_str()).collect();
            let noun = if n == 1 { "deployment" } else { "deployments" };
            if ids.is_empty() {
                println!("ok: 0 deployments");
            } else {
                println!("ok: {n} {noun}: {}", ids.join(", "));
            }
            exit::OK
        }
        Err(e) => {
            eprintln!("{e}");
            exit::USAGE
        }
    }
}
