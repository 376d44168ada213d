//! Protobuf wire encoding for the hot path: the slice packets are written
//! field by field into reused buffers, without building messages (prost
//! would allocate a Vec per annotation). Rare packets go through prost;
//! the tests decode both with prost.

pub(super) const VARINT: u32 = 0;
pub(super) const LEN: u32 = 2;

#[inline]
pub(super) fn varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

#[inline]
pub(super) fn key(out: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(out, u64::from(field << 3 | wire_type));
}

/// A `uint32`/`uint64`/`bool`/enum field.
#[inline]
pub(super) fn uint(out: &mut Vec<u8>, field: u32, v: u64) {
    key(out, field, VARINT);
    varint(out, v);
}

/// A length-delimited field (bytes, string, embedded message).
#[inline]
pub(super) fn bytes(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    key(out, field, LEN);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_match_prost() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut ours = Vec::new();
            varint(&mut ours, v);
            let mut buf = &ours[..];
            assert_eq!(prost::encoding::decode_varint(&mut buf).unwrap(), v);
            assert!(buf.is_empty());
            assert_eq!(ours.len(), prost::encoding::encoded_len_varint(v));
        }
    }
}
