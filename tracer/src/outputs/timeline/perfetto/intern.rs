//! Interning on a sequence, and the encoding of one event's debug
//! annotations: what keeps a launch to a few bytes.

use std::fmt::Write as _;
use std::sync::Arc;

use rustc_hash::FxHashMap;
use serde_json::Value;

use crate::model::call::Launch;
use crate::outputs::timeline::perfetto::args::launch_text;
use crate::outputs::timeline::perfetto::args::AnnotationSink;
use crate::outputs::timeline::perfetto::wire;

#[derive(Default)]
pub(super) struct Interner {
    pub names: FxHashMap<&'static str, u64>,
    annotation_names: FxHashMap<Box<str>, u64>,
    strings: FxHashMap<Box<str>, u64>,
    /// Launch description → string iid, without formatting it each time.
    launches: FxHashMap<LaunchKey, u64>,
    pub bytes: usize,
}

#[derive(Hash, PartialEq, Eq)]
struct LaunchKey {
    function: u64,
    stream: u64,
    grid: [u32; 3],
    block: [u32; 3],
    smem: u32,
    /// The name by identity (the namer hands out one Arc per name); the
    /// Arc is kept so the address is not reused.
    kernel: Option<ArcPtr>,
}

struct ArcPtr(Arc<str>);

impl std::hash::Hash for ArcPtr {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        (Arc::as_ptr(&self.0) as *const u8 as usize).hash(h);
    }
}
impl PartialEq for ArcPtr {
    fn eq(&self, o: &Self) -> bool {
        Arc::ptr_eq(&self.0, &o.0)
    }
}
impl Eq for ArcPtr {}

pub(super) struct Annotator<'a> {
    pub interned: &'a mut Interner,
    /// Pending InternedData fields for this packet.
    pub new: &'a mut Vec<u8>,
    pub out: &'a mut Vec<u8>,
    pub one: &'a mut Vec<u8>,
    pub text: &'a mut String,
}

impl Annotator<'_> {
    fn name_iid(&mut self, name: &str) -> u64 {
        if let Some(&iid) = self.interned.annotation_names.get(name) {
            return iid;
        }
        let iid = self.interned.annotation_names.len() as u64 + 1;
        self.interned.annotation_names.insert(name.into(), iid);
        self.interned.bytes += name.len() + 16;
        interned_entry(self.new, 3, iid, name.as_bytes());
        iid
    }

    fn string_iid(&mut self, v: &str) -> u64 {
        if let Some(&iid) = self.interned.strings.get(v) {
            return iid;
        }
        let iid = self.interned.strings.len() as u64 + 1;
        self.interned.strings.insert(v.into(), iid);
        self.interned.bytes += v.len() + 16;
        interned_entry(self.new, 29, iid, v.as_bytes());
        iid
    }

    /// Appends one DebugAnnotation: name, then `value` (field, varint).
    fn emit(&mut self, name: &str, field: u32, v: u64) {
        let iid = self.name_iid(name);
        self.one.clear();
        wire::uint(self.one, 1, iid);
        wire::uint(self.one, field, v);
        wire::bytes(self.out, 4, self.one);
    }
}

/// Appends an EventName / DebugAnnotationName / InternedString entry
/// (all three are `iid = 1`, name/str = 2) as InternedData field `field`.
pub(super) fn interned_entry(out: &mut Vec<u8>, field: u32, iid: u64, s: &[u8]) {
    let mut entry = Vec::with_capacity(s.len() + 12);
    wire::uint(&mut entry, 1, iid);
    wire::bytes(&mut entry, 2, s);
    wire::bytes(out, field, &entry);
}

impl AnnotationSink for Annotator<'_> {
    fn string(&mut self, name: &'static str, v: &str) {
        let iid = self.string_iid(v);
        self.emit(name, 17, iid);
    }
    fn uint(&mut self, name: &'static str, v: u64) {
        self.emit(name, 3, v);
    }
    fn int(&mut self, name: &'static str, v: i64) {
        self.emit(name, 4, v as u64);
    }
    fn pointer(&mut self, name: &'static str, v: u64) {
        if matches!(
            name,
            "stream" | "event" | "comm" | "graph" | "func" | "module" | "library"
        ) {
            // Handles a process uses over and over: an interned "0x.."
            // costs 2 or 3 bytes where the address costs 6 to 9.
            let mut text = std::mem::take(self.text);
            text.clear();
            let _ = write!(text, "{v:#x}");
            let iid = self.string_iid(&text);
            *self.text = text;
            self.emit(name, 17, iid);
        } else {
            self.emit(name, 7, v);
        }
    }
    fn launch(&mut self, l: &Launch) {
        let key = LaunchKey {
            function: l.function,
            stream: l.stream,
            grid: l.grid,
            block: l.block,
            smem: l.shared_mem_bytes,
            kernel: l.kernel.clone().map(ArcPtr),
        };
        let iid = match self.interned.launches.get(&key) {
            Some(&iid) => iid,
            None => {
                let mut text = std::mem::take(self.text);
                text.clear();
                launch_text(&mut text, l);
                let iid = self.string_iid(&text);
                *self.text = text;
                self.interned.bytes += 64;
                self.interned.launches.insert(key, iid);
                iid
            }
        };
        self.emit("kernel", 17, iid);
    }
    fn json(&mut self, name: &str, v: &Value) {
        let iid = self.name_iid(name);
        self.one.clear();
        wire::uint(self.one, 1, iid);
        wire::bytes(self.one, 9, v.to_string().as_bytes());
        wire::bytes(self.out, 4, self.one);
    }
}
