//! NCCL's communicator hash, computed as each release computes it, so the
//! id gputrace shows is the one NCCL itself stores in `comm->commHash` and
//! (2.26 on) prints as `commId 0x%llx` in its INFO lines.
//!
//! Sources: `src/include/bitops.h` (`eatHash`, `digestHash`, `getHash`) and
//! `src/init.cc` (`hashUniqueId`) of NVIDIA/nccl. Which release stores
//! which hash: [`FIRST_MIXER_RELEASE`] below, and docs/events.md (`comm_id`).

/// Bytes of an `ncclUniqueId` (`struct { char internal[128]; }`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// First release whose `commHash` is `getHash` (the 2-word mixer) rather
/// than DJB2a, and whose INFO lines print that same value as `commId`.
pub const FIRST_MIXER_RELEASE: NcclVersion = NcclVersion(2, 26, 0);

/// An NCCL release, as its `VERSION_STRING` names it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct NcclVersion(pub u32, pub u32, pub u32);

impl NcclVersion {
    /// The version in `"NCCL version 2.28.9+cuda13.0"` (the literal every
    /// libnccl carries in `.rodata`), or in `"2.28.9"`.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.strip_prefix("NCCL version ").unwrap_or(s);
        let end = s
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(s.len());
        let mut parts = s[..end].split('.').map(|p| p.parse::<u32>().ok());
        let v = Self(parts.next()??, parts.next()??, parts.next()??);
        (v.0 == 2).then_some(v)
    }
}

impl std::fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.0, self.1, self.2)
    }
}

/// `eatHash`: mixes `bytes` into the accumulator. The size goes in first,
/// so the result depends on how the input is cut into calls.
fn eat(acc: &mut [u64; 2], bytes: &[u8]) {
    acc[0] ^= bytes.len() as u64;
    for chunk in bytes.chunks(8) {
        acc[0] = acc[0].wrapping_add(acc[1]);
        acc[1] ^= acc[0];
        acc[0] ^= acc[0] >> 31;
        acc[0] = acc[0].wrapping_mul(0x9de6_2bbc_8cef_3ce3);
        acc[1] ^= acc[1] >> 32;
        acc[1] = acc[1].wrapping_mul(0x485c_d631_1b59_9e79);
        let mut word = [0u8; 8];
        word[..chunk.len()].copy_from_slice(chunk);
        acc[0] = acc[0].wrapping_add(u64::from_le_bytes(word));
    }
}

/// `digestHash`.
fn digest(acc: [u64; 2]) -> u64 {
    let mut h = acc[0];
    h ^= h >> 31;
    h = h.wrapping_mul(0xbac3_bd56_2846_de6b);
    h = h.wrapping_add(acc[1]);
    h ^= h >> 32;
    h.wrapping_mul(0x995a_187a_14e7_b445)
}

/// NCCL 2.26+ `getHash(bytes, n)`.
pub fn mixer_hash(bytes: &[u8]) -> u64 {
    let mut acc = [1, 1];
    eat(&mut acc, bytes);
    digest(acc)
}

/// NCCL 2.18-2.25 `getHash(string, n)`: DJB2a over *signed* chars (x86-64
/// `char`), so a byte of 0x80 or more is sign-extended before the XOR.
pub fn djb2a_hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(5381u64, |h, &b| {
        ((h << 5).wrapping_add(h)) ^ (b as i8 as i64 as u64)
    })
}

/// NCCL 2.18-2.25 `hashUniqueId`: what those releases print as `commId`
/// (not what they store: their `commHash` is [`djb2a_hash`]).
pub fn unique_id_log_hash(id: &[u8]) -> u64 {
    id.iter().fold(0xdead_beefu64, |mut h, &b| {
        h ^= h >> 32;
        h = h.wrapping_mul(0x8db3_db47_fa29_94ad);
        h.wrapping_add(b as i8 as i64 as u64)
    })
}

/// `comm->commHash` of a communicator made from `id` (InitRank,
/// InitRankConfig, InitAll, or InitRankScalable's first id) by `version`.
pub fn comm_hash(version: NcclVersion, id: &[u8]) -> u64 {
    if version >= FIRST_MIXER_RELEASE {
        mixer_hash(id)
    } else {
        djb2a_hash(id)
    }
}

/// `commHash` of the communicator the `split_count`-th `ncclCommSplit` of
/// `parent` (1 for the first) makes with `color`, NCCL 2.26+; `None` for
/// older releases (they hash a formatted string whose format changed
/// between releases; the child's hash is then read from its memory).
pub fn split_hash(version: NcclVersion, parent: u64, split_count: i32, color: i32) -> Option<u64> {
    if version < FIRST_MIXER_RELEASE {
        return None;
    }
    let mut acc = [1, 1];
    eat(&mut acc, &parent.to_le_bytes());
    eat(&mut acc, &split_count.to_le_bytes());
    eat(&mut acc, &color.to_le_bytes());
    Some(digest(acc))
}

/// gputrace's own id of a communicator made from `id`, for a libnccl whose
/// release is unknown (NCCL's `commHash` function cannot be chosen): the
/// same bytes give the same id on every rank, so ranks still match. Not
/// NCCL's id (it never equals what NCCL logs); records mark it
/// (`comm_id_from: "unique_id"`).
pub fn own_comm_id(id: &[u8]) -> u64 {
    let mut acc = [0x6770_7574_7261_6365, 1]; // "gputrace"
    eat(&mut acc, id);
    digest(acc)
}

/// gputrace's own id of the `split_count`-th split of a communicator whose
/// id is gputrace's own (`parent`) with `color`: the same on every rank.
pub fn own_split_id(parent: u64, split_count: i32, color: i32) -> u64 {
    let mut acc = [0x6770_7574_7261_6365, 2];
    eat(&mut acc, &parent.to_le_bytes());
    eat(&mut acc, &split_count.to_le_bytes());
    eat(&mut acc, &color.to_le_bytes());
    digest(acc)
}

/// The id as NCCL prints it: `0x%llx`, lower case, no leading zeros.
pub fn format_comm_id(hash: u64) -> String {
    format!("{hash:#x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(hex: &str) -> Vec<u8> {
        let mut v: Vec<u8> = (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
            .collect();
        v.resize(UNIQUE_ID_BYTES, 0);
        v
    }

    /// Ids and the `commId` NCCL 2.28.9 logged for them, from the GPU
    /// exploration (notes/explore1/nccl: two.r0.json, hostid.r0.json,
    /// one.r0.json and the NCCL_DEBUG=INFO logs beside them).
    #[test]
    fn matches_what_nccl_2_28_logged() {
        let v = NcclVersion(2, 28, 9);
        let cases = [
            ("1e9f5236cb5b636d02008a75c0000202", 0xfc90_ba46_7d2d_f505u64),
            ("aea3ecf1ab0fd2780200c5d97f000001", 0x5a97_dc8b_c4b0_7139),
            ("35824a07326fb57102009061c0000202", 0x4131_57d0_1e98_62dd),
        ];
        for (hex, logged) in cases {
            assert_eq!(comm_hash(v, &id(hex)), logged, "{hex}");
        }
        assert_eq!(format_comm_id(0xfc90_ba46_7d2d_f505), "0xfc90ba467d2df505");
        assert_eq!(format_comm_id(0x5), "0x5");
    }

    /// The pre-2.26 functions, against the exploration's own C port of
    /// NCCL 2.25's code (analyze.py), on the same ids.
    #[test]
    fn older_release_hashes() {
        let two = id("1e9f5236cb5b636d02008a75c0000202");
        assert_eq!(djb2a_hash(&two), 0xfe20_2736_cccc_edc3);
        assert_eq!(unique_id_log_hash(&two), 0x759e_3a66_beee_75cb);
        assert_eq!(comm_hash(NcclVersion(2, 25, 1), &two), djb2a_hash(&two));
        let hostid = id("aea3ecf1ab0fd2780200c5d97f000001");
        assert_eq!(djb2a_hash(&hostid), 0x43a4_efd8_d9a5_845b);
        assert_eq!(unique_id_log_hash(&hostid), 0x19ed_96a0_90e4_6d8f);
    }

    #[test]
    fn split_is_cut_into_three_eats() {
        let v = NcclVersion(2, 28, 9);
        let h = split_hash(v, 0xdec9_1f4d_8920_18e7, 1, 2_130_503_744).unwrap();
        // Eating the same 16 bytes in one call gives another value.
        let mut bytes = 0xdec9_1f4d_8920_18e7u64.to_le_bytes().to_vec();
        bytes.extend_from_slice(&1i32.to_le_bytes());
        bytes.extend_from_slice(&2_130_503_744i32.to_le_bytes());
        assert_ne!(h, mixer_hash(&bytes));
        assert_ne!(
            h,
            split_hash(v, 0xdec9_1f4d_8920_18e7, 2, 2_130_503_744).unwrap()
        );
        assert_eq!(split_hash(NcclVersion(2, 25, 1), 1, 1, 1), None);
    }

    #[test]
    fn versions() {
        assert_eq!(
            NcclVersion::parse("NCCL version 2.28.9+cuda13.0"),
            Some(NcclVersion(2, 28, 9))
        );
        assert_eq!(NcclVersion::parse("2.21.5"), Some(NcclVersion(2, 21, 5)));
        assert_eq!(NcclVersion::parse("NCCL version 3.0.0"), None);
        assert_eq!(NcclVersion::parse("NCCL version 2.28"), None);
        assert!(NcclVersion(2, 26, 0) >= FIRST_MIXER_RELEASE);
        assert!(NcclVersion(2, 25, 9) < FIRST_MIXER_RELEASE);
        assert_eq!(NcclVersion(2, 28, 9).to_string(), "2.28.9");
    }
}
