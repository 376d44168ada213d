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
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::graphs::json::parse_record;
use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::graph::ExecContents;
use crate::model::stack::CallStack;
use crate::model::types::LostCounts;
use crate::nccl::json::parse_nccl_record;
use crate::nccl::json::NcclRecord;
use crate::outputs::timeline::chrome::CROSS_RANK_CAT;
use crate::schema::parse::parse_call;
use crate::stacks::table::FoldedStacks;
use crate::stacks::table::StackTable;
use crate::summary::Summary;

/// Executable graphs remembered while reading, at most.
const MAX_GRAPHS: usize = 1 << 16;
use crate::outputs::timeline::record::Record;
use crate::outputs::timeline::record::CHROME_CATEGORY;

pub(crate) mod formats;

/// Longest line accepted; longer ones are reported as corrupt, not buffered.
const MAX_LINE: usize = 16 << 20;

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
    /// Entries that are not calls (`sinks::timeline::record`), skipped.
    pub records: u64,
    /// Host time per distinct stack (`--folded`), when asked for.
    pub folded: Option<FoldedStacks>,
}

/// The stacks of a timeline: JSONL `stack` records by id; Chrome traces
/// carry each call's frames inline, interned here.
#[derive(Default)]
struct Stacks {
    by_id: HashMap<u64, Arc<CallStack>>,
    inline: StackTable,
}

/// A JSONL `{"type":"stack","id":N,"frames":[..]}` record.
fn stack_record(v: &Value) -> Result<Arc<CallStack>, String> {
    let id = v
        .get("id")
        .and_then(Value::as_u64)
        .and_then(|i| u32::try_from(i).ok())
        .ok_or("stack record without a numeric `id`")?;
    let frames = frames_of(v.get("frames")).ok_or("stack record without `frames` strings")?;
    Ok(Arc::new(CallStack {
        id,
        frames: frames.into(),
    }))
}

fn frames_of(v: Option<&Value>) -> Option<Vec<Arc<str>>> {
    v?.as_array()?
        .iter()
        .map(|f| f.as_str().map(Arc::from))
        .collect()
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

/// Reads a `.jsonl` or `.json` timeline.
pub(crate) fn read_text_timeline<R: Read>(input: R, folded: bool) -> std::io::Result<StatsInput> {
    let mut r = BufReader::with_capacity(1 << 20, input);
    let mut folded = folded.then(FoldedStacks::new);
    let mut stacks = Stacks::default();
    let mut summary = Summary::default();
    let mut problems = Problems::default();
    let mut complete = false;
    let mut records = 0u64;
    let mut format: Option<Format> = None;
    let mut buf = Vec::with_capacity(4096);
    let mut lineno = 0u64;
    // What each executable graph runs, by (pid, exec), from graph records.
    let mut graphs: HashMap<(u32, u64), Option<Arc<ExecContents>>> = HashMap::new();
    while let Some(whole) = read_line(&mut r, &mut buf)? {
        lineno += 1;
        if !whole {
            problems.add(lineno, format!("line longer than {} MiB", MAX_LINE >> 20));
            continue;
        }
        let text = match std::str::from_utf8(&buf) {
            Ok(t) => t.trim(),
            Err(_) => {
                problems.add(lineno, "not UTF-8".into());
                continue;
            }
        };
        if text.is_empty() {
            continue;
        }
        if format.is_none() {
            format = Some(
                if text.starts_with("{\"displayTimeUnit\"") || text.contains("\"traceEvents\"") {
                    match chrome_origin(text) {
                        Some(origin) => Format::Chrome {
                            origin,
                            comms: HashMap::new(),
                        },
                        None => {
                            problems.add(
                                lineno,
                                "a Chrome trace without gputrace's otherData.origin_unix_ns header"
                                    .into(),
                            );
                            break;
                        }
                    }
                } else {
                    Format::Jsonl
                },
            );
            if matches!(format, Some(Format::Chrome { .. })) {
                continue;
            }
        }
        match format.as_mut().expect("set above") {
            Format::Jsonl => match serde_json::from_str::<Value>(text) {
                Ok(v) if v.get("type").and_then(Value::as_str) == Some("summary") => {
                    complete = true;
                    if let Some(l) = lost_from(&v) {
                        summary.lost = l;
                    }
                }
                Ok(v) if v.get("type").and_then(Value::as_str) == Some("graph") => {
                    match parse_record(&v) {
                        Ok(r) => {
                            if graphs.len() >= MAX_GRAPHS {
                                graphs.clear();
                            }
                            graphs.insert((r.pid, r.exec), r.contents);
                        }
                        Err(e) => problems.add(lineno, e.to_string()),
                    }
                }
                // `--overhead-budget` windows: read back for the estimates
                // (a record without their fields is skipped like any other).
                Ok(v) if v.get("type").and_then(Value::as_str) == Some("sampling") => {
                    records += 1;
                    if v.get("on_fraction").is_some() {
                        summary
                            .sampling
                            .get_or_insert_with(Default::default)
                            .add_record(&v);
                    }
                }
                Ok(v) if v.get("type").and_then(Value::as_str) == Some("stack") => {
                    match stack_record(&v) {
                        Ok(st) => {
                            stacks.by_id.insert(u64::from(st.id), st);
                        }
                        Err(e) => problems.add(lineno, e),
                    }
                }
                Ok(v) => match parse_nccl_record(&v) {
                    Some(Ok(r)) => cross_rank(&mut summary, r),
                    Some(Err(e)) => problems.add(lineno, e),
                    // Other kinds this reader does not know: skipped, counted.
                    None if Record::is_jsonl_record(&v) => records += 1,
                    None => match parse_call(&v) {
                        Ok(mut c) => {
                            // What a graph launch runs: from the record before it.
                            if let Args::Graph(g) = &mut c.args {
                                g.contents = graphs.get(&(c.pid, g.exec)).cloned().flatten();
                            }
                            match v.get("stack_id") {
                                None | Some(Value::Null) => record(&mut summary, &mut folded, &c),
                                Some(id) => match id.as_u64().and_then(|i| stacks.by_id.get(&i)) {
                                    Some(st) => {
                                        c.stack = Some(st.clone());
                                        record(&mut summary, &mut folded, &c);
                                    }
                                    None => problems.add(
                                        lineno,
                                        format!("`stack_id` {id} names no stack record before it"),
                                    ),
                                },
                            }
                        }
                        Err(e) => problems.add(lineno, e.to_string()),
                    },
                },
                Err(e) => problems.add(lineno, describe_json_error(&e)),
            },
            Format::Chrome { origin, comms } => {
                let t = text.trim_start_matches(',').trim_end_matches(',');
                if t == "]," || t == "]" || t.starts_with("\"traceEvents\"") {
                    continue;
                }
                if let Some(rest) = t.strip_prefix("\"gputraceSummary\":") {
                    let rest = rest.strip_suffix('}').unwrap_or(rest);
                    match serde_json::from_str::<Value>(rest) {
                        Ok(v) => {
                            complete = true;
                            if let Some(l) = lost_from(&v) {
                                summary.lost = l;
                            }
                        }
                        Err(e) => problems.add(lineno, describe_json_error(&e)),
                    }
                    continue;
                }
                match serde_json::from_str::<Value>(t) {
                    Ok(v) if v.get("cat").and_then(Value::as_str) == Some(CROSS_RANK_CAT) => {
                        match v.get("args").and_then(parse_nccl_record) {
                            Some(Ok(r)) => cross_rank(&mut summary, r),
                            Some(Err(e)) => problems.add(lineno, e),
                            None => {
                                problems.add(lineno, "a cross-rank event without its record".into())
                            }
                        }
                    }
                    Ok(v) if v.get("cat").and_then(Value::as_str) == Some(CHROME_CATEGORY) => {
                        records += 1;
                        // `--overhead-budget` periods: the estimates, as from JSONL.
                        if v.get("name").and_then(Value::as_str) == Some("sampling") {
                            match Record::jsonl_of_chrome(&v, *origin) {
                                Some(r) if r.get("on_fraction").is_some() => summary
                                    .sampling
                                    .get_or_insert_with(Default::default)
                                    .add_record(&r),
                                _ => {}
                            }
                        }
                    }
                    Ok(v) => match chrome_event(&v, *origin, comms, &mut stacks.inline) {
                        Ok(Some(c)) => record(&mut summary, &mut folded, &c),
                        Ok(None) => {}
                        Err(e) => problems.add(lineno, e),
                    },
                    Err(e) => problems.add(lineno, describe_json_error(&e)),
                }
            }
        }
    }
    summary.unreadable = problems.count;
    summary.apply_estimates();
    Ok(StatsInput {
        summary,
        problems,
        complete,
        folded,
        records,
    })
}

/// A cross-rank record read back: stalls are kept as said; collectives
/// are matched again from the calls (so they need nothing here).
fn cross_rank(summary: &mut Summary, r: NcclRecord) {
    match r {
        NcclRecord::Collective(_) => {}
        NcclRecord::Stall(s) => summary.nccl.stall(&s),
        NcclRecord::StallOver(e) => summary.nccl.stall_over(&e),
    }
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
                    comms.insert(pid, n.to_string());
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
