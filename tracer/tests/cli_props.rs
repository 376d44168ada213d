//! Issue 14: the command-line parsers under property tests. Whatever they
//! are given, they answer (a value or a message), never panic; durations
//! at and past their limits are either exact or refused.

use std::time::Duration;

use clap::Parser;
use gputrace::cli::Cli;
use gputrace::units::parse_duration;
use proptest::prelude::*;

/// Pieces a command line is built from: every option, and values good and bad.
const WORDS: &[&str] = &[
    "--pid",
    "--all",
    "--duration",
    "--output",
    "--summary",
    "--summary-file",
    "--print",
    "--probes",
    "--libcuda",
    "--libnccl",
    "--",
    "top",
    "stats",
    "list",
    "daemon",
    "--interval",
    "--listen",
    "--output-dir",
    "--max-file-mb",
    "--max-files",
    "--keep-exited",
    "--format",
    "1",
    "0",
    "-1",
    "4294967296",
    "1,2",
    ",",
    "",
    "10s",
    "1e30",
    "NaN",
    "-5s",
    "99999999999h",
    "t.jsonl",
    "t.json",
    "t.txt",
    "/",
    "launch",
    "launch:args",
    "bogus:args",
    "127.0.0.1:0",
    "[::1]:9464",
    "text",
    "json",
    "none",
    "\u{0}",
    "é",
    "--pid=1",
    "--duration=1",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn durations_never_panic(s in ".{0,40}") {
        let _ = parse_duration(&s);
    }

    /// Whole seconds, in plain and `s` form: exact, up to what Duration holds.
    #[test]
    fn whole_seconds_are_exact(n in any::<u64>()) {
        prop_assert_eq!(parse_duration(&format!("{n}s")).ok(), Some(Duration::from_secs(n)));
    }

    /// Plain seconds as floats: refused when negative or too large, else close.
    #[test]
    fn float_seconds(f in any::<f64>()) {
        match parse_duration(&format!("{f}")) {
            Ok(d) => prop_assert!(f >= 0.0 && (d.as_secs_f64() - f).abs() <= f * 1e-9 + 1e-9),
            Err(e) => prop_assert!(
                !(0.0..1.8e19).contains(&f) && e.contains("not a duration"),
                "{} refused: {}", f, e
            ),
        }
    }

    #[test]
    fn command_lines_never_panic(words in proptest::collection::vec(proptest::sample::select(WORDS), 0..8)) {
        let mut argv = vec!["gputrace"];
        argv.extend(words);
        let _ = Cli::try_parse_from(argv);
    }
}
