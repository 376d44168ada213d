#!/usr/bin/env python3
"""Timelines that grow gputrace's tables: many distinct names.

    gen_names.py jsonl OUT KERNELS APIS    launches of KERNELS distinct kernel
                                           names, then APIS calls of distinct
                                           API names gputrace does not know
    gen_names.py pftrace OUT SEQS NAMES LEN  SEQS sequences, each interning
                                           NAMES distinct event names of LEN
                                           bytes, each name used by one call

Used by bench/memory/run.sh and tracer/tests/reader_bounds.rs's sizes.
"""
import sys

T0 = 1_700_000_000_000_000_000


def jsonl(out, kernels, apis):
    with open(out, "w") as f:
        for i in range(kernels):
            f.write(
                '{"ts_ns":%d,"dur_ns":1000,"pid":100,"tid":101,"comm":"trainer",'
                '"api":"cuLaunchKernel","ret":0,"args":{"function":"0x10",'
                '"kernel":"void kernel_%09d<float, 128>(float const*, float*, int)",'
                '"grid":[64,2,1],"block":[256,1,1],"shared_mem_bytes":0,"stream":"0x5000"}}\n'
                % (T0 + i * 1000, i)
            )
        for i in range(apis):
            f.write(
                '{"ts_ns":%d,"dur_ns":500,"pid":100,"tid":101,"comm":"trainer",'
                '"api":"fakeApi%09d","ret":0,"args":{}}\n' % (T0 + (kernels + i) * 1000, i)
            )


def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_varint(tag, v):
    return varint(tag << 3) + varint(v)


def field_bytes(tag, b):
    return varint(tag << 3 | 2) + varint(len(b)) + b


def packet(body):
    # A Trace's `packet` field (1).
    return field_bytes(1, body)


def pftrace(out, seqs, names, length):
    with open(out, "wb") as f:
        attr = field_bytes(1, b"gputrace.format") + field_varint(2, 1)
        f.write(packet(field_bytes(126, field_bytes(1, attr))))
        thread = field_varint(1, 5) + field_varint(2, 5)
        f.write(packet(field_bytes(60, field_varint(1, 9) + field_bytes(4, thread))))
        n = 0
        for s in range(1, seqs + 1):
            interned = b"".join(
                field_bytes(2, field_varint(1, i + 1) + field_bytes(2, (b"%09d_%09d" % (s, i)).ljust(length, b"x")))
                for i in range(names)
            )
            f.write(packet(field_varint(10, s) + field_varint(13, 1) + field_bytes(12, interned)))
            for i in range(names):
                event = field_varint(9, 3) + field_varint(11, 9) + field_varint(10, i + 1)
                f.write(packet(field_varint(8, T0 + n * 1000) + field_varint(58, 1)
                               + field_varint(10, s) + field_bytes(11, event)))
                n += 1


if __name__ == "__main__":
    kind = sys.argv[1]
    if kind == "jsonl":
        jsonl(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif kind == "pftrace":
        pftrace(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(__doc__)
