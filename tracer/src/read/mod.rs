//! Reading a timeline back into the summary it would have given live
//! (`gputrace stats FILE`). [`read_timeline`] tells the format from the
//! file's first bytes: `.jsonl` and `.json` are read here, `.jsonl.zst`
//! and `.pftrace` in [`formats`].
//!
//! Streams the file line by line (a 1 GB file is read in bounded memory).
//! Unreadable lines are reported with their number and what was wrong; what
//! was readable is still summarised.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};

use serde_json::{Map, Value};

use crate::model::call::Call;
use crate::model::types::LostCounts;
use crate::schema::parse::parse_call;
use crate::schema::parse::take_api_names_over;
use crate::stacks::table::FoldedStacks;
use crate::stacks::table::StackTable;
use crate::summary::Summary;

use crate::model::record::is_record;
use crate::outputs::timeline::record::{jsonl_of_chrome, CHROME_CATEGORY, CHROME_FLOW_CATEGORY};
use crate::read::records::{frames_of, RecordReader};

pub(crate) mod formats;
pub(crate) mod records;

/// Longest line accepted; longer ones are reported as corrupt, not buffered.
const MAX_LINE: usize = 16 << 20;
/// Process names a Chrome trace may give (its metadata events), at most,
/// and the characters kept of each (a command name is 15).
const MAX_PROCESS_NAMES: usize = 1 << 16;
const MAX_NAME_CHARS: usize = 256;

/// The first problems found, and how many lines had one.
#[derive(Debug, Default)]
pub struct Problems {
    pub first: Vec<(u64, String)>,
    pub count: u64,
    /// What the numbers count: "line" (the default) or "packet".
    pub unit: &'static str,
}

impl Problems {
    pub fn unit(&self) -> &'static str {
        if self.unit.is_empty() {
            "line"
        } else {
            self.unit
        }
    }

    fn add(&mut self, line: u64, what: String) {
        self.count += 1;
        if self.first.len() < 5 {
            self.first.push((line, what));
        }
    }
}

/// What reading a timeline gave.
pub struct StatsInput {
    pub summary: Summary,
    pub problems: Problems,
    /// Whether the file ended with gputrace's summary (a complete file).
    pub complete: bool,
    /// Why the file is known to be cut short, when its end is cut through
    /// (a last line without its end, a zstd frame without its end, half a
    /// packet): gputrace was stopped (SIGKILL) between two flushes. What
    /// comes before is summarised; the cut entry is not counted unreadable.
    pub cut: Option<String>,
    /// Entries that are not calls (`sinks::timeline::record`), skipped.
    pub records: u64,
    /// Host time per distinct stack (`--folded`), when asked for.
    pub folded: Option<FoldedStacks>,
}

/// Counts one call read back.
fn record(summary: &mut Summary, folded: &mut Option<FoldedStacks>, c: &Call) {
    summary.record(c);
    if let (Some(f), Some(s)) = (folded.as_mut(), &c.stack) {
        f.add(&s.frames, c.dur_ns.unwrap_or(0));
    }
}

enum Format {
    Jsonl,
    Chrome {
        origin: u64,
        comms: HashMap<u64, String>,
    },
}

pub(crate) fn lost_from(v: &Value) -> Option<LostCounts> {
    let d = v.get("lost_detail")?;
    Some(LostCounts {
        ring_full: d.get("ring_full")?.as_u64()?,
        inflight_full: d.get("inflight_full")?.as_u64()?,
        unpaired: d.get("unpaired")?.as_u64()?,
        read_failed: d.get("read_failed").and_then(Value::as_u64).unwrap_or(0),
        stacks_dropped: d.get("stacks_dropped").and_then(Value::as_u64).unwrap_or(0),
        counts_full: d.get("counts_full").and_then(Value::as_u64).unwrap_or(0),
    })
}

/// Reads one line into `buf` without holding more than [`MAX_LINE`] bytes.
/// Returns Ok(None) at EOF, Ok(Some(true)) for a complete line, Ok(Some(false))
/// for an over-long one (skipped).
fn read_line<R: BufRead>(r: &mut R, buf: &mut Vec<u8>) -> std::io::Result<Option<bool>> {
    buf.clear();
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(if buf.is_empty() && !too_long {
                None
            } else {
                Some(!too_long)
            });
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            if buf.len() + take > MAX_LINE {
                too_long = true;
                buf.clear();
            } else {
                buf.extend_from_slice(&chunk[..take]);
            }
        }
        r.consume(take);
        if done {
            return Ok(Some(!too_long));
        }
    }
}

/// Reads a timeline written by gputrace, whatever its format.
pub fn read_timeline<R: Read>(input: R) -> std::io::Result<StatsInput> {
    read_timeline_with(input, false)
}

/// Reads a timeline of any format; `folded`: also sum host time per
/// distinct stack (text formats: JSONL, .jsonl.zst, Chrome).
pub fn read_timeline_with<R: Read>(input: R, folded: bool) -> std::io::Result<StatsInput> {
    formats::read_any(input, folded)
}

/// What reading a text timeline has gathered so far.
struct TextReader {
    summary: Summary,
    problems: Problems,
    records: RecordReader,
    folded: Option<FoldedStacks>,
    /// Chrome traces carry each call's frames inline: interned here.
    inline_stacks: StackTable,
    complete: bool,
    /// The line being read is the file's last and has no newline.
    unterminated: bool,
    cut: Option<String>,
}

impl TextReader {
    fn call(&mut self, c: &Call) {
        record(&mut self.summary, &mut self.folded, c);
    }

    /// The summary line (JSONL) or object (Chrome): the file is complete.
    fn end(&mut self, v: &Value) {
        self.complete = true;
        if let Some(l) = lost_from(v) {
            self.summary.lost = l;
        }
    }

    /// A line that is not JSON: unreadable, or, when it is the last and
    /// ends mid-way, the file cut short there.
    fn bad_json(&mut self, lineno: u64, e: &serde_json::Error) {
        if self.unterminated && e.is_eof() {
            self.cut = Some(format!("its last line, {lineno}, ends mid-way"));
        } else {
            self.problems.add(lineno, describe_json_error(e));
        }
    }

    fn jsonl_line(&mut self, lineno: u64, v: Value) {
        if v.get("type").and_then(Value::as_str) == Some("summary") {
            return self.end(&v);
        }
        if is_record(&v) {
            if let Err(e) = self.records.record(&v, &mut self.summary) {
                self.problems.add(lineno, e);
            }
            return;
        }
        match parse_call(&v) {
            Ok(mut c) => match self.records.complete(&mut c, v.get("stack_id")) {
                Ok(()) => self.call(&c),
                Err(e) => self.problems.add(lineno, e),
            },
            Err(e) => self.problems.add(lineno, e.to_string()),
        }
    }

    fn chrome_line(
        &mut self,
        lineno: u64,
        text: &str,
        origin: u64,
        comms: &mut HashMap<u64, String>,
    ) {
        let t = text.trim_start_matches(',').trim_end_matches(',');
        if t == "]," || t == "]" || t.starts_with("\"traceEvents\"") {
            return;
        }
        if let Some(rest) = t.strip_prefix("\"gputraceSummary\":") {
            let rest = rest.strip_suffix('}').unwrap_or(rest);
            match serde_json::from_str::<Value>(rest) {
                Ok(v) => self.end(&v),
                Err(e) => self.problems.add(lineno, describe_json_error(&e)),
            }
            return;
        }
        let v = match serde_json::from_str::<Value>(t) {
            Ok(v) => v,
            Err(e) => return self.bad_json(lineno, &e),
        };
        match v.get("cat").and_then(Value::as_str) {
            Some(CHROME_CATEGORY) => match jsonl_of_chrome(&v, origin) {
                Some(r) => {
                    if let Err(e) = self.records.record(&r, &mut self.summary) {
                        self.problems.add(lineno, e);
                    }
                }
                None => self
                    .problems
                    .add(lineno, "a record event without its fields".into()),
            },
            Some(CHROME_FLOW_CATEGORY) => {}
            _ => match chrome_event(&v, origin, comms, &mut self.inline_stacks) {
                Ok(Some(mut c)) => match self.records.complete(&mut c, None) {
                    Ok(()) => self.call(&c),
                    Err(e) => self.problems.add(lineno, e),
                },
                Ok(None) => {}
                Err(e) => self.problems.add(lineno, e),
            },
        }
    }
}

/// Reads a `.jsonl` or `.json` timeline.
pub(crate) fn read_text_timeline<R: Read>(input: R, folded: bool) -> std::io::Result<StatsInput> {
    let mut r = BufReader::with_capacity(1 << 20, input);
    let mut st = TextReader {
        summary: Summary::default(),
        problems: Problems::default(),
        records: RecordReader::default(),
        folded: folded.then(FoldedStacks::new),
        inline_stacks: StackTable::default(),
        complete: false,
        unterminated: false,
        cut: None,
    };
    let mut format: Option<Format> = None;
    let mut buf = Vec::with_capacity(4096);
    // Counted afresh for this file.
    let _ = take_api_names_over();
    let mut lineno = 0u64;
    while let Some(whole) = read_line(&mut r, &mut buf)? {
        lineno += 1;
        st.unterminated = buf.last() != Some(&b'\n');
        if !whole {
            st.problems
                .add(lineno, format!("line longer than {} MiB", MAX_LINE >> 20));
            continue;
        }
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t.trim(),
            Err(_) => {
                st.problems.add(lineno, "not UTF-8".into());
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        if format.is_none() {
            if text.starts_with("{\"displayTimeUnit\"") || text.contains("\"traceEvents\"") {
                match chrome_origin(text) {
                    Some(origin) => {
                        format = Some(Format::Chrome {
                            origin,
                            comms: HashMap::new(),
                        });
                        continue;
                    }
                    None => {
                        st.problems.add(
                            lineno,
                            "a Chrome trace without gputrace's otherData.origin_unix_ns header"
                                .into(),
                        );
                        break;
                    }
                }
            }
            format = Some(Format::Jsonl);
        }
        match format.as_mut().expect("set above") {
            Format::Jsonl => match serde_json::from_str::<Value>(text) {
                Ok(v) => st.jsonl_line(lineno, v),
                Err(e) => st.bad_json(lineno, &e),
            },
            Format::Chrome { origin, comms } => st.chrome_line(lineno, text, *origin, comms),
        }
    }
    st.summary.unreadable = st.problems.count;
    st.summary.api_names_over = take_api_names_over();
    st.summary.apply_estimates();
    Ok(StatsInput {
        summary: st.summary,
        problems: st.problems,
        complete: st.complete,
        cut: st.cut,
        folded: st.folded,
        records: st.records.read,
    })
}

fn describe_json_error(e: &serde_json::Error) -> String {
    if e.is_eof() {
        format!("truncated JSON ({e})")
    } else {
        format!("invalid JSON ({e})")
    }
}

fn chrome_origin(header: &str) -> Option<u64> {
    let i = header.find("\"origin_unix_ns\":")? + "\"origin_unix_ns\":".len();
    let digits: String = header[i..]
        .chars()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    digits.parse().ok()
}

/// A Chrome trace slice back into the JSONL event shape, then a call.
fn chrome_event(
    v: &Value,
    origin: u64,
    comms: &mut HashMap<u64, String>,
    stacks: &mut StackTable,
) -> std::result::Result<Option<Call>, String> {
    let ph = v
        .get("ph")
        .and_then(Value::as_str)
        .ok_or("event without `ph`")?;
    let pid = v
        .get("pid")
        .and_then(Value::as_u64)
        .ok_or("event without `pid`")?;
    match ph {
        "M" => {
            if v.get("name").and_then(Value::as_str) == Some("process_name") {
                if let Some(n) = v.pointer("/args/name").and_then(Value::as_str) {
                    if comms.len() >= MAX_PROCESS_NAMES && !comms.contains_key(&pid) {
                        return Err(format!(
                            "over {MAX_PROCESS_NAMES} processes named (this name is not kept)"
                        ));
                    }
                    comms.insert(pid, n.chars().take(MAX_NAME_CHARS).collect());
                }
            }
            return Ok(None);
        }
        "C" => return Ok(None),
        "X" | "i" => {}
        other => return Err(format!("unexpected event phase `{other}`")),
    }
    let us_to_ns = |x: &Value| x.as_f64().map(|f| (f * 1000.0).round() as u64);
    let ts = v
        .get("ts")
        .and_then(us_to_ns)
        .ok_or("event without a numeric `ts`")?;
    let dur = if ph == "X" {
        Some(
            v.get("dur")
                .and_then(us_to_ns)
                .ok_or("slice without a numeric `dur`")?,
        )
    } else {
        None
    };
    let mut args = v
        .get("args")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let ret = args.remove("ret").unwrap_or(Value::Null);
    let stack = match args.remove("stack") {
        None => None,
        Some(f) => {
            Some(stacks.intern(frames_of(Some(&f)).ok_or("`args.stack` is not a list of strings")?))
        }
    };
    let mut m = Map::new();
    // A hostile `ts` must not overflow (a panic in debug builds, a wrong
    // time in release ones).
    let ts_ns = origin
        .checked_add(ts)
        .ok_or("`ts` out of range (past the year 2554)")?;
    m.insert("ts_ns".into(), Value::from(ts_ns));
    m.insert("dur_ns".into(), dur.map_or(Value::Null, Value::from));
    m.insert("pid".into(), Value::from(pid));
    m.insert(
        "tid".into(),
        v.get("tid").cloned().unwrap_or(Value::from(pid)),
    );
    m.insert(
        "comm".into(),
        Value::from(comms.get(&pid).cloned().unwrap_or_else(|| "?".into())),
    );
    m.insert(
        "api".into(),
        v.get("name").cloned().ok_or("event without `name`")?,
    );
    m.insert("ret".into(), ret);
    m.insert("args".into(), Value::Object(args));
    let mut c = parse_call(&Value::Object(m)).map_err(|e| e.to_string())?;
    c.stack = stack;
    Ok(Some(c))
}
