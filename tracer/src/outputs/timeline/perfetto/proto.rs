//! The subset of Perfetto's trace protos that gputrace writes and reads, as
//! prost messages.
//!
//! Field numbers and types are those of Perfetto's `.proto` files
//! (github.com/google/perfetto, `protos/perfetto/trace/`: trace.proto,
//! trace_packet.proto, track_event/{track_event,debug_annotation,
//! track_descriptor,process_descriptor,thread_descriptor,counter_descriptor}
//! .proto, interned_data/interned_data.proto, clock_snapshot.proto,
//! trace_packet_defaults.proto, profiling/profile_common.proto and
//! common/trace_attributes.proto; Copyright The Android Open Source
//! Project, Apache License 2.0), checked against the tree of 2026-08.
//! Fields gputrace does not use are left out: prost skips them when
//! reading. Members of a `oneof data` in TracePacket are separate optional
//! fields here (the same bytes on the wire). Enums are plain `int32`.

#[cfg(test)]
/// `Trace`: the file is a sequence of `packet` fields (tag 1).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Trace {
    #[prost(message, repeated, tag = "1")]
    pub packet: Vec<TracePacket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TracePacket {
    #[prost(uint64, optional, tag = "8")]
    pub timestamp: Option<u64>,
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(uint32, optional, tag = "10")]
    pub trusted_packet_sequence_id: Option<u32>,
    #[prost(uint32, optional, tag = "13")]
    pub sequence_flags: Option<u32>,
    #[prost(bool, optional, tag = "87")]
    pub first_packet_on_sequence: Option<bool>,
    #[prost(message, optional, tag = "12")]
    pub interned_data: Option<InternedData>,
    #[prost(message, optional, tag = "59")]
    pub trace_packet_defaults: Option<TracePacketDefaults>,
    #[prost(message, optional, tag = "6")]
    pub clock_snapshot: Option<ClockSnapshot>,
    #[prost(message, optional, tag = "11")]
    pub track_event: Option<TrackEvent>,
    #[prost(message, optional, tag = "60")]
    pub track_descriptor: Option<TrackDescriptor>,
    #[prost(message, optional, tag = "126")]
    pub trace_attributes: Option<TraceAttributes>,
    /// Packets (a `Trace`'s bytes), deflated (zlib).
    #[prost(bytes = "vec", optional, tag = "50")]
    pub compressed_packets: Option<Vec<u8>>,
}

/// TracePacket.SequenceFlags.
pub(crate) const SEQ_INCREMENTAL_STATE_CLEARED: u32 = 1;
pub(crate) const SEQ_NEEDS_INCREMENTAL_STATE: u32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackEvent {
    #[prost(int32, optional, tag = "9")]
    pub r#type: Option<i32>,
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
    #[prost(uint64, optional, tag = "10")]
    pub name_iid: Option<u64>,
    #[prost(string, optional, tag = "23")]
    pub name: Option<String>,
    #[prost(message, repeated, tag = "4")]
    pub debug_annotations: Vec<DebugAnnotation>,
    #[prost(int64, optional, tag = "30")]
    pub counter_value: Option<i64>,
    #[prost(double, optional, tag = "44")]
    pub double_counter_value: Option<f64>,
    /// Events that share an id are joined by an arrow (a launch and the
    /// kernel it queued).
    #[prost(fixed64, repeated, packed = "false", tag = "47")]
    pub flow_ids: Vec<u64>,
}

/// TrackEvent.Type.
pub(crate) const TYPE_SLICE_BEGIN: i32 = 1;
pub(crate) const TYPE_SLICE_END: i32 = 2;
pub(crate) const TYPE_INSTANT: i32 = 3;
pub(crate) const TYPE_COUNTER: i32 = 4;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct DebugAnnotation {
    #[prost(uint64, optional, tag = "1")]
    pub name_iid: Option<u64>,
    #[prost(string, optional, tag = "10")]
    pub name: Option<String>,
    #[prost(bool, optional, tag = "2")]
    pub bool_value: Option<bool>,
    #[prost(uint64, optional, tag = "3")]
    pub uint_value: Option<u64>,
    #[prost(int64, optional, tag = "4")]
    pub int_value: Option<i64>,
    #[prost(double, optional, tag = "5")]
    pub double_value: Option<f64>,
    #[prost(string, optional, tag = "6")]
    pub string_value: Option<String>,
    #[prost(uint64, optional, tag = "7")]
    pub pointer_value: Option<u64>,
    #[prost(string, optional, tag = "9")]
    pub legacy_json_value: Option<String>,
    #[prost(uint64, optional, tag = "17")]
    pub string_value_iid: Option<u64>,
    #[prost(message, repeated, tag = "12")]
    pub array_values: Vec<DebugAnnotation>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct InternedData {
    #[prost(message, repeated, tag = "2")]
    pub event_names: Vec<EventName>,
    #[prost(message, repeated, tag = "3")]
    pub debug_annotation_names: Vec<EventName>,
    #[prost(message, repeated, tag = "29")]
    pub debug_annotation_string_values: Vec<InternedString>,
}

/// EventName and DebugAnnotationName (the same two fields).
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EventName {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct InternedString {
    #[prost(uint64, optional, tag = "1")]
    pub iid: Option<u64>,
    #[prost(bytes = "vec", optional, tag = "2")]
    pub str: Option<Vec<u8>>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TracePacketDefaults {
    #[prost(uint32, optional, tag = "58")]
    pub timestamp_clock_id: Option<u32>,
    #[prost(message, optional, tag = "11")]
    pub track_event_defaults: Option<TrackEventDefaults>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackEventDefaults {
    #[prost(uint64, optional, tag = "11")]
    pub track_uuid: Option<u64>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ClockSnapshot {
    #[prost(message, repeated, tag = "1")]
    pub clocks: Vec<Clock>,
    #[prost(int32, optional, tag = "2")]
    pub primary_trace_clock: Option<i32>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Clock {
    #[prost(uint32, optional, tag = "1")]
    pub clock_id: Option<u32>,
    #[prost(uint64, optional, tag = "2")]
    pub timestamp: Option<u64>,
    #[prost(bool, optional, tag = "3")]
    pub is_incremental: Option<bool>,
    #[prost(uint64, optional, tag = "4")]
    pub unit_multiplier_ns: Option<u64>,
}

/// BuiltinClock.BUILTIN_CLOCK_REALTIME: our timestamps are Unix time.
pub(crate) const CLOCK_REALTIME: u32 = 1;
/// The first sequence-scoped clock id: the SDK's delta-encoded clock.
pub(crate) const CLOCK_INCREMENTAL: u32 = 64;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TrackDescriptor {
    #[prost(uint64, optional, tag = "1")]
    pub uuid: Option<u64>,
    #[prost(uint64, optional, tag = "5")]
    pub parent_uuid: Option<u64>,
    #[prost(string, optional, tag = "2")]
    pub name: Option<String>,
    #[prost(message, optional, tag = "3")]
    pub process: Option<ProcessDescriptor>,
    #[prost(message, optional, tag = "4")]
    pub thread: Option<ThreadDescriptor>,
    #[prost(message, optional, tag = "8")]
    pub counter: Option<CounterDescriptor>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ProcessDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub process_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ThreadDescriptor {
    #[prost(int32, optional, tag = "1")]
    pub pid: Option<i32>,
    #[prost(int64, optional, tag = "2")]
    pub tid: Option<i64>,
    #[prost(string, optional, tag = "5")]
    pub thread_name: Option<String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct CounterDescriptor {
    #[prost(int32, optional, tag = "3")]
    pub unit: Option<i32>,
    #[prost(string, optional, tag = "6")]
    pub unit_name: Option<String>,
}

pub(crate) const UNIT_SIZE_BYTES: i32 = 3;

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct TraceAttributes {
    #[prost(message, repeated, tag = "1")]
    pub attribute: Vec<Attribute>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct Attribute {
    #[prost(string, optional, tag = "1")]
    pub key: Option<String>,
    #[prost(int64, optional, tag = "2")]
    pub long_value: Option<i64>,
    #[prost(string, optional, tag = "3")]
    pub string_value: Option<String>,
}
