//! `gputrace stats FILE`: the live summary, computed again from a timeline
//! (the reader is `sinks::timeline::read`). Unreadable lines are reported
//! with their number and what was wrong; what was readable is still
//! summarised, and the exit code is then 1.

use std::fs::File;
use std::path::Path;
use std::process::ExitCode;

use crate::aggregate::render::{render_json, render_text};
use crate::cli::{StatsArgs, StatsFormat};
use crate::error::{Failure, Result};
use crate::sinks::summary::write_stdout;
use crate::sinks::timeline::read::read_timeline;

pub fn run(args: &StatsArgs) -> Result<ExitCode> {
    let file = open(&args.file)?;
    let input = read_timeline(file)
        .map_err(|e| Failure::runtime(format!("reading {}: {e}", args.file.display())))?;
    let text = match args.format {
        StatsFormat::Text => render_text(&input.summary),
        StatsFormat::Json => format!("{}\n", render_json(&input.summary)),
    };
    write_stdout(&text)?;
    if input.problems.count > 0 {
        for (line, what) in &input.problems.first {
            eprintln!("gputrace: {}:{line}: {what}", args.file.display());
        }
        let (line, what) = &input.problems.first[0];
        return Err(Failure::runtime(format!(
            "{} has {} unreadable line(s), first at line {line}: {what}; the summary covers the readable lines",
            args.file.display(),
            input.problems.count
        )));
    }
    if !input.complete {
        eprintln!(
            "gputrace: {} has no summary line at its end (cut short?); events lost are unknown",
            args.file.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn open(path: &Path) -> Result<File> {
    let f = File::open(path)
        .map_err(|e| Failure::runtime(format!("cannot open {}: {e}", path.display())))?;
    if f.metadata().map(|m| m.is_dir()).unwrap_or(false) {
        return Err(Failure::runtime(format!(
            "{} is a directory",
            path.display()
        )));
    }
    Ok(f)
}
