//! `wfhost-child man DIR`: wfhost-child's manual pages, generated from the
//! same clap definitions as `--help` (`wfhost-child.1`,
//! `wfhost-child-exec.1`, …).

use std::path::PathBuf;

use clap::CommandFactory;

use super::Cli;

/// Where to write the pages.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The directory to write the pages into (created if missing).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

/// Writes every page; returns the exit code.
pub fn run(args: ManArgs) -> u8 {
    let dir = &args.dir;
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!(
            "wfhost-child: cannot create {}: {e}; check the path and your permissions",
            dir.display()
        );
        return 1;
    }
    match clap_mangen::generate_to(Cli::command(), dir) {
        Ok(()) => {
            println!("wrote wfhost-child's manual pages to {}", dir.display());
            0
        }
        Err(e) => {
            eprintln!(
                "wfhost-child: cannot write the manual pages to {}: {e}",
                dir.display()
            );
            1
        }
    }
}
