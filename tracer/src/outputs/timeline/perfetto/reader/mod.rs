//! Reads back what [`crate::outputs::timeline::perfetto::PerfettoWriter`] writes: the calls, in the
//! order they were written, and the summary at the end.
//!
//! Streams packet by packet; what it keeps is bounded by the writer's
//! interning limit (a file that interns more is refused, not buffered).
//! A packet that cannot be decoded is reported with its number and byte
//! offset and skipped; a broken frame (a truncated file) ends the reading.

use std::io::{BufReader, Read};
use std::sync::Arc;

use prost::Message as _;
use rustc_hash::FxHashMap;
use serde_json::{Map, Value};

use crate::model::call::Call;
use crate::model::stack::CallStack;
use crate::outputs::timeline::perfetto::args::parse_launch_text;
use crate::outputs::timeline::perfetto::proto::*;
use crate::outputs::timeline::perfetto::sequences::Sequences;
use crate::outputs::timeline::perfetto::writer::FORMAT_KEY;
use crate::outputs::timeline::perfetto::writer::FORMAT_VERSION;
use crate::outputs::timeline::perfetto::writer::RECORD_TRACK_PREFIX;
use crate::outputs::timeline::perfetto::writer::SUMMARY_KEY;
use crate::schema::parse::parse_call;

mod calls;
mod clock;
use crate::stacks::table::MAX_STACKS;
use clock::{clock_snapshot, timestamp};

/// The problem of a packet the file ends inside of.
pub(crate) const TRUNCATED: &str = "truncated packet (the file was cut short)";

/// Largest packet accepted (gputrace's are under a few KiB, the summary
/// aside).
const MAX_PACKET: u64 = 64 << 20;
/// Tracks described, at most (the writer describes one per thread
/// sequence, process and record lane; those of dropped sequences go).
const MAX_TRACKS: usize = 1 << 18;
/// Slices open over all tracks, at most.
const MAX_OPEN: usize = 1 << 16;
const NOT_OURS: &str =
    "not a trace written by gputrace (no gputrace.format attribute before its events)";
/// Slices open on one track (calls nested in calls).
const MAX_DEPTH: usize = 256;
// `stack` records are kept for the calls that name them: over MAX_STACKS
// the table starts again (a call naming a dropped one is a problem).

/// A packet that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadProblem {
    /// 1-based packet number.
    pub packet: u64,
    /// Byte offset of the packet's frame in the file.
    pub offset: u64,
    pub what: String,
}

/// A begun slice waiting for its end.
struct Open {
    ts: u64,
    call: Map<String, Value>,
}

enum Track {
    Thread {
        pid: u32,
        tid: u32,
    },
    /// A lane of non-call records (`Record`) of a process: counted, and
    /// `sampling` ones read back (the estimates of `--overhead-budget`).
    Record {
        pid: Option<u32>,
        kind: String,
    },
    Other,
}

pub struct PerfettoReader<R: Read> {
    input: BufReader<R>,
    offset: u64,
    packets: u64,
    buf: Vec<u8>,
    sequences: Sequences,
    tracks: FxHashMap<u64, Track>,
    comms: FxHashMap<u32, Arc<str>>,
    open: FxHashMap<u64, Vec<Open>>,
    /// Slices in `open`.
    open_count: usize,
    header: bool,
    summary: Option<Value>,
    records: u64,
    /// Process tracks, to tell a record lane's process.
    process_tracks: FxHashMap<u64, u32>,
    /// Record slices begun and not ended, per track.
    open_records: FxHashMap<u64, Vec<Map<String, Value>>>,
    /// Records read and not taken yet, as their JSONL objects.
    pending: std::collections::VecDeque<Value>,
    /// Records dropped because too many were waiting to be taken.
    dropped: u64,
    /// `stack` records read, by id: what calls name by `stack_id`.
    stacks: FxHashMap<u64, Arc<CallStack>>,
    done: bool,
    /// The packets of the bundle being read (inflated), and the next one's
    /// start in it.
    inner: Vec<u8>,
    inner_at: usize,
    /// The bundle's offset in the file (for messages).
    bundle_at: u64,
}

fn varint_from(r: &mut impl Read, first: u8) -> std::io::Result<Option<u64>> {
    let mut v = u64::from(first & 0x7f);
    let mut b = first;
    let mut shift = 7;
    while b & 0x80 != 0 {
        if shift > 63 {
            return Ok(None);
        }
        let mut one = [0u8];
        r.read_exact(&mut one)?;
        b = one[0];
        v |= u64::from(b & 0x7f) << shift;
        shift += 7;
    }
    Ok(Some(v))
}

type Step = Result<Option<Call>, String>;

impl<R: Read> PerfettoReader<R> {
    pub fn new(input: R) -> Self {
        Self {
            input: BufReader::with_capacity(1 << 20, input),
            offset: 0,
            packets: 0,
            buf: Vec::new(),
            sequences: Sequences::default(),
            tracks: FxHashMap::default(),
            comms: FxHashMap::default(),
            open: FxHashMap::default(),
            open_count: 0,
            header: false,
            summary: None,
            records: 0,
            process_tracks: FxHashMap::default(),
            open_records: FxHashMap::default(),
            pending: Default::default(),
            dropped: 0,
            stacks: FxHashMap::default(),
            done: false,
            inner: Vec::new(),
            inner_at: 0,
            bundle_at: 0,
        }
    }

    /// The next packet of the current bundle into `buf`; Ok(false) when the
    /// bundle is done.
    fn next_inner(&mut self) -> Result<bool, String> {
        let rest = &self.inner[self.inner_at..];
        if rest.is_empty() {
            return Ok(false);
        }
        self.packets += 1;
        let bad = || "a corrupt compressed bundle".to_string();
        if rest[0] != 0x0a {
            self.inner_at = self.inner.len();
            return Err(bad());
        }
        let mut body = &rest[1..];
        let len = prost::encoding::decode_varint(&mut body).map_err(|_| bad())?;
        if len > body.len() as u64 {
            self.inner_at = self.inner.len();
            return Err(bad());
        }
        self.buf.clear();
        self.buf.extend_from_slice(&body[..len as usize]);
        self.inner_at += rest.len() - body.len() + len as usize;
        Ok(true)
    }

    /// Inflates a bundle (at most [`MAX_PACKET`] bytes of packets).
    fn inflate(&mut self, packed: &[u8]) -> Result<(), String> {
        self.inner.clear();
        self.inner_at = 0;
        flate2::read::ZlibDecoder::new(packed)
            .take(MAX_PACKET + 1)
            .read_to_end(&mut self.inner)
            .map_err(|e| format!("a compressed bundle that does not inflate: {e}"))?;
        if self.inner.len() as u64 > MAX_PACKET {
            self.inner.clear();
            return Err(format!("a compressed bundle of over {MAX_PACKET} bytes"));
        }
        Ok(())
    }

    /// The summary written at the end (`None` until read, or if the file
    /// was cut short).
    pub fn summary(&self) -> Option<&Value> {
        self.summary.as_ref()
    }

    /// Packets read so far (those inside compressed bundles included).
    /// The records read since the last call of this (as their JSONL
    /// objects, in file order): take them before the call just read.
    pub fn take_records(&mut self) -> std::collections::VecDeque<Value> {
        std::mem::take(&mut self.pending)
    }

    /// Records dropped unread because over a million waited to be taken.
    pub fn dropped_records(&self) -> u64 {
        self.dropped
    }

    /// Non-call records read.
    pub fn records(&self) -> u64 {
        self.records
    }

    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Slices begun and never ended (a file cut between the two).
    pub fn unfinished(&self) -> usize {
        self.open_count
    }

    fn problem(&self, start: u64, what: String) -> ReadProblem {
        ReadProblem {
            packet: self.packets,
            offset: start,
            what,
        }
    }

    /// Reads the next packet's bytes into `buf`; Ok(false) at a clean end.
    fn next_packet(&mut self) -> Result<bool, String> {
        let mut first = [0u8];
        loop {
            match self.input.read(&mut first) {
                Ok(0) => return Ok(false),
                Ok(_) => break,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(format!("read error: {e}")),
            }
        }
        self.packets += 1;
        if first[0] != 0x0a {
            return Err(format!(
                "byte {:#04x} where a packet should start (not a Perfetto trace, or corrupt)",
                first[0]
            ));
        }
        let eof = |e: std::io::Error| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                TRUNCATED.to_string()
            } else {
                format!("read error: {e}")
            }
        };
        let mut b = [0u8];
        self.input.read_exact(&mut b).map_err(eof)?;
        let len = varint_from(&mut self.input, b[0])
            .map_err(eof)?
            .ok_or("malformed packet length")?;
        if len > MAX_PACKET {
            return Err(format!(
                "packet of {len} bytes (over {MAX_PACKET}): corrupt"
            ));
        }
        self.buf.clear();
        (&mut self.input)
            .take(len)
            .read_to_end(&mut self.buf)
            .map_err(eof)?;
        if (self.buf.len() as u64) < len {
            return Err(TRUNCATED.into());
        }
        let frame = 1 + prost::encoding::encoded_len_varint(len) as u64;
        self.offset += frame + len;
        Ok(true)
    }

    fn step(&mut self, p: TracePacket) -> Step {
        let seq_id = p.trusted_packet_sequence_id.unwrap_or(0);
        if let Some(attrs) = &p.trace_attributes {
            self.attributes(attrs)?;
        }
        if !self.header
            && (p.track_event.is_some()
                || p.track_descriptor.is_some()
                || p.trace_packet_defaults.is_some())
        {
            return Err(NOT_OURS.into());
        }
        if let Some(d) = &p.track_descriptor {
            self.descriptor(d)?;
        }
        let gone = self.sequences.touch(seq_id);
        self.forget_tracks(gone);
        if p.sequence_flags.unwrap_or(0) & SEQ_INCREMENTAL_STATE_CLEARED != 0 {
            self.sequences.clear(seq_id);
        }
        if let Some(i) = &p.interned_data {
            let gone = self.sequences.intern(seq_id, i)?;
            self.forget_tracks(gone);
        }
        let seq = self.sequences.get_mut(seq_id);
        if let Some(d) = &p.trace_packet_defaults {
            seq.delta_default = d.timestamp_clock_id == Some(CLOCK_INCREMENTAL);
            seq.track = d.track_event_defaults.as_ref().and_then(|t| t.track_uuid);
        }
        if let Some(cs) = &p.clock_snapshot {
            clock_snapshot(seq, cs)?;
            return Ok(None);
        }
        let Some(te) = &p.track_event else {
            return Ok(None);
        };
        let ts = timestamp(seq, &p)?;
        let kind = te.r#type.unwrap_or(0);
        if kind == TYPE_COUNTER {
            return Ok(None);
        }
        let track = te
            .track_uuid
            .or(seq.track)
            .ok_or("a track event without a track")?;
        if let Some(Track::Record { pid, kind: name }) = self.tracks.get(&track) {
            if kind != TYPE_SLICE_END {
                self.records += 1;
            }
            let (pid, name) = (*pid, name.clone());
            let done = crate::outputs::timeline::perfetto::records::step(
                &mut self.open_records,
                track,
                pid,
                &name,
                te,
                kind,
                ts,
            )?;
            if let Some(r) = done {
                self.keep_record(r);
            }
            return Ok(None);
        }
        self.slice(seq_id, track, te, kind, ts)
    }

    /// The file's own attributes: its format version, the summary.
    fn attributes(&mut self, attrs: &TraceAttributes) -> Result<(), String> {
        for a in &attrs.attribute {
            match a.key.as_deref() {
                Some(FORMAT_KEY) => {
                    let v = a.long_value.unwrap_or(0);
                    if v > FORMAT_VERSION {
                        return Err(format!(
                            "written by a newer gputrace (format {v}; this one reads {FORMAT_VERSION})"
                        ));
                    }
                    self.header = true;
                }
                Some(SUMMARY_KEY) => {
                    let s = a.string_value.as_deref().unwrap_or("");
                    self.summary = Some(
                        serde_json::from_str(s)
                            .map_err(|e| format!("the summary is not valid JSON: {e}"))?,
                    );
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A slice's begin, end or instant on a call's track.
    fn slice(&mut self, seq_id: u32, track: u64, te: &TrackEvent, kind: i32, ts: u64) -> Step {
        match kind {
            TYPE_SLICE_BEGIN | TYPE_INSTANT => {
                let call = self.begin(seq_id, track, te, kind == TYPE_INSTANT)?;
                if kind == TYPE_INSTANT {
                    return self.finish(call, ts, None).map(Some);
                }
                if self.open_count >= MAX_OPEN {
                    return Err(format!("over {MAX_OPEN} slices open at once"));
                }
                let open = self.open.entry(track).or_default();
                if open.len() >= MAX_DEPTH {
                    return Err(format!("over {MAX_DEPTH} slices open on one track"));
                }
                open.push(Open { ts, call });
                self.open_count += 1;
                Ok(None)
            }
            TYPE_SLICE_END => {
                let o = self
                    .open
                    .get_mut(&track)
                    .and_then(Vec::pop)
                    .ok_or("a slice end without its begin")?;
                self.open_count -= 1;
                if ts < o.ts {
                    return Err("a slice that ends before it begins".into());
                }
                self.finish(o.call, o.ts, Some(ts - o.ts)).map(Some)
            }
            other => Err(format!(
                "track event of type {other}, which gputrace does not write"
            )),
        }
    }

    /// The tracks of sequences dropped: no event comes on them again.
    fn forget_tracks(&mut self, tracks: Vec<u64>) {
        for t in tracks {
            self.tracks.remove(&t);
            self.process_tracks.remove(&t);
            if let Some(open) = self.open.remove(&t) {
                self.open_count -= open.len();
            }
        }
    }

    fn descriptor(&mut self, d: &TrackDescriptor) -> Result<(), String> {
        let uuid = d.uuid.ok_or("a track descriptor without a uuid")?;
        if self.tracks.len() >= MAX_TRACKS && !self.tracks.contains_key(&uuid) {
            return Err(format!(
                "over {MAX_TRACKS} tracks described (this one is not kept)"
            ));
        }
        let pid_of = |p: Option<i32>| p.map(|p| p as u32).ok_or("a descriptor without a pid");
        if let Some(p) = &d.process {
            let pid = pid_of(p.pid)?;
            if self.comms.len() >= MAX_TRACKS && !self.comms.contains_key(&pid) {
                return Err(format!("over {MAX_TRACKS} processes described"));
            }
            self.comms
                .insert(pid, Arc::from(p.process_name.as_deref().unwrap_or("?")));
            self.tracks.insert(uuid, Track::Other);
            self.process_tracks.insert(uuid, pid);
        } else if let Some(t) = &d.thread {
            let pid = pid_of(t.pid)?;
            let tid = t
                .tid
                .and_then(|t| u32::try_from(t).ok())
                .ok_or("a thread without a tid")?;
            self.tracks.insert(uuid, Track::Thread { pid, tid });
        } else if let (None, Some(name)) = (&d.counter, d.name.as_deref()) {
            // A lane of records: `gputrace KIND`, or a view's own lane
            // (its records say their kind).
            let kind = name
                .strip_prefix(RECORD_TRACK_PREFIX)
                .unwrap_or(name)
                .to_string();
            let pid = d
                .parent_uuid
                .and_then(|p| self.process_tracks.get(&p).copied());
            self.tracks.insert(uuid, Track::Record { pid, kind });
        } else {
            self.tracks.insert(uuid, Track::Other);
        }
        Ok(())
    }
}

/// Records waiting before [`PerfettoReader::next_step`] hands control
/// back for them to be taken.
const TAKE_AT: usize = 1024;

impl<R: Read> PerfettoReader<R> {
    /// The next call (`Ok(Some)`), or `Ok(None)` when records wait to be
    /// taken ([`PerfettoReader::take_records`]): what a reader that takes
    /// them as they come uses, holding at most [`TAKE_AT`] at once.
    pub fn next_step(&mut self) -> Option<Result<Option<Call>, ReadProblem>> {
        self.advance(true)
    }

    fn advance(&mut self, yield_records: bool) -> Option<Result<Option<Call>, ReadProblem>> {
        while !self.done {
            if yield_records && self.pending.len() >= TAKE_AT {
                return Some(Ok(None));
            }
            let start = self.bundle_at;
            match self.next_inner() {
                Ok(true) => match TracePacket::decode(&self.buf[..]) {
                    Ok(p) => match self.step(p) {
                        Ok(Some(c)) => return Some(Ok(Some(c))),
                        Ok(None) => continue,
                        Err(e) => {
                            return Some(Err(
                                self.problem(start, format!("in a compressed bundle: {e}"))
                            ))
                        }
                    },
                    Err(e) => {
                        return Some(Err(self.problem(
                            start,
                            format!("in a compressed bundle: corrupt packet: {e}"),
                        )))
                    }
                },
                Ok(false) => {}
                Err(e) => return Some(Err(self.problem(start, e))),
            }
            let start = self.offset;
            match self.next_packet() {
                Ok(true) => {}
                Ok(false) => {
                    self.done = true;
                    if !self.header {
                        return Some(Err(self.problem(start, NOT_OURS.into())));
                    }
                    return None;
                }
                Err(e) => {
                    self.done = true;
                    return Some(Err(self.problem(start, e)));
                }
            }
            let packet = match TracePacket::decode(&self.buf[..]) {
                Ok(p) => p,
                Err(e) => return Some(Err(self.problem(start, format!("corrupt packet: {e}")))),
            };
            if let Some(packed) = &packet.compressed_packets {
                self.bundle_at = start;
                if let Err(e) = self.inflate(packed) {
                    return Some(Err(self.problem(start, e)));
                }
                continue;
            }
            match self.step(packet) {
                Ok(Some(c)) => return Some(Ok(Some(c))),
                Ok(None) => {}
                Err(e) => {
                    if !self.header {
                        self.done = true;
                    }
                    return Some(Err(self.problem(start, e)));
                }
            }
        }
        None
    }
}

impl<R: Read> Iterator for PerfettoReader<R> {
    type Item = Result<Call, ReadProblem>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.advance(false)? {
                Ok(Some(c)) => return Some(Ok(c)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}
