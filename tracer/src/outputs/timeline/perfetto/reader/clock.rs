//! A sequence's clocks: snapshots and track events' timestamps.

use super::*;
use crate::outputs::timeline::perfetto::sequences::SequenceState;

/// A clock snapshot: where the sequence's delta clock stands against
/// REALTIME.
pub(super) fn clock_snapshot(seq: &mut SequenceState, cs: &ClockSnapshot) -> Result<(), String> {
    let real = cs
        .clocks
        .iter()
        .find(|c| c.clock_id == Some(CLOCK_REALTIME))
        .and_then(|c| c.timestamp);
    if let Some(delta) = cs
        .clocks
        .iter()
        .find(|c| c.clock_id == Some(CLOCK_INCREMENTAL) && c.is_incremental == Some(true))
    {
        let v = delta.timestamp.unwrap_or(0);
        let real = real.ok_or("a clock snapshot without REALTIME")?;
        seq.clock = Some((v, real.wrapping_sub(v)));
    }
    Ok(())
}

/// A track event's timestamp, Unix ns.
pub(super) fn timestamp(seq: &mut SequenceState, p: &TracePacket) -> Result<u64, String> {
    let ts = match (p.timestamp, p.timestamp_clock_id) {
        (None, _) => return Err("a track event without a timestamp".into()),
        (Some(t), Some(CLOCK_REALTIME)) => t,
        (Some(t), None) if !seq.delta_default => t,
        (Some(d), None | Some(CLOCK_INCREMENTAL)) => {
            let (v, off) = seq
                .clock
                .as_mut()
                .ok_or("a delta timestamp before its clock snapshot")?;
            *v = v.wrapping_add(d);
            v.wrapping_add(*off)
        }
        (Some(_), Some(c)) => {
            return Err(format!(
                "timestamp on clock {c}, which gputrace does not write"
            ))
        }
    };
    Ok(ts)
}
