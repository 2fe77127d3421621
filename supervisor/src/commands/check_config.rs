//! `wfhost check-config [PATH]`: validates a config file exactly as the
//! supervisor would load it (programs, users and groups included), and
//! beyond: every program it can check (the command `wfhost-child exec`
//! hosts, an interpreter's script) is looked up too, and every one that is
//! missing is listed, so a bad file is caught before a start or a reload.

use std::path::PathBuf;

use crate::config::{self, ConfigError};
use crate::exit;

/// Arguments of `wfhost check-config`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Without PATH or --config, the file is $WFHOST_CONFIG, else /etc/wfhost/wfhost.toml.\n\n\
Exit status: 0 if the file is valid, 2 if not (each error names file:line:column and what to do)."
)]
pub struct Args {
    /// The config file to check.
    #[arg(value_name = "PATH", conflicts_with = "config")]
    pub path: Option<PathBuf>,
    /// The config file to check (the same as PATH).
    #[arg(long, short, value_name = "PATH")]
    pub config: Option<PathBuf>,
}

/// Checks the file; prints a one-line summary, or every problem with its
/// position and a hint.
pub fn run(args: Args) -> u8 {
    let path = match config::find(args.path.or(args.config).as_deref()) {
        Ok(path) => path,
        Err(e) => {
            eprintln!("{e}");
            return exit::USAGE;
        }
    };
    let missing: Vec<ConfigError> = match config::programs(&path) {
        Ok(checked) => checked.into_iter().filter_map(|c| c.found.err()).collect(),
        Err(e) => {
            eprintln!("{e}");
            return exit::USAGE;
        }
    };
    for problem in &missing {
        eprintln!("{problem}");
    }
    match config::load(&path) {
        Ok(cfg) if missing.is_empty() => {
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
        Ok(_) => {
            let n = missing.len();
            let noun = if n == 1 { "program is" } else { "programs are" };
            eprintln!(
                "{n} {noun} missing; the rest of {} is valid",
                path.display()
            );
            exit::USAGE
        }
        Err(e) => {
            // A missing command[0] is also load's first error: said once.
            if !missing.iter().any(|m| position(m) == position(&e)) {
                eprintln!("{e}");
            }
            exit::USAGE
        }
    }
}

/// Where an error points, if it points anywhere.
fn position(e: &ConfigError) -> Option<(usize, usize)> {
    match e {
        ConfigError::Invalid { line, column, .. } => Some((*line, *column)),
        _ => None,
    }
}
