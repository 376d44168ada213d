//! Ring records: [`RECORD_SIZE`] bytes each, little-endian, this layout.
//!
//! | Offset | Size | Field (every kind) |
//! |---|---|---|
//! | 0 | 2 | kind ([`RecordKind`]) |
//! | 2 | 2 | flags (`FLAG_*`) |
//! | 4 | 4 | device id (0 for API records) |
//! | 8 | 4 | context id (CUPTI's; 0 for API records) |
//! | 12 | 4 | stream id (CUPTI's; 0 for API records) |
//! | 16 | 4 | correlation id |
//! | 20 | 4 | reserved (0) |
//! | 24 | 8 | start ns (clock: the header's `clock`) |
//! | 32 | 8 | end ns |
//!
//! | Offset | Kernel | Memcpy | Memset | Api |
//! |---|---|---|---|---|
//! | 40 | grid x, y, z (3 × u32) | bytes (u64) | bytes (u64) | cbid (u32) |
//! | 44 | | | | tid (u32, Linux tid) |
//! | 48 | | copy kind, src kind, dst kind, flags (4 × u8) | value (u32) | pid (u32) |
//! | 52 | block x, y, z (3 × u32) | graph id (u32) | memory kind (u16), flags (u16) | return value (u32, CUresult) |
//! | 56 | | graph node id (u64) | graph node id (u64) | domain (u32: 1 driver, 2 runtime) |
//! | 64 | static shared bytes (u32) | runtime correlation id (u32) | graph id (u32) | |
//! | 68 | dynamic shared bytes (u32) | | | |
//! | 72 | registers per thread (u32) | | | |
//! | 76 | name id (u32; 0 = none) | | | |
//! | 80 | graph node id (u64) | | | |
//! | 88 | graph id (u32) | | | |
//! | 92 | launch type (u32, CUPTI's) | | | |
//!
//! Bytes not listed are 0. Copy kinds, memory kinds and launch types are
//! CUPTI's enum values (`CUpti_ActivityMemcpyKind`, `CUpti_ActivityMemoryKind`,
//! `CUpti_ActivityLaunchType`); a graph id of 0 means "not from a graph".

use super::RECORD_SIZE;

/// One record's bytes.
pub type RecordBytes = [u8; RECORD_SIZE];

/// `kind` values. Values never change; gaps stay gaps.
#[repr(u16)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordKind {
    Kernel = 1,
    Memcpy = 2,
    Memset = 3,
    Api = 4,
}

impl RecordKind {
    pub const fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            1 => Self::Kernel,
            2 => Self::Memcpy,
            3 => Self::Memset,
            4 => Self::Api,
            _ => return None,
        })
    }
}

/// `ApiRecord::domain`: CUPTI's callback domains.
pub const API_DOMAIN_DRIVER: u32 = 1;
pub const API_DOMAIN_RUNTIME: u32 = 2;

/// Flag: CUPTI gave no timing for this record (start or end was 0).
pub const FLAG_NO_TIMESTAMPS: u16 = 1 << 0;
/// Flags bits 8..16: the record's epoch, the number of times CUPTI was
/// finalized and subscribed again before it (`--gpu-time-share`), modulo
/// 256. A correlation id is one call's within an epoch only: CUPTI may
/// number again after a finalize.
pub const FLAG_EPOCH_SHIFT: u16 = 8;

/// The epoch bits of `flags` (see [`FLAG_EPOCH_SHIFT`]).
pub const fn epoch_of(flags: u16) -> u8 {
    (flags >> FLAG_EPOCH_SHIFT) as u8
}

/// `flags` with epoch `epoch` (modulo 256).
pub const fn with_epoch(flags: u16, epoch: u64) -> u16 {
    (flags & 0xff) | (((epoch & 0xff) as u16) << FLAG_EPOCH_SHIFT)
}

/// Fields every record has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Common {
    pub flags: u16,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation: u32,
    pub start: u64,
    pub end: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelRecord {
    pub common: Common,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub static_shared: u32,
    pub dynamic_shared: u32,
    pub registers: u32,
    /// Offset of the name in the name area; 0: no name.
    pub name_id: u32,
    pub graph_node_id: u64,
    pub graph_id: u32,
    pub launch_type: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemcpyRecord {
    pub common: Common,
    pub bytes: u64,
    pub copy_kind: u8,
    pub src_kind: u8,
    pub dst_kind: u8,
    pub copy_flags: u8,
    pub graph_id: u32,
    pub graph_node_id: u64,
    pub runtime_correlation: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemsetRecord {
    pub common: Common,
    pub bytes: u64,
    pub value: u32,
    pub memory_kind: u16,
    pub memset_flags: u16,
    pub graph_node_id: u64,
    pub graph_id: u32,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApiRecord {
    pub common: Common,
    /// CUPTI's callback id in `domain` (`CUpti_driver_api_trace_cbid` or
    /// `CUpti_runtime_api_trace_cbid`; see `cbids`).
    pub cbid: u32,
    pub tid: u32,
    pub pid: u32,
    /// The call's return value (CUresult, or cudaError_t for the runtime).
    pub result: u32,
    /// [`API_DOMAIN_DRIVER`] or [`API_DOMAIN_RUNTIME`].
    pub domain: u32,
}

/// A decoded record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    Kernel(KernelRecord),
    Memcpy(MemcpyRecord),
    Memset(MemsetRecord),
    Api(ApiRecord),
}

/// Why [`Record::from_bytes`] refused a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The kind is not one of [`RecordKind`] (its value is given).
    UnknownKind(u16),
}

#[inline]
fn put16(b: &mut RecordBytes, at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn put32(b: &mut RecordBytes, at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn put64(b: &mut RecordBytes, at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
#[inline]
fn get16(b: &RecordBytes, at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
#[inline]
fn get32(b: &RecordBytes, at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
#[inline]
fn get64(b: &RecordBytes, at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}
fn put_u32s(b: &mut RecordBytes, at: usize, v: &[u32; 3]) {
    for (i, x) in v.iter().enumerate() {
        put32(b, at + 4 * i, *x);
    }
}
fn get_u32s(b: &RecordBytes, at: usize) -> [u32; 3] {
    [get32(b, at), get32(b, at + 4), get32(b, at + 8)]
}

impl Common {
    fn write(&self, kind: RecordKind, b: &mut RecordBytes) {
        put16(b, 0, kind as u16);
        put16(b, 2, self.flags);
        put32(b, 4, self.device);
        put32(b, 8, self.context);
        put32(b, 12, self.stream);
        put32(b, 16, self.correlation);
        put64(b, 24, self.start);
        put64(b, 32, self.end);
    }
    fn read(b: &RecordBytes) -> Self {
        Self {
            flags: get16(b, 2),
            device: get32(b, 4),
            context: get32(b, 8),
            stream: get32(b, 12),
            correlation: get32(b, 16),
            start: get64(b, 24),
            end: get64(b, 32),
        }
    }
}

impl Record {
    pub fn kind(&self) -> RecordKind {
        match self {
            Record::Kernel(_) => RecordKind::Kernel,
            Record::Memcpy(_) => RecordKind::Memcpy,
            Record::Memset(_) => RecordKind::Memset,
            Record::Api(_) => RecordKind::Api,
        }
    }

    pub fn common(&self) -> &Common {
        match self {
            Record::Kernel(r) => &r.common,
            Record::Memcpy(r) => &r.common,
            Record::Memset(r) => &r.common,
            Record::Api(r) => &r.common,
        }
    }

    /// The record's bytes (reserved bytes 0).
    pub fn to_bytes(&self) -> RecordBytes {
        let mut b = [0u8; RECORD_SIZE];
        self.common().write(self.kind(), &mut b);
        match self {
            Record::Kernel(k) => {
                put_u32s(&mut b, 40, &k.grid);
                put_u32s(&mut b, 52, &k.block);
                put32(&mut b, 64, k.static_shared);
                put32(&mut b, 68, k.dynamic_shared);
                put32(&mut b, 72, k.registers);
                put32(&mut b, 76, k.name_id);
                put64(&mut b, 80, k.graph_node_id);
                put32(&mut b, 88, k.graph_id);
                put32(&mut b, 92, k.launch_type);
            }
            Record::Memcpy(m) => {
                put64(&mut b, 40, m.bytes);
                b[48] = m.copy_kind;
                b[49] = m.src_kind;
                b[50] = m.dst_kind;
                b[51] = m.copy_flags;
                put32(&mut b, 52, m.graph_id);
                put64(&mut b, 56, m.graph_node_id);
                put32(&mut b, 64, m.runtime_correlation);
            }
            Record::Memset(m) => {
                put64(&mut b, 40, m.bytes);
                put32(&mut b, 48, m.value);
                put16(&mut b, 52, m.memory_kind);
                put16(&mut b, 54, m.memset_flags);
                put64(&mut b, 56, m.graph_node_id);
                put32(&mut b, 64, m.graph_id);
            }
            Record::Api(a) => {
                put32(&mut b, 40, a.cbid);
                put32(&mut b, 44, a.tid);
                put32(&mut b, 48, a.pid);
                put32(&mut b, 52, a.result);
                put32(&mut b, 56, a.domain);
            }
        }
        b
    }

    /// Decodes any bytes without panicking; unknown kinds are an error,
    /// reserved bytes are ignored.
    pub fn from_bytes(b: &RecordBytes) -> Result<Record, RecordError> {
        let kind = get16(b, 0);
        let common = Common::read(b);
        Ok(match RecordKind::from_u16(kind) {
            Some(RecordKind::Kernel) => Record::Kernel(KernelRecord {
                common,
                grid: get_u32s(b, 40),
                block: get_u32s(b, 52),
                static_shared: get32(b, 64),
                dynamic_shared: get32(b, 68),
                registers: get32(b, 72),
                name_id: get32(b, 76),
                graph_node_id: get64(b, 80),
                graph_id: get32(b, 88),
                launch_type: get32(b, 92),
            }),
            Some(RecordKind::Memcpy) => Record::Memcpy(MemcpyRecord {
                common,
                bytes: get64(b, 40),
                copy_kind: b[48],
                src_kind: b[49],
                dst_kind: b[50],
                copy_flags: b[51],
                graph_id: get32(b, 52),
                graph_node_id: get64(b, 56),
                runtime_correlation: get32(b, 64),
            }),
            Some(RecordKind::Memset) => Record::Memset(MemsetRecord {
                common,
                bytes: get64(b, 40),
                value: get32(b, 48),
                memory_kind: get16(b, 52),
                memset_flags: get16(b, 54),
                graph_node_id: get64(b, 56),
                graph_id: get32(b, 64),
            }),
            Some(RecordKind::Api) => Record::Api(ApiRecord {
                common,
                cbid: get32(b, 40),
                tid: get32(b, 44),
                pid: get32(b, 48),
                result: get32(b, 52),
                domain: get32(b, 56),
            }),
            None => return Err(RecordError::UnknownKind(kind)),
        })
    }
}

/// A name-area entry at `id`: a little-endian u16 length, then that many
/// bytes, then a NUL. Entries are 8-byte aligned. Returns the bytes an entry
/// of `len` name bytes takes.
pub const fn name_entry_size(len: usize) -> usize {
    (2 + len + 1 + 7) & !7
}
