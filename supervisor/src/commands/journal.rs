//! (being written)

/// Journal subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check signatures and the hash chain.
    Verify,
}

/// Runs the command.
pub fn run(_cmd: Command) -> u8 {
    crate::exit::FAILED
}
