//! Reading a `.jsonl` or `.json` timeline back into the summary it would
//! have given live (`gputrace stats FILE`).
//!
//! Streams the file line by line (a 1 GB file is read in bounded memory).
//! Unreadable lines are reported with their number and what was wrong; what
//! was readable is still summarised.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};

use serde_json::{Map, Value};

use super::chrome::CROSS_RANK_CAT;
use crate::aggregate::summary::Summary;
use crate::events::json::{parse_call, parse_nccl_record, NcclRecord};
use crate::events::types::LostCounts;

/// Longest line accepted; longer ones are reported as corrupt, not buffered.
const MAX_LINE: usize = 16 << 20;

/// The first problems found, and how many lines had one.
#[derive(Debug, Default)]
pub struct Problems {
    pub first: Vec<(u64, String)>,
    pub count: u64,
}

impl Problems {
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
}

enum Format {
    Jsonl,
    Chrome {
        origin: u64,
        comms: HashMap<u64, String>,
    },
}

fn lost_from(v: &Value) -> Option<LostCounts> {
    let d = v.get("lost_detail")?;
    Some(LostCounts {
        ring_full: d.get("ring_full")?.as_u64()?,
        inflight_full: d.get("inflight_full")?.as_u64()?,
        unpaired: d.get("unpaired")?.as_u64()?,
        read_failed: d.get("read_failed").and_then(Value::as_u64).unwrap_or(0),
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

/// Reads a `.jsonl` or `.json` timeline written by gputrace.
pub fn read_timeline<R: Read>(input: R) -> std::io::Result<StatsInput> {
    let mut r = BufReader::with_capacity(1 << 20, input);
    let mut summary = Summary::default();
    let mut problems = Problems::default();
    let mut complete = false;
    let mut format: Option<Format> = None;
    let mut buf = Vec::with_capacity(4096);
    let mut lineno = 0u64;
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
                Ok(v) => match parse_nccl_record(&v) {
                    Some(Ok(r)) => cross_rank(&mut summary, r),
                    Some(Err(e)) => problems.add(lineno, e),
                    None => match parse_call(&v) {
                        Ok(c) => summary.record(&c),
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
                    Ok(v) => match chrome_event(&v, *origin, comms) {
                        Ok(Some(c)) => summary.record(&c),
                        Ok(None) => {}
                        Err(e) => problems.add(lineno, e),
                    },
                    Err(e) => problems.add(lineno, describe_json_error(&e)),
                }
            }
        }
    }
    summary.unreadable = problems.count;
    Ok(StatsInput {
        summary,
        problems,
        complete,
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
) -> std::result::Result<Option<crate::events::model::Call>, String> {
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
    let mut m = Map::new();
    m.insert("ts_ns".into(), Value::from(origin + ts));
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
    parse_call(&Value::Object(m))
        .map(Some)
        .map_err(|e| e.to_string())
}
