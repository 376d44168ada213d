use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    gputrace::error::install_panic_hook();
    let cli = match gputrace::cli::Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
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
