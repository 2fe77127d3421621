//! `wfhost man DIR`: the manual pages, generated from the same clap
//! definitions as `--help` (one page for `wfhost`, one for each command:
//! `wfhost-status.1`, `wfhost-journal-verify.1`, …), so they never drift.

use std::path::PathBuf;

use crate::exit;

/// Arguments of `wfhost man`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Install them with, for example:\n  \
    wfhost man /usr/local/share/man/man1 && mandb -q\n\
    then `man wfhost`, `man wfhost-status`. `wfhost-child man DIR` writes wfhost-child's pages.")]
pub struct Args {
    /// The directory to write the pages into (created if missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// Writes every page of `cmd` into the directory.
pub fn run(args: Args, cmd: clap::Command) -> u8 {
    let dir = &args.dir;
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!(
            "wfhost: cannot create {}: {e}; check the path and your permissions",
            dir.display()
        );
        return exit::FAILED;
    }
    match clap_mangen::generate_to(cmd, dir) {
        Ok(()) => {
            let pages = std::fs::read_dir(dir)
                .map(|d| {
                    d.filter_map(Result::ok)
                        .filter(|e| e.file_name().to_string_lossy().ends_with(".1"))
                        .count()
                })
                .unwrap_or(0);
            println!("wrote {pages} manual pages to {}", dir.display());
            exit::OK
        }
        Err(e) => {
            eprintln!(
                "wfhost: cannot write the manual pages to {}: {e}",
                dir.display()
            );
            exit::FAILED
        }
    }
}
