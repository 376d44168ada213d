//! The `.pftrace` writer: a stream of TracePackets, nothing held but the
//! interning tables (bounded).
//!
//! Layout, as the Perfetto SDK writes it:
//! - sequence 1 (no incremental state): the clock snapshot that makes
//!   REALTIME the trace clock, gputrace's header attributes, the track
//!   descriptors (a process track per pid named after the process, a thread
//!   track per thread, counter tracks for device memory and call rates), the
//!   rate counters, and at the end the summary attributes;
//! - one sequence per traced thread: a first packet that clears the
//!   incremental state, sets the defaults (the thread's track, the
//!   sequence's delta-encoded clock) and anchors that clock; then per call a
//!   SLICE_BEGIN and a SLICE_END (an INSTANT for `:args` calls), each with
//!   SEQ_NEEDS_INCREMENTAL_STATE, names and strings interned on the
//!   sequence. Calls of one thread come in order, so timestamps are small
//!   deltas; one that starts before the last timestamp (a call nested in
//!   another) carries an absolute REALTIME timestamp instead.

use std::io::Write;
use std::sync::Arc;

use prost::Message as _;
use rustc_hash::FxHashMap;
use serde_json::Value;

use crate::model::call::Args;
use crate::model::call::Call;
use crate::outputs::timeline::perfetto::args::annotate;
use crate::outputs::timeline::perfetto::args::AnnotationSink;
use crate::outputs::timeline::perfetto::intern::interned_entry;
use crate::outputs::timeline::perfetto::intern::Annotator;
use crate::outputs::timeline::perfetto::intern::Interner;
use crate::outputs::timeline::perfetto::proto::*;
use crate::outputs::timeline::perfetto::wire;

mod records;
mod tracks;

/// The meta sequence (descriptors, counters, attributes).
const META_SEQ: u32 = 1;
/// Interned bytes after which a sequence's state is cleared and rebuilt:
/// bounds the writer's (and a reader's) memory.
const INTERN_LIMIT: usize = 1 << 20;
/// Sequences kept; the least recently used one is dropped past this.
const MAX_SEQUENCES: usize = 1024;
/// Interned bytes of all sequences together (counted as a sequence's
/// bytes are); past it the least recently used sequences are dropped. A
/// reader holds what the writer holds: `perfetto::sequences` allows twice
/// this.
pub(super) const MAX_INTERNED_TOTAL: usize = 32 << 20;
/// The call-rate counters' period.
const RATE_PERIOD_NS: u64 = 100_000_000;
/// Packets are deflated in bundles of this many bytes (Perfetto wants a
/// compressed packet under 512 KB; deflate never grows data by half).
const BUNDLE: usize = 256 << 10;
/// Header attribute key naming the format (what the reader checks).
pub(super) const FORMAT_KEY: &str = "gputrace.format";
pub(super) const FORMAT_VERSION: i64 = 1;
/// Name prefix of the lanes of non-call records ("gputrace sampling").
pub(super) const RECORD_TRACK_PREFIX: &str = "gputrace ";
/// Trailer attribute key holding the JSON summary.
pub(super) const SUMMARY_KEY: &str = "gputrace.summary";

struct Sequence {
    id: u32,
    track: u64,
    /// The delta clock's value (absolute ns).
    last_ts: u64,
    last_use: u64,
    interned: Interner,
}

struct Rates {
    calls_track: u64,
    launches_track: u64,
    start: u64,
    calls: u64,
    launches: u64,
}

struct Process {
    track: u64,
    comm: Arc<str>,
    memory_track: Option<u64>,
    rates: Option<Rates>,
}

/// Encodes one event's annotations, interning as it goes.
/// Writes gputrace's calls as a Perfetto trace into `out`.
pub struct PerfettoWriter<W: Write> {
    out: W,
    pkt: Vec<u8>,
    event: Vec<u8>,
    annotations: Vec<u8>,
    new_interned: Vec<u8>,
    one: Vec<u8>,
    text: String,
    next_uuid: u64,
    next_seq: u32,
    processes: FxHashMap<u32, Process>,
    /// The lane of each (process, lane name) of records.
    record_tracks: FxHashMap<(Option<u32>, Arc<str>), u64>,
    /// Stacks whose `stack` record the file holds.
    stacks: rustc_hash::FxHashSet<u32>,
    /// Flow ids given so far.
    flows: u64,
    threads: FxHashMap<(u32, u32), Sequence>,
    /// The interned bytes of every sequence in `threads`.
    interned_total: usize,
    uses: u64,
    thread_names: bool,
    /// Framed packets waiting to be deflated (when compressing).
    bundle: Option<Vec<u8>>,
    written: u64,
    events: u64,
}

fn thread_name(pid: u32, tid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm")).ok()?;
    Some(s.trim_end().to_string())
}

impl<W: Write> PerfettoWriter<W> {
    /// Starts the trace. `origin_ns`: when tracing began (Unix ns).
    /// `thread_names`: name thread tracks from `/proc/PID/task/TID/comm`
    /// (while the thread lives), else leave them to Perfetto ("Thread N").
    /// `compress`: deflate the packets in bundles (`compressed_packets`,
    /// as `perfetto --compress` writes them; Perfetto UI and
    /// trace_processor expand them), about a third of the size.
    pub fn new(
        out: W,
        origin_ns: u64,
        thread_names: bool,
        compress: bool,
    ) -> std::io::Result<Self> {
        let mut w = Self {
            out,
            pkt: Vec::with_capacity(1024),
            event: Vec::with_capacity(1024),
            annotations: Vec::with_capacity(1024),
            new_interned: Vec::with_capacity(1024),
            one: Vec::with_capacity(256),
            text: String::with_capacity(512),
            next_uuid: 1,
            next_seq: META_SEQ + 1,
            processes: FxHashMap::default(),
            record_tracks: FxHashMap::default(),
            stacks: Default::default(),
            flows: 0,
            threads: FxHashMap::default(),
            interned_total: 0,
            uses: 0,
            thread_names,
            bundle: compress.then(|| Vec::with_capacity(BUNDLE + 4096)),
            written: 0,
            events: 0,
        };
        w.message(&TracePacket {
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![Clock {
                    clock_id: Some(CLOCK_REALTIME),
                    timestamp: Some(origin_ns),
                    ..Default::default()
                }],
                primary_trace_clock: Some(CLOCK_REALTIME as i32),
            }),
            trusted_packet_sequence_id: Some(META_SEQ),
            ..Default::default()
        })?;
        w.message(&TracePacket {
            trace_attributes: Some(TraceAttributes {
                attribute: vec![
                    attr_long(FORMAT_KEY, FORMAT_VERSION),
                    attr_str("gputrace.version", env!("CARGO_PKG_VERSION")),
                    attr_long("gputrace.origin_unix_ns", origin_ns as i64),
                ],
            }),
            trusted_packet_sequence_id: Some(META_SEQ),
            ..Default::default()
        })?;
        Ok(w)
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.written
    }

    /// Calls written so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    fn uuid(&mut self) -> u64 {
        let u = self.next_uuid;
        self.next_uuid += 1;
        u
    }

    /// One packet from a prost message (the rare ones).
    fn message(&mut self, p: &TracePacket) -> std::io::Result<()> {
        self.pkt.clear();
        p.encode(&mut self.pkt).expect("a Vec grows");
        self.flush_packet()
    }

    /// Frames `self.pkt` as `Trace.packet` and writes it.
    fn flush_packet(&mut self) -> std::io::Result<()> {
        let mut head = [0u8; 11];
        let mut n = 1;
        head[0] = 0x0a; // field 1, length-delimited
        let mut len = self.pkt.len() as u64;
        while len >= 0x80 {
            head[n] = (len as u8) | 0x80;
            len >>= 7;
            n += 1;
        }
        head[n] = len as u8;
        n += 1;
        if let Some(bundle) = &mut self.bundle {
            bundle.extend_from_slice(&head[..n]);
            bundle.extend_from_slice(&self.pkt);
            if bundle.len() >= BUNDLE {
                self.deflate_bundle()?;
            }
            return Ok(());
        }
        self.out.write_all(&head[..n])?;
        self.out.write_all(&self.pkt)?;
        self.written += (n + self.pkt.len()) as u64;
        Ok(())
    }

    /// Writes the bundled packets as one `compressed_packets` packet.
    fn deflate_bundle(&mut self) -> std::io::Result<()> {
        let Some(mut bundle) = self.bundle.take() else {
            return Ok(());
        };
        if !bundle.is_empty() {
            let mut z = flate2::write::ZlibEncoder::new(
                Vec::with_capacity(bundle.len() / 2),
                flate2::Compression::fast(),
            );
            z.write_all(&bundle)?;
            let packed = z.finish()?;
            self.pkt.clear();
            wire::bytes(&mut self.pkt, 50, &packed);
            self.flush_packet()?;
            bundle.clear();
        }
        self.bundle = Some(bundle);
        Ok(())
    }

    fn descriptor(&mut self, d: TrackDescriptor) -> std::io::Result<()> {
        self.message(&TracePacket {
            track_descriptor: Some(d),
            trusted_packet_sequence_id: Some(META_SEQ),
            ..Default::default()
        })
    }

    /// The thread's sequence, started (or restarted) as needed.
    fn sequence(&mut self, c: &Call) -> std::io::Result<()> {
        self.uses += 1;
        let uses = self.uses;
        let key = (c.pid, c.tid);
        while self.interned_total > MAX_INTERNED_TOTAL && self.drop_oldest(key) {}
        if let Some(s) = self.threads.get_mut(&key) {
            s.last_use = uses;
            if s.interned.bytes < INTERN_LIMIT {
                return Ok(());
            }
            let (id, track, ts) = (s.id, s.track, s.last_ts);
            self.interned_total -= s.interned.bytes;
            s.interned = Interner::default();
            return self.start_sequence(id, track, ts, false);
        }
        if self.threads.len() >= MAX_SEQUENCES {
            self.drop_oldest(key);
        }
        let track = self.uuid();
        let id = self.next_seq;
        self.next_seq += 1;
        let name = if self.thread_names {
            thread_name(c.pid, c.tid)
        } else {
            None
        };
        self.descriptor(TrackDescriptor {
            uuid: Some(track),
            thread: Some(ThreadDescriptor {
                pid: Some(c.pid as i32),
                tid: Some(i64::from(c.tid)),
                thread_name: name,
            }),
            ..Default::default()
        })?;
        self.threads.insert(
            (c.pid, c.tid),
            Sequence {
                id,
                track,
                last_ts: c.ts_ns,
                last_use: uses,
                interned: Interner::default(),
            },
        );
        self.start_sequence(id, track, c.ts_ns, true)
    }

    /// Clears the sequence's incremental state, sets its defaults and
    /// anchors its delta clock at `ts`.
    /// The interned bytes of every sequence held.
    #[cfg(test)]
    pub(super) fn interned_total(&self) -> usize {
        self.interned_total
    }

    /// Drops the least recently used sequence but `keep`'s (its thread
    /// starts a new one when it calls again); false when there is none.
    fn drop_oldest(&mut self, keep: (u32, u32)) -> bool {
        let oldest = self
            .threads
            .iter()
            .filter(|(k, _)| **k != keep)
            .min_by_key(|(_, s)| s.last_use)
            .map(|(k, _)| *k);
        match oldest.and_then(|k| self.threads.remove(&k)) {
            Some(s) => {
                self.interned_total -= s.interned.bytes;
                true
            }
            None => false,
        }
    }

    fn start_sequence(&mut self, id: u32, track: u64, ts: u64, first: bool) -> std::io::Result<()> {
        self.message(&TracePacket {
            trusted_packet_sequence_id: Some(id),
            sequence_flags: Some(SEQ_INCREMENTAL_STATE_CLEARED),
            first_packet_on_sequence: first.then_some(true),
            trace_packet_defaults: Some(TracePacketDefaults {
                timestamp_clock_id: Some(CLOCK_INCREMENTAL),
                track_event_defaults: Some(TrackEventDefaults {
                    track_uuid: Some(track),
                }),
            }),
            clock_snapshot: Some(ClockSnapshot {
                clocks: vec![
                    Clock {
                        clock_id: Some(CLOCK_REALTIME),
                        timestamp: Some(ts),
                        ..Default::default()
                    },
                    Clock {
                        clock_id: Some(CLOCK_INCREMENTAL),
                        timestamp: Some(ts),
                        is_incremental: Some(true),
                        ..Default::default()
                    },
                ],
                primary_trace_clock: None,
            }),
            ..Default::default()
        })
    }

    /// Starts a packet on the thread's sequence at `ts`.
    fn begin_packet(pkt: &mut Vec<u8>, s: &mut Sequence, ts: u64) {
        pkt.clear();
        if ts >= s.last_ts {
            wire::uint(pkt, 8, ts - s.last_ts);
            s.last_ts = ts;
        } else {
            wire::uint(pkt, 8, ts);
            wire::uint(pkt, 58, u64::from(CLOCK_REALTIME));
        }
        wire::uint(pkt, 10, u64::from(s.id));
        wire::uint(pkt, 13, u64::from(SEQ_NEEDS_INCREMENTAL_STATE));
    }

    /// Writes one call (and the process's device memory in use after it,
    /// when the call changed it).
    pub fn write(&mut self, c: &Call, device_bytes: Option<u64>) -> std::io::Result<()> {
        self.process(c)?;
        self.rates(c)?;
        self.stack_once(c)?;
        self.sequence(c)?;
        let s = self
            .threads
            .get_mut(&(c.pid, c.tid))
            .expect("started above");

        // The begin (or instant) event.
        self.new_interned.clear();
        self.annotations.clear();
        let before = s.interned.bytes;
        let name_iid = match s.interned.names.get(c.api) {
            Some(&iid) => iid,
            None => {
                let iid = s.interned.names.len() as u64 + 1;
                s.interned.names.insert(c.api, iid);
                s.interned.bytes += c.api.len() + 16;
                interned_entry(&mut self.new_interned, 2, iid, c.api.as_bytes());
                iid
            }
        };
        let mut a = Annotator {
            interned: &mut s.interned,
            new: &mut self.new_interned,
            out: &mut self.annotations,
            one: &mut self.one,
            text: &mut self.text,
        };
        annotate(&c.args, &mut a);
        if let Some(st) = &c.stack {
            a.uint("stack_id", u64::from(st.id));
        }
        // `ret`: a slice is taken to have returned 0, an instant to have
        // no return; anything else is said.
        match (c.dur_ns, c.ret) {
            (Some(_), Some(0)) | (None, None) => {}
            (_, Some(r)) => a.int("ret", r),
            (Some(_), None) => a.uint("no_ret", 1),
        }
        self.interned_total += s.interned.bytes - before;
        self.event.clear();
        let kind = if c.dur_ns.is_some() {
            TYPE_SLICE_BEGIN
        } else {
            TYPE_INSTANT
        };
        wire::uint(&mut self.event, 9, kind as u64);
        wire::uint(&mut self.event, 10, name_iid);
        self.event.extend_from_slice(&self.annotations);
        Self::begin_packet(&mut self.pkt, s, c.ts_ns);
        if !self.new_interned.is_empty() {
            wire::bytes(&mut self.pkt, 12, &self.new_interned);
        }
        wire::bytes(&mut self.pkt, 11, &self.event);
        self.flush_packet()?;

        let end = c.ts_ns.saturating_add(c.dur_ns.unwrap_or(0));
        let s = self
            .threads
            .get_mut(&(c.pid, c.tid))
            .expect("started above");
        if c.dur_ns.is_some() {
            Self::begin_packet(&mut self.pkt, s, end);
            self.event.clear();
            wire::uint(&mut self.event, 9, TYPE_SLICE_END as u64);
            wire::bytes(&mut self.pkt, 11, &self.event);
            self.flush_packet()?;
        }
        if let Some(bytes) = device_bytes {
            let p = self.processes.get(&c.pid).expect("created first");
            let track = match p.memory_track {
                Some(t) => t,
                None => {
                    let parent = p.track;
                    let t =
                        self.counter_track(parent, "device memory", Some(UNIT_SIZE_BYTES), None)?;
                    self.processes
                        .get_mut(&c.pid)
                        .expect("created first")
                        .memory_track = Some(t);
                    t
                }
            };
            let s = self
                .threads
                .get_mut(&(c.pid, c.tid))
                .expect("started above");
            Self::begin_packet(&mut self.pkt, s, end);
            self.event.clear();
            wire::uint(&mut self.event, 9, TYPE_COUNTER as u64);
            wire::uint(&mut self.event, 11, track);
            wire::uint(&mut self.event, 30, bytes);
            wire::bytes(&mut self.pkt, 11, &self.event);
            self.flush_packet()?;
        }
        self.events += 1;
        Ok(())
    }

    /// Makes what was written so far readable in the file: deflates the
    /// packets bundled so far and flushes the output.
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.deflate_bundle()?;
        self.out.flush()
    }

    /// Writes the last rate buckets and the summary, then hands back the
    /// output (flushed).
    pub fn finish(mut self, summary: &Value) -> std::io::Result<W> {
        let rates: Vec<Rates> = self
            .processes
            .values_mut()
            .filter_map(|p| p.rates.take())
            .collect();
        for r in &rates {
            self.emit_rates(r)?;
        }
        let lost = summary.get("lost").and_then(Value::as_i64).unwrap_or(0);
        self.message(&TracePacket {
            trace_attributes: Some(TraceAttributes {
                attribute: vec![
                    attr_long("gputrace.events", self.events as i64),
                    attr_long("gputrace.lost", lost),
                    attr_str(SUMMARY_KEY, &summary.to_string()),
                ],
            }),
            trusted_packet_sequence_id: Some(META_SEQ),
            ..Default::default()
        })?;
        self.deflate_bundle()?;
        self.out.flush()?;
        Ok(self.out)
    }
}

fn attr_long(key: &str, v: i64) -> Attribute {
    Attribute {
        key: Some(key.into()),
        long_value: Some(v),
        string_value: None,
    }
}

fn attr_str(key: &str, v: &str) -> Attribute {
    Attribute {
        key: Some(key.into()),
        long_value: None,
        string_value: Some(v.into()),
    }
}
