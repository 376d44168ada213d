//! One module per subcommand.

pub mod bare;
pub mod daemon;
pub mod list;
pub mod pipeline;
pub mod session;
pub mod stats;
pub mod top;
pub mod trace;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::error::Result;

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        None => trace::run(cli.trace),
        Some(Command::Stats(a)) => stats::run(&a),
        Some(Command::List) => list::run(),
        Some(Command::Top(a)) => top::run(a),
        Some(Command::Calibrate { libcuda, sandbox }) => {
            Ok(crate::names::calibrate::helper_main(&libcuda, sandbox))
        }
        Some(Command::Symbols { library }) => bare::symbols(&library),
        Some(Command::Bare(a)) => bare::run(&a),
        Some(Command::Daemon(a)) => daemon::run(a),
    }
}
