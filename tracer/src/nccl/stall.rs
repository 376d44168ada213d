//! NCCL stalls as the session reports them, and the one line each makes
//! on stderr (`gputrace: NCCL stall: ...`).

use std::fmt::Write;

use crate::model::nccl::ExitHow;
use crate::model::nccl::Func;
use crate::model::nccl::NcclStall;
use crate::model::nccl::StallEnded;
use crate::nccl::hash::format_comm_id;

fn secs(ns: u64) -> String {
    format!("{:.1} s", ns as f64 / 1e9)
}

fn rank_list(out: &mut String, ranks: &[(u32, String)]) {
    for (i, (r, who)) in ranks.iter().enumerate() {
        let sep = match i {
            0 => "",
            _ if i + 1 == ranks.len() => " and ",
            _ => ", ",
        };
        let _ = write!(out, "{sep}{r} ({who})");
    }
}

impl NcclStall {
    /// The stderr line, without a newline.
    pub fn line(&self) -> String {
        let mut o = String::from("gputrace: NCCL stall: ");
        match self {
            NcclStall::Collective { stall: s, host } => {
                let _ = write!(
                    o,
                    "communicator {} ({} ranks) {}: rank {} ({}) has not entered {}",
                    format_comm_id(s.comm_id),
                    s.nranks,
                    held(s.func, s.seq, s.seq_last, s.collectives),
                    s.missing.0,
                    match s.missing.1 {
                        Some(p) => format!("pid {p} on {host}"),
                        None => "not traced here".into(),
                    },
                    if s.collectives > 1 { "them" } else { "it" },
                );
                if let Some(e) = s.exited {
                    let _ = write!(o, ": its process exited at {}", clock_utc(e.at_ns));
                    match e.how {
                        Some(h @ ExitHow::Signal(_)) => {
                            let _ = write!(o, ", killed by {}", h.describe());
                        }
                        Some(h) => {
                            let _ = write!(o, " with {}", h.describe());
                        }
                        None => {}
                    }
                }
                let waiting: Vec<(u32, String)> = s
                    .waiting
                    .iter()
                    .map(|(r, p)| (*r, format!("pid {p}")))
                    .collect();
                o.push_str(if waiting.len() == 1 {
                    "; rank "
                } else {
                    "; ranks "
                });
                rank_list(&mut o, &waiting);
                let _ = write!(
                    o,
                    " {} waited {}",
                    if waiting.len() == 1 { "has" } else { "have" },
                    secs(s.waited_ns)
                );
            }
            NcclStall::Stuck(c) => {
                let _ = write!(
                    o,
                    "pid {} ({}) on {} has been inside {} for {}",
                    c.pid,
                    c.process,
                    c.host,
                    c.api,
                    secs(c.waited_ns)
                );
                match (c.ident.comm_id, c.ident.rank) {
                    (Some(id), Some(r)) => {
                        let _ = write!(o, " as rank {r} of communicator {}", format_comm_id(id));
                        if let Some(n) = c.ident.nranks {
                            let _ = write!(o, " ({n} ranks)");
                        }
                        if let Some(seq) = c.ident.seq {
                            let _ = write!(o, ", seq {seq}");
                        }
                    }
                    _ => {
                        let _ = write!(
                            o,
                            " on ncclComm_t {:#x} (communicator not identified",
                            c.comm
                        );
                        if let Some(u) = c.unaligned {
                            let _ = write!(o, ": {}", u.reason());
                        }
                        o.push(')');
                    }
                }
            }
        }
        o
    }
}

/// `AllReduce seq 41`, or the range a stall holds up:
/// `AllReduce seq 41..46 (6 collectives)`.
fn held(func: Func, seq: u64, seq_last: u64, collectives: u64) -> String {
    match (seq_last > seq, collectives > 1) {
        (false, false) => format!("{} seq {seq}", func.name()),
        (false, true) => format!("{} seq {seq} ({collectives} collectives)", func.name()),
        (true, _) => format!(
            "{} seq {seq}..{seq_last} ({collectives} collectives)",
            func.name()
        ),
    }
}

/// `HH:MM:SS UTC` of a Unix time in ns.
fn clock_utc(ns: u64) -> String {
    let s = (ns / 1_000_000_000) % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// The line for a stall that ended.
pub(crate) fn ended_line(e: &StallEnded) -> String {
    let what = held(e.func, e.seq, e.seq_last, e.collectives);
    let id = format_comm_id(e.comm_id);
    let after = secs(e.waited_ns);
    if e.rank == u32::MAX {
        // Read back from a timeline that did not name the rank.
        return format!("gputrace: NCCL stall over: communicator {id} {what}: every rank entered it after {after}");
    }
    format!(
        "gputrace: NCCL stall over: communicator {id} rank {}: entered {what} after {after}",
        e.rank
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::nccl::Identity;
    use crate::model::nccl::Stall;
    use crate::model::nccl::StuckCall;
    use crate::model::nccl::Unaligned;
    use std::sync::Arc;

    #[test]
    fn lines() {
        let s = NcclStall::Collective {
            stall: Stall {
                comm_id: 0x5b3f,
                nranks: 3,
                func: Func::AllReduce,
                seq: 41,
                seq_last: 41,
                collectives: 1,
                waiting: vec![(0, 100), (2, 102)],
                missing: (1, Some(101)),
                exited: None,
                first_ns: 0,
                waited_ns: 10_049_000_000,
            },
            host: Arc::from("node-a"),
        };
        assert_eq!(
            s.line(),
            "gputrace: NCCL stall: communicator 0x5b3f (3 ranks) AllReduce seq 41: rank 1 (pid 101 on node-a) \
             has not entered it; ranks 0 (pid 100) and 2 (pid 102) have waited 10.0 s"
        );
        let NcclStall::Collective { mut stall, host } = s else {
            unreachable!()
        };
        stall.missing = (2, None);
        stall.waiting = vec![(0, 100)];
        stall.seq_last = 46;
        stall.collectives = 6;
        assert_eq!(
            NcclStall::Collective { stall: stall.clone(), host: host.clone() }.line(),
            "gputrace: NCCL stall: communicator 0x5b3f (3 ranks) AllReduce seq 41..46 (6 collectives): \
             rank 2 (not traced here) has not entered them; rank 0 (pid 100) has waited 10.0 s"
        );
        // 1_700_000_000 s is 22:13:20 UTC.
        for (how, said) in [
            (Some(ExitHow::Signal(9)), ", killed by SIGKILL"),
            (Some(ExitHow::from_wait_status(11)), ", killed by SIGSEGV"),
            (
                Some(ExitHow::from_wait_status(1 << 8)),
                " with exit status 1",
            ),
            (None, ""),
        ] {
            stall.exited = Some(crate::model::nccl::Exit {
                at_ns: 1_700_000_000_500_000_000,
                how,
            });
            assert_eq!(
                NcclStall::Collective { stall: stall.clone(), host: host.clone() }.line(),
                format!(
                    "gputrace: NCCL stall: communicator 0x5b3f (3 ranks) AllReduce seq 41..46 (6 collectives): \
                     rank 2 (not traced here) has not entered them: its process exited at 22:13:20 UTC{said}; \
                     rank 0 (pid 100) has waited 10.0 s"
                )
            );
        }
        let stuck = StuckCall {
            pid: 9,
            tid: 9,
            process: Arc::from("python3"),
            api: "ncclAllReduce",
            comm: 0x55d1,
            ident: Identity::default(),
            unaligned: Some(Unaligned::NoIdentity),
            entered_ns: 0,
            waited_ns: 12_000_000_000,
            host: Arc::from("node-a"),
        };
        assert_eq!(
            NcclStall::Stuck(stuck.clone()).line(),
            "gputrace: NCCL stall: pid 9 (python3) on node-a has been inside ncclAllReduce for 12.0 s \
             on ncclComm_t 0x55d1 (communicator not identified: communicator id or rank unknown)"
        );
        let known = StuckCall {
            ident: Identity {
                comm_id: Some(0xab),
                rank: Some(1),
                nranks: Some(2),
                cuda_dev: None,
                seq: Some(3),
                source: None,
                own_id: false,
            },
            unaligned: None,
            ..stuck
        };
        assert_eq!(
            NcclStall::Stuck(known).line(),
            "gputrace: NCCL stall: pid 9 (python3) on node-a has been inside ncclAllReduce for 12.0 s \
             as rank 1 of communicator 0xab (2 ranks), seq 3"
        );
        assert_eq!(
            ended_line(&StallEnded {
                comm_id: 0xab,
                rank: 1,
                func: Func::Broadcast,
                seq: 2,
                seq_last: 4,
                collectives: 3,
                waited_ns: 1_500_000_000
            }),
            "gputrace: NCCL stall over: communicator 0xab rank 1: entered Broadcast seq 2..4 (3 collectives) after 1.5 s"
        );
    }
}
