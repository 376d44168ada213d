//! `gputrace stats FILE`: the live summary, computed again from a timeline
//! (the reader is `sinks::timeline::read`). Unreadable lines are reported
//! with their number and what was wrong; what was readable is still
//! summarised, and the exit code is then 1. A file cut short (gputrace
//! killed between two flushes) is summarised up to the cut, said on
//! stderr, exit 0. `--folded` writes the folded
//! stacks of a `--stacks` timeline instead (weighted by host time, ns).

use std::fs::File;
use std::path::Path;
use std::process::ExitCode;

use crate::cli::StatsArgs;
use crate::cli::StatsFormat;
use crate::error::Failure;
use crate::error::Result;
use crate::outputs::summary::write_stdout;
use crate::read::read_timeline_with;
use crate::summary::render::render_json;
use crate::summary::render::render_text;
use crate::text::{printable, printable_json, printable_lines, printable_path};

pub(crate) fn run(args: &StatsArgs) -> Result<ExitCode> {
    let file = open(&args.file)?;
    let input = read_timeline_with(file, args.folded).map_err(|e| {
        Failure::runtime(format!(
            "reading {}: {}",
            printable_path(&args.file),
            printable(&e.to_string())
        ))
    })?;
    let text = match (&input.folded, args.format) {
        (Some(folded), _) => {
            let lines = folded.lines();
            if lines.is_empty() && input.problems.count == 0 {
                return Err(Failure::runtime(format!(
                    "{} has no call stacks with host time (trace with --stacks)",
                    printable_path(&args.file)
                )));
            }
            let mut text = lines.join("\n");
            text.push('\n');
            printable_lines(&text).into_owned()
        }
        // What the file holds was chosen by whoever wrote it: no control
        // or bidirectional character reaches the terminal (`text`).
        (None, StatsFormat::Text) => printable_lines(&render_text(&input.summary)).into_owned(),
        (None, StatsFormat::Json) => {
            printable_json(&format!("{}\n", render_json(&input.summary))).into_owned()
        }
    };
    let shown = printable_path(&args.file);
    write_stdout(&text)?;
    if input.problems.count > 0 {
        for (line, what) in &input.problems.first {
            crate::say!("{shown}:{line}: {}", printable(what));
        }
        let (line, what) = &input.problems.first[0];
        let unit = input.problems.unit();
        return Err(Failure::runtime(format!(
            "{shown} has {} unreadable {unit}(s), first at {unit} {line}: {}; the summary covers the readable {unit}s",
            input.problems.count,
            printable(what)
        )));
    }
    if let Some(why) = &input.cut {
        crate::say!(
            "{shown} was cut short ({why}: gputrace was stopped before it ended the file); the summary covers what it holds before the cut; events lost are unknown"
        );
    } else if !input.complete {
        crate::say!("{shown} has no summary line at its end (cut short?); events lost are unknown");
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
