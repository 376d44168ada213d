//! One module per subcommand.

pub mod bare;
pub mod daemon;
pub mod list;
pub mod pipeline;
pub mod session;
pub mod stats;
pub mod trace;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::error::{Failure, Result};

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        None => trace::run(cli.trace),
        Some(Command::Stats(a)) => stats::run(&a),
        Some(Command::List) => list::run(),
        Some(Command::Top(_)) => Err(Failure::runtime(
            "`gputrace top` is not available in this build yet",
        )),
        Some(Command::Calibrate { libcuda }) => Ok(crate::names::calibrate::helper_main(&libcuda)),
        Some(Command::Symbols { library }) => bare::symbols(&library),
        Some(Command::Bare(a)) => bare::run(&a),
        Some(Command::Daemon(a)) => daemon::run(a),
    }
}
