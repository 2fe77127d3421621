//! (being written)

/// Arguments.
#[derive(Debug, clap::Args)]
pub struct Args {}

/// Runs the command.
pub fn run(_args: Args) -> u8 {
    crate::exit::FAILED
}
