//! The cross-rank records of a JSONL timeline (docs/events.md):
//! `{"type":"nccl_collective",...}`, `{"type":"nccl_stall",...}`,
//! `{"type":"nccl_stall_over",...}`, written and read back.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::model::nccl::Collective;
use crate::model::nccl::Exit;
use crate::model::nccl::ExitHow;
use crate::model::nccl::Func;
use crate::model::nccl::Identity;
use crate::model::nccl::NcclStall;
use crate::model::nccl::Stall;
use crate::model::nccl::StallEnded;
use crate::model::nccl::StuckCall;
use crate::model::nccl::Unaligned;
use crate::model::record::Record;
use crate::nccl::hash::format_comm_id;

/// A cross-rank record read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum NcclRecord {
    Collective(Collective),
    Stall(NcclStall),
    StallOver(StallEnded),
}

fn id(v: u64) -> Value {
    Value::from(format_comm_id(v))
}

/// A collective every rank entered, as a timeline record of no process.
pub(crate) fn collective_record(c: &Collective) -> Record {
    Record::from_object("nccl_collective", "first_ts_ns", collective_json(c))
}

/// A stall as a timeline record: of no process (ranks waiting for one),
/// or of the thread inside an NCCL call.
pub(crate) fn stall_record(s: &NcclStall) -> Record {
    let key = match s {
        NcclStall::Collective { .. } => "first_ts_ns",
        NcclStall::Stuck(_) => "entered_ts_ns",
    };
    let mut r = Record::from_object("nccl_stall", key, stall_json(s));
    if let NcclStall::Stuck(c) = s {
        r.pid = Some(c.pid);
        r.tid = Some(c.tid);
    }
    r
}

/// The end of a stall said before, as a timeline record of no process.
pub(crate) fn stall_over_record(e: &StallEnded, now_ns: u64) -> Record {
    let mut r = Record::from_object("nccl_stall_over", "ended_ts_ns", stall_over_json(e));
    r.ts_ns = now_ns;
    r
}

pub(crate) fn collective_json(c: &Collective) -> Value {
    json!({
        "type": "nccl_collective",
        "comm_id": id(c.comm_id),
        "nranks": c.nranks,
        "op": c.func.name(),
        "seq": c.seq,
        "first_ts_ns": c.first_ns,
        "skew_ns": c.skew_ns,
        "last_rank": c.last_rank,
        "last_pid": c.last_pid,
        "delay_ns": c.delay_ns,
    })
}

pub(crate) fn stall_json(s: &NcclStall) -> Value {
    match s {
        NcclStall::Collective { stall: s, host } => json!({
            "type": "nccl_stall",
            "kind": "collective",
            "comm_id": id(s.comm_id),
            "nranks": s.nranks,
            "op": s.func.name(),
            "seq": s.seq,
            "waiting": s.waiting.iter().map(|(r, p)| json!({"rank": r, "pid": p})).collect::<Vec<_>>(),
            "seq_last": s.seq_last,
            "collectives": s.collectives,
            "missing": [json!({"rank": s.missing.0, "pid": s.missing.1})],
            "exited": s.exited.map(exit_json),
            "host": host.as_ref(),
            "first_ts_ns": s.first_ns,
            "waited_ns": s.waited_ns,
        }),
        NcclStall::Stuck(c) => {
            let mut v = json!({
            "type": "nccl_stall",
            "kind": "inside_call",
            "pid": c.pid,
            "tid": c.tid,
            "process": c.process.as_ref(),
            "api": c.api,
            "comm": format!("{:#x}", c.comm),
            "comm_id": c.ident.comm_id.map(id),
            "rank": c.ident.rank,
            "nranks": c.ident.nranks,
            "seq": c.ident.seq,
            "unaligned": c.unaligned.map(Unaligned::code),
            "host": c.host.as_ref(),
            "entered_ts_ns": c.entered_ns,
            "waited_ns": c.waited_ns,
            });
            if c.ident.own_id {
                v["comm_id_from"] = Value::from("unique_id");
            }
            v
        }
    }
}

fn exit_json(e: Exit) -> Value {
    let (status, signal) = match e.how {
        Some(ExitHow::Status(s)) => (Some(s), None),
        Some(ExitHow::Signal(s)) => (None, Some(s)),
        None => (None, None),
    };
    json!({
        "ts_ns": e.at_ns,
        "status": status,
        "signal": signal,
        "how": e.how.map(ExitHow::describe),
    })
}

fn parse_exit(v: &Value) -> Result<Option<Exit>, String> {
    let Some(e) = v.get("exited").filter(|e| !e.is_null()) else {
        return Ok(None);
    };
    let status = e.get("status").and_then(Value::as_i64);
    let signal = e.get("signal").and_then(Value::as_i64);
    let how = match (status, signal) {
        (_, Some(s)) => Some(ExitHow::Signal(s as i32)),
        (Some(s), None) => Some(ExitHow::Status(s as i32)),
        (None, None) => None,
    };
    Ok(Some(Exit {
        at_ns: u(e, "ts_ns")?,
        how,
    }))
}

pub(crate) fn stall_over_json(e: &StallEnded) -> Value {
    json!({
        "type": "nccl_stall_over",
        "comm_id": id(e.comm_id),
        "rank": e.rank,
        "op": e.func.name(),
        "seq": e.seq,
        "seq_last": e.seq_last,
        "collectives": e.collectives,
        "waited_ns": e.waited_ns,
    })
}

/// `seq_last` and `collectives`, absent from timelines written before
/// stalls were grouped per rank: the one collective.
fn seq_last(v: &Value) -> Result<(u64, u64), String> {
    let seq = u(v, "seq")?;
    match v.get("seq_last") {
        None | Some(Value::Null) => Ok((seq, 1)),
        Some(_) => Ok((u(v, "seq_last")?, u(v, "collectives")?)),
    }
}

fn hex(v: &Value, k: &str) -> Result<u64, String> {
    v.get(k)
        .and_then(Value::as_str)
        .and_then(|s| s.strip_prefix("0x"))
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| format!("`{k}` is not a hex string"))
}

fn opt_hex(v: &Value, k: &str) -> Result<Option<u64>, String> {
    match v.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => hex(v, k).map(Some),
    }
}

fn u(v: &Value, k: &str) -> Result<u64, String> {
    v.get(k)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("`{k}` is not a number"))
}

fn u32_of(v: &Value, k: &str) -> Result<u32, String> {
    u32::try_from(u(v, k)?).map_err(|_| format!("`{k}` is out of range"))
}

fn opt_u32(v: &Value, k: &str) -> Result<Option<u32>, String> {
    match v.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => u32_of(v, k).map(Some),
    }
}

fn func(v: &Value) -> Result<Func, String> {
    v.get("op")
        .and_then(Value::as_str)
        .and_then(Func::from_name)
        .ok_or_else(|| "`op` is not a collective".to_string())
}

fn ranks(v: &Value, k: &str) -> Result<Vec<(u32, Option<u32>)>, String> {
    v.get(k)
        .and_then(Value::as_array)
        .ok_or_else(|| format!("`{k}` is not a list"))?
        .iter()
        .map(|r| Ok((u32_of(r, "rank")?, opt_u32(r, "pid")?)))
        .collect()
}

fn text(v: &Value, k: &str) -> Result<Arc<str>, String> {
    v.get(k)
        .and_then(Value::as_str)
        .map(Arc::from)
        .ok_or_else(|| format!("`{k}` is not a string"))
}

/// The record on a line whose `type` is one of these; `None` for other lines.
pub(crate) fn parse_nccl_record(v: &Value) -> Option<Result<NcclRecord, String>> {
    let kind = v.get("type")?.as_str()?;
    let r = match kind {
        "nccl_collective" => (|| {
            Ok(NcclRecord::Collective(Collective {
                comm_id: hex(v, "comm_id")?,
                nranks: u32_of(v, "nranks")?,
                func: func(v)?,
                seq: u(v, "seq")?,
                first_ns: u(v, "first_ts_ns")?,
                skew_ns: u(v, "skew_ns")?,
                last_rank: u32_of(v, "last_rank")?,
                last_pid: u32_of(v, "last_pid")?,
                delay_ns: u(v, "delay_ns")?,
            }))
        })(),
        "nccl_stall" => parse_stall(v).map(NcclRecord::Stall),
        "nccl_stall_over" => (|| {
            let (seq_last, collectives) = seq_last(v)?;
            Ok(NcclRecord::StallOver(StallEnded {
                comm_id: hex(v, "comm_id")?,
                rank: opt_u32(v, "rank")?.unwrap_or(u32::MAX),
                func: func(v)?,
                seq: u(v, "seq")?,
                seq_last,
                collectives,
                waited_ns: u(v, "waited_ns")?,
            }))
        })(),
        _ => return None,
    };
    Some(r)
}

fn parse_stall(v: &Value) -> Result<NcclStall, String> {
    if v.get("kind").and_then(Value::as_str) == Some("inside_call") {
        let api = v
            .get("api")
            .and_then(Value::as_str)
            .ok_or("`api` is not a string")?;
        let api = crate::catalogue::api_by_name(api)
            .map(|a| a.name)
            .ok_or_else(|| format!("`{api}` is not an NCCL call gputrace traces"))?;
        let unaligned = match v.get("unaligned") {
            None | Some(Value::Null) => None,
            Some(x) => Some(
                x.as_str()
                    .and_then(Unaligned::from_code)
                    .ok_or("`unaligned` is not a known reason")?,
            ),
        };
        let seq = match v.get("seq") {
            None | Some(Value::Null) => None,
            Some(_) => Some(u(v, "seq")?),
        };
        return Ok(NcclStall::Stuck(StuckCall {
            pid: u32_of(v, "pid")?,
            tid: u32_of(v, "tid")?,
            process: text(v, "process")?,
            api,
            comm: hex(v, "comm")?,
            ident: Identity {
                comm_id: opt_hex(v, "comm_id")?,
                rank: opt_u32(v, "rank")?,
                nranks: opt_u32(v, "nranks")?,
                cuda_dev: None,
                seq,
                source: None,
                own_id: v.get("comm_id_from").and_then(Value::as_str) == Some("unique_id"),
            },
            unaligned,
            entered_ns: u(v, "entered_ts_ns")?,
            waited_ns: u(v, "waited_ns")?,
            host: text(v, "host")?,
        }));
    }
    let waiting = ranks(v, "waiting")?
        .into_iter()
        .map(|(r, p)| Ok((r, p.ok_or("a waiting rank without a pid")?)))
        .collect::<Result<Vec<_>, String>>()?;
    let missing = *ranks(v, "missing")?.first().ok_or("`missing` is empty")?;
    let (seq_last, collectives) = seq_last(v)?;
    Ok(NcclStall::Collective {
        stall: Stall {
            comm_id: hex(v, "comm_id")?,
            nranks: u32_of(v, "nranks")?,
            func: func(v)?,
            seq: u(v, "seq")?,
            seq_last,
            collectives,
            waiting,
            missing,
            exited: parse_exit(v)?,
            first_ns: u(v, "first_ts_ns")?,
            waited_ns: u(v, "waited_ns")?,
        },
        host: text(v, "host")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let c = Collective {
            comm_id: 0xfc90_ba46_7d2d_f505,
            nranks: 2,
            func: Func::AllReduce,
            seq: 7,
            first_ns: 1_700_000_000_000_000_000,
            skew_ns: 40_000_000,
            last_rank: 1,
            last_pid: 4242,
            delay_ns: 40_000_000,
        };
        let stall = NcclStall::Collective {
            stall: Stall {
                comm_id: 0xab,
                nranks: 3,
                func: Func::Broadcast,
                seq: 2,
                seq_last: 6,
                collectives: 5,
                waiting: vec![(0, 10)],
                missing: (1, Some(11)),
                exited: Some(Exit {
                    at_ns: 7,
                    how: Some(ExitHow::Signal(9)),
                }),
                first_ns: 5,
                waited_ns: 10_000_000_000,
            },
            host: Arc::from("node-a"),
        };
        let stuck = NcclStall::Stuck(StuckCall {
            pid: 9,
            tid: 10,
            process: Arc::from("python3"),
            api: "ncclAllReduce",
            comm: 0x55d1,
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
            entered_ns: 1,
            waited_ns: 2,
            host: Arc::from("node-a"),
        });
        let over = StallEnded {
            comm_id: 0xab,
            rank: 1,
            func: Func::Broadcast,
            seq: 2,
            seq_last: 6,
            collectives: 5,
            waited_ns: 12,
        };
        let back = |v: Value| {
            let text = v.to_string();
            parse_nccl_record(&serde_json::from_str(&text).unwrap())
                .unwrap()
                .unwrap()
        };
        assert_eq!(back(collective_json(&c)), NcclRecord::Collective(c));
        assert_eq!(back(stall_json(&stall)), NcclRecord::Stall(stall));
        assert_eq!(back(stall_json(&stuck)), NcclRecord::Stall(stuck));
        assert_eq!(back(stall_over_json(&over)), NcclRecord::StallOver(over));
        assert!(parse_nccl_record(&json!({"type": "summary"})).is_none());
        assert!(parse_nccl_record(&json!({"type": "nccl_collective"}))
            .unwrap()
            .is_err());
    }
}
