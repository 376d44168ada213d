//! Enrichment of NCCL calls: each process's communicators (who they are,
//! this process's rank, each collective's sequence number), learned from
//! the calls and from what the probe read of the communicator at entry.

use tracer_common::{
    CallEvent, COMM_DEV_READ, COMM_DEV_SLOT, COMM_HASH_READ, COMM_HASH_SLOT, COMM_NRANKS_READ,
    COMM_RANKS_SLOT, COMM_RANK_READ, COMM_SEQ_READ, COMM_SEQ_SLOT, COMM_SLOT_SHIFT,
    COMM_VALID_SLOT,
};

use crate::model::call::Args;
use crate::model::call::Nccl;
use crate::model::nccl::Arrival;
use crate::model::nccl::Func;
use crate::model::nccl::Identity;
use crate::model::nccl::Unaligned;
use crate::nccl::libs::NcclLibraries;
use crate::nccl::tracker::CommMemory;
use crate::nccl::tracker::ProcessComms;

/// `ncclInProgress`: a non-blocking init returned before the communicator
/// is complete (its pointer is written all the same).
const NCCL_IN_PROGRESS: i64 = 7;

/// (id, whether it is gputrace's own) as the two fields of a record.
fn split_id(id: Option<(u64, bool)>) -> (Option<u64>, bool) {
    (id.map(|(i, _)| i), id.is_some_and(|(_, own)| own))
}

fn func_of(n: &Nccl) -> Option<Func> {
    n.op.func().and_then(|f| Func::ALL.get(f as usize).copied())
}

/// A collective's entry by process `pid` at `ts_ns`, when it names the
/// collective on every rank (id, rank, size and sequence number known).
pub(crate) fn arrival(pid: u32, ts_ns: u64, n: &Nccl) -> Option<Arrival> {
    let id = &n.ident;
    Some(Arrival {
        comm_id: id.comm_id?,
        nranks: id.nranks?,
        rank: id.rank?,
        pid,
        func: func_of(n)?,
        seq: id.seq?,
        entry_ns: ts_ns,
    })
}

/// A process's NCCL state, created at its first NCCL call.
#[derive(Debug, Default)]
pub(crate) struct NcclState {
    comms: Option<ProcessComms>,
    warned: bool,
}

impl NcclState {
    fn comms(&mut self, libs: &NcclLibraries, e: &CallEvent) -> &mut ProcessComms {
        let version = libs.get(comm_slot(e)).and_then(|l| l.version());
        let c = self.comms.get_or_insert_with(|| ProcessComms::new(version));
        c.set_version(version);
        c
    }

    /// Learns from an NCCL call and fills in its identity; returns a
    /// warning to give once (memory reads found wrong for this process).
    pub(crate) fn observe(
        &mut self,
        libs: &NcclLibraries,
        api: &str,
        e: &CallEvent,
        args: &mut Args,
        ret: Option<i64>,
    ) -> Option<String> {
        let ok = ret.is_none_or(|r| r == 0);
        match args {
            Args::Nccl(n) => {
                let comms = self.comms(libs, e);
                let (ident, why) = match comms.call(e.tid, n.comm, func_of(n), comm_memory(e)) {
                    Ok(i) => (i, None),
                    Err((partial, why)) => (partial, Some(why)),
                };
                n.ident = ident;
                n.unaligned = why;
            }
            Args::CommInit {
                comm: Some(c),
                nranks,
                rank,
                unique_id,
                comm_id,
                own_id,
            } if ok || ret == Some(NCCL_IN_PROGRESS) => {
                let comms = self.comms(libs, e);
                let nranks = u32::try_from(*nranks).unwrap_or(0);
                match rank.and_then(|r| u32::try_from(r).ok()) {
                    Some(r) => comms.init(*c, nranks, r, unique_id.as_deref()),
                    // ncclCommInitAll: the first communicator is rank 0.
                    None => comms.init_all_first(*c, nranks),
                }
                (*comm_id, *own_id) = split_id(comms.comm_id_of(*c));
            }
            // Traced `:args` only: no communicator handle, but the id is
            // the hash of the ncclUniqueId passed.
            Args::CommInit {
                comm: None,
                unique_id: Some(id),
                comm_id,
                own_id,
                ..
            } if ok => {
                (*comm_id, *own_id) = split_id(Some(self.comms(libs, e).id_of_unique_id(id)));
            }
            Args::CommSplit {
                comm,
                color,
                newcomm,
                comm_id,
                own_id,
                ..
            } if ok => {
                let comms = self.comms(libs, e);
                comms.split(*comm, *color as i32, newcomm.unwrap_or(0));
                (*comm_id, *own_id) = split_id(newcomm.and_then(|c| comms.comm_id_of(c)));
            }
            Args::CommEnd { comm } => self.comms(libs, e).destroy(*comm),
            Args::NcclGroup if ok => {
                let comms = self.comms(libs, e);
                match api {
                    "ncclGroupStart" => comms.group_start(e.tid),
                    _ => comms.group_end(e.tid),
                }
            }
            _ => {}
        }
        if self.warned {
            return None;
        }
        let msg = self.comms.as_ref()?.mismatch.clone()?;
        self.warned = true;
        Some(msg)
    }

    /// The identity of a call still in flight (its entry record), without
    /// advancing anything: its return will be observed later.
    pub(crate) fn peek(
        &mut self,
        libs: &NcclLibraries,
        e: &CallEvent,
        n: &Nccl,
    ) -> Result<Identity, Unaligned> {
        self.comms(libs, e)
            .peek(e.tid, n.comm, func_of(n), comm_memory(e))
            .map_err(|(_, why)| why)
    }
}

/// What an NCCL call's probe read from its communicator at entry.
pub(crate) fn comm_memory(e: &CallEvent) -> CommMemory {
    let valid = e.extra[COMM_VALID_SLOT];
    let has = |bit: u64| valid & bit != 0;
    let ranks = e.extra[COMM_RANKS_SLOT];
    CommMemory {
        hash: has(COMM_HASH_READ).then_some(e.extra[COMM_HASH_SLOT]),
        rank: has(COMM_RANK_READ).then_some(ranks as u32),
        nranks: has(COMM_NRANKS_READ).then_some((ranks >> 32) as u32),
        cuda_dev: has(COMM_DEV_READ).then_some(e.extra[COMM_DEV_SLOT] as u32),
        seq: has(COMM_SEQ_READ).then_some(e.extra[COMM_SEQ_SLOT]),
    }
}

/// The libnccl layout slot an NCCL call's record carries (0: none).
pub(crate) fn comm_slot(e: &CallEvent) -> u32 {
    ((e.extra[COMM_VALID_SLOT] >> COMM_SLOT_SHIFT) & 0xff) as u32
}
