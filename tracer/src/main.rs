use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
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
    match gputrace::commands::run(cli) {
        Ok(code) => code,
        Err(f) => {
            eprintln!("gputrace: {f}");
            ExitCode::from(f.code)
        }
    }
}
