//! One module per subcommand: each parses nothing itself (that is `cli`),
//! chooses its sinks and runs a `session`, or reads a file.

pub(crate) mod bare;
pub(crate) mod daemon;
pub(crate) mod list;
pub(crate) mod stats;
pub(crate) mod top;
pub(crate) mod trace;

use std::process::ExitCode;

use crate::cli::Cli;
use crate::cli::Command;
use crate::config::Config;
use crate::error::Result;

/// What `--stacks` asks of the session: `None` without it.
fn stack_request(args: &crate::cli::StackArgs) -> Option<crate::session::StackRequest> {
    args.stacks.then_some(crate::session::StackRequest {
        every: args.stacks_every,
        window: args.stack_bytes,
    })
}

/// What `--gpu-time` asks of the session: `None` without it.
fn gpu_options(args: &crate::cli::GpuArgs, config: &Config) -> Option<crate::gpu::GpuOptions> {
    args.gpu_time.then(|| crate::gpu::GpuOptions {
        libcupti: args.libcupti.clone(),
        kinds: config.gpu_kinds,
        share: args.gpu_time_share.unwrap_or(100),
    })
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    let config = Config::from_env()?;
    crate::log::set_debug(config.debug);
    match cli.command {
        None => trace::run(cli.trace, &config),
        Some(Command::Stats(a)) => stats::run(&a),
        Some(Command::List) => list::run(),
        Some(Command::Top(a)) => top::run(a, &config),
        Some(Command::Daemon(a)) => daemon::run(a, &config),
        Some(Command::Calibrate { libcuda, sandbox }) => {
            Ok(crate::names::calibrate::helper_main(&libcuda, sandbox))
        }
        Some(Command::CalibrateLt {
            libcublaslt,
            sandbox,
        }) => Ok(crate::lt::calibrate::helper_main(&libcublaslt, sandbox)),
        Some(Command::Symbols { library }) => bare::symbols(&library),
        Some(Command::Bare(a)) => bare::run(&a),
        Some(Command::Panic) => panic!("__panic: a panic on purpose (tests)"),
    }
}
