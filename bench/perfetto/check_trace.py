#!/usr/bin/env python3
"""Checks a .pftrace written by gputrace against Perfetto's own protos.

Parses the file with the Trace message of the `perfetto` Python package
(PyPI: `pip install perfetto protobuf`; the compiled perfetto_trace.proto
that trace_processor's Python API ships), expands `compressed_packets`
bundles as trace_processor does (zlib), and checks:
- no field anywhere that Perfetto's schema does not know (a wrong field
  number or wire type would show up as an unknown field or a parse error);
- sequence rules trace_processor relies on: a sequence's first packet
  clears the incremental state; every packet that uses interned data or
  the sequence's defaults says SEQ_NEEDS_INCREMENTAL_STATE; every interned
  id used is defined before on its sequence; a delta timestamp comes after
  its sequence's clock snapshot; slices begin and end in pairs per track;
- track events point at described tracks; thread tracks name a pid/tid.
Prints counts and exits 1 on the first rule broken.

Usage: check_trace.py FILE.pftrace
"""
import sys
import zlib
from collections import defaultdict

from google.protobuf import unknown_fields
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

CLEARED, NEEDS = 1, 2
BEGIN, END, INSTANT, COUNTER = 1, 2, 3, 4


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def unknown(msg, path="packet"):
    """Unknown fields anywhere in `msg` (recursively)."""
    u = unknown_fields.UnknownFieldSet(msg)
    if len(u):
        return [f"{path}: field {f.field_number}" for f in u]
    out = []
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        items = value if fd.is_repeated else [value]
        for i, v in enumerate(items):
            out += unknown(v, f"{path}.{fd.name}[{i}]")
    return out


def packets(data):
    trace = pb.Trace()
    trace.ParseFromString(data)
    for p in trace.packet:
        if p.HasField("compressed_packets"):
            if len(p.SerializeToString()) >= 512 * 1024:
                fail("a compressed packet of 512 KB or more")
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(p.compressed_packets))
            yield from inner.packet
        else:
            yield p


def main(path):
    data = open(path, "rb").read()
    seqs = {}
    tracks = {}
    open_slices = defaultdict(int)
    n = defaultdict(int)
    attrs = {}
    for i, p in enumerate(packets(data)):
        n["packets"] += 1
        bad = unknown(p, f"packet {i}")
        if bad:
            fail(f"fields unknown to Perfetto's schema: {bad[:5]}")
        if not p.HasField("trusted_packet_sequence_id"):
            fail(f"packet {i} without a sequence id")
        sid = p.trusted_packet_sequence_id
        flags = p.sequence_flags
        if sid not in seqs:
            seqs[sid] = {"interned": set(), "clock": False, "defaults": None}
            if sid != 1 and not flags & CLEARED:
                fail(f"sequence {sid} starts without SEQ_INCREMENTAL_STATE_CLEARED")
        s = seqs[sid]
        if flags & CLEARED:
            s.update(interned=set(), clock=False, defaults=None)
        if p.HasField("trace_packet_defaults"):
            s["defaults"] = p.trace_packet_defaults
        if p.HasField("interned_data"):
            d = p.interned_data
            s["interned"] |= {("name", e.iid) for e in d.event_names}
            s["interned"] |= {("ann", e.iid) for e in d.debug_annotation_names}
            s["interned"] |= {("str", e.iid) for e in d.debug_annotation_string_values}
        if p.HasField("clock_snapshot"):
            if any(c.clock_id == 64 and c.is_incremental for c in p.clock_snapshot.clocks):
                s["clock"] = True
            n["clock snapshots"] += 1
        if p.HasField("trace_attributes"):
            for a in p.trace_attributes.attribute:
                attrs[a.key] = a.long_value if a.HasField("long_value") else a.string_value
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.HasField("thread") and not (d.thread.HasField("pid") and d.thread.HasField("tid")):
                fail("a thread track without pid/tid")
            tracks[d.uuid] = d
            n["track descriptors"] += 1
        if p.HasField("track_event"):
            te = p.track_event
            n["track events"] += 1
            uses_state = te.HasField("name_iid") or any(
                a.HasField("name_iid") or a.HasField("string_value_iid") for a in te.debug_annotations
            )
            delta = p.HasField("timestamp") and not p.HasField("timestamp_clock_id") and s["defaults"] is not None \
                and s["defaults"].timestamp_clock_id == 64
            uses_defaults = not te.HasField("track_uuid")
            if (uses_state or delta or uses_defaults) and not flags & NEEDS:
                fail(f"packet {i} uses incremental state without SEQ_NEEDS_INCREMENTAL_STATE")
            if delta and not s["clock"]:
                fail(f"packet {i}: a delta timestamp before its clock snapshot")
            if te.HasField("name_iid") and ("name", te.name_iid) not in s["interned"]:
                fail(f"packet {i}: event name {te.name_iid} not interned")
            for a in te.debug_annotations:
                if a.HasField("name_iid") and ("ann", a.name_iid) not in s["interned"]:
                    fail(f"packet {i}: annotation name {a.name_iid} not interned")
                if a.HasField("string_value_iid") and ("str", a.string_value_iid) not in s["interned"]:
                    fail(f"packet {i}: string {a.string_value_iid} not interned")
            track = te.track_uuid if te.HasField("track_uuid") else s["defaults"].track_event_defaults.track_uuid
            if track not in tracks:
                fail(f"packet {i}: event on undescribed track {track}")
            if te.type == BEGIN:
                open_slices[track] += 1
                n["slices"] += 1
            elif te.type == END:
                if open_slices[track] == 0:
                    fail(f"packet {i}: a slice end without a begin")
                open_slices[track] -= 1
            elif te.type == INSTANT:
                n["instants"] += 1
            elif te.type == COUNTER:
                n["counter values"] += 1
    if any(open_slices.values()):
        fail("slices left open at the end")
    if "gputrace.summary" not in attrs:
        fail("no gputrace.summary attribute (file cut short?)")
    print(f"OK {path}: {len(data)} bytes, " + ", ".join(f"{v} {k}" for k, v in n.items())
          + f", {len(seqs)} sequences, gputrace.events={attrs.get('gputrace.events')}, "
          f"gputrace.lost={attrs.get('gputrace.lost')}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    main(sys.argv[1])
