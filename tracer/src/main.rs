use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    gputrace::error::install_panic_hook();
    let cli = match gputrace::cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) if e.use_stderr() => {
            // A bad argument is one line like every other failure
            // (docs/cli.md), not clap's usage block.
            gputrace::error::say(&gputrace::error::usage_line(&e.render().to_string()));
            return ExitCode::from(2);
        }
        Err(e) => {
            // --help, --version: clap's own text on stdout.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    // A panic unwinds to here (restoring the terminal, killing a command
    // never released on the way), then is said in one line.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        gputrace::commands::run(cli)
    })) {
        Ok(Ok(code)) => code,
        Ok(Err(f)) => {
            gputrace::error::say(&f.to_string());
            ExitCode::from(f.code)
        }
        Err(_) => {
            gputrace::error::say_panic();
            ExitCode::from(1)
        }
    }
}
