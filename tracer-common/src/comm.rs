//! Reading an NCCL communicator's identity and counter at a collective's
//! entry: which fields (per libnccl build, decoded by userspace) and where
//! the values go in the record.
//!
//! Cookie bits 54..64 (see [`ProbeCookie`]):
//! - 54..58: the argument (1-based; 7 = the first stack argument) holding
//!   the `ncclComm_t`; 0 = no read
//! - 58..61: the collective's `ncclFunc_t` (0..=4) for `seqNumber[func]`;
//!   [`NO_FUNC`] = no counter (point-to-point)
//! - 61..64: the [`CommLayout`] slot (1..=7) in the layouts array map; 0 = none

use crate::ProbeCookie;

/// Layout slots in the array map (slot 0 is never used: "no layout").
pub const COMM_LAYOUT_SLOTS: u32 = 8;
/// An offset meaning "this build's layout has no such field".
pub const NO_FIELD: u32 = u32::MAX;
/// The cookie's function value for calls without a sequence counter.
pub const NO_FUNC: u32 = 7;

/// `extra[COMM_HASH_SLOT]`: `comm->commHash`.
pub const COMM_HASH_SLOT: usize = 0;
/// `extra[COMM_RANKS_SLOT]`: `rank` (low 32 bits) and `nRanks` (high 32).
pub const COMM_RANKS_SLOT: usize = 1;
/// `extra[COMM_DEV_SLOT]`: `cudaDev` (low 32 bits).
pub const COMM_DEV_SLOT: usize = 2;
/// `extra[COMM_SEQ_SLOT]`: `seqNumber[func]`.
pub const COMM_SEQ_SLOT: usize = 3;
/// `extra[COMM_VALID_SLOT]`: which of the above were read (`COMM_*_READ`),
/// and the cookie's layout slot at [`COMM_SLOT_SHIFT`] (every call of a
/// libnccl that has a slot, communicator read or not: it names the file).
pub const COMM_VALID_SLOT: usize = 4;
pub const COMM_SLOT_SHIFT: u32 = 8;

pub const COMM_HASH_READ: u64 = 1;
pub const COMM_RANK_READ: u64 = 2;
pub const COMM_NRANKS_READ: u64 = 4;
pub const COMM_DEV_READ: u64 = 8;
pub const COMM_SEQ_READ: u64 = 16;

/// Offsets in `struct ncclComm` of one libnccl build ([`NO_FIELD`] where
/// unknown). `seq` is `seqNumber[0]`; `seqNumber[f]` is `seq + 8 f`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CommLayout {
    pub hash: u32,
    pub rank: u32,
    pub nranks: u32,
    pub cuda_dev: u32,
    pub seq: u32,
    pub _pad: u32,
}

impl CommLayout {
    pub const NONE: Self = Self {
        hash: NO_FIELD,
        rank: NO_FIELD,
        nranks: NO_FIELD,
        cuda_dev: NO_FIELD,
        seq: NO_FIELD,
        _pad: 0,
    };
}

impl ProbeCookie {
    /// 0 = no communicator read, else the 1-based argument.
    #[inline(always)]
    pub const fn comm_arg(self) -> u32 {
        ((self.0 >> 54) & 0xf) as u32
    }
    /// The `ncclFunc_t` whose counter to read, or [`NO_FUNC`].
    #[inline(always)]
    pub const fn comm_func(self) -> u32 {
        ((self.0 >> 58) & 0x7) as u32
    }
    /// 0 = none, else the slot of the [`CommLayout`] to use.
    #[inline(always)]
    pub const fn comm_layout(self) -> u32 {
        ((self.0 >> 61) & 0x7) as u32
    }
    /// Reads the communicator in argument `arg` (0-based) at entry, with
    /// the counter of `func` (`None`: no counter).
    pub const fn with_comm(self, arg: u32, func: Option<u32>) -> Self {
        let f = match func {
            Some(f) if f < NO_FUNC => f,
            _ => NO_FUNC,
        };
        Self((self.0 & !(0x7f << 54)) | (((arg + 1) as u64 & 0xf) << 54) | ((f as u64) << 58))
    }
    /// The layout slot (1..=7) of the library file this probe is attached to.
    pub const fn with_comm_layout(self, slot: u32) -> Self {
        Self((self.0 & !(0x7 << 61)) | ((slot as u64 & 0x7) << 61))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comm_bits() {
        let c = ProbeCookie::new(300)
            .with_blob_stack(128)
            .with_comm(6, Some(4))
            .with_comm_layout(3);
        assert_eq!((c.comm_arg(), c.comm_func(), c.comm_layout()), (7, 4, 3));
        assert_eq!(
            (c.blob_source(), c.blob_len(), c.api()),
            (crate::BLOB_FROM_STACK, 128, 300)
        );
        let p2p = ProbeCookie::new(1).with_comm(4, None);
        assert_eq!(
            (p2p.comm_arg(), p2p.comm_func(), p2p.comm_layout()),
            (5, NO_FUNC, 0)
        );
        let plain = ProbeCookie::new(1);
        assert_eq!((plain.comm_arg(), plain.comm_layout()), (0, 0));
        // Re-setting replaces.
        assert_eq!(c.with_comm_layout(5).comm_layout(), 5);
        assert_eq!(core::mem::size_of::<CommLayout>(), 24);
    }
}
