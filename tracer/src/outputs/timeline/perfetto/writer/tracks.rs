//! The tracks of each process: its counters (device memory, call rates)
//! and the descriptors they need.

use std::io::Write;

use crate::model::call::Call;
use crate::outputs::timeline::perfetto::writer::*;

impl<W: Write> PerfettoWriter<W> {
    /// A counter value on the meta sequence, at an absolute time.
    pub(super) fn meta_counter(&mut self, track: u64, ts: u64, value: i64) -> std::io::Result<()> {
        self.message(&TracePacket {
            timestamp: Some(ts),
            timestamp_clock_id: Some(CLOCK_REALTIME),
            trusted_packet_sequence_id: Some(META_SEQ),
            track_event: Some(TrackEvent {
                r#type: Some(TYPE_COUNTER),
                track_uuid: Some(track),
                counter_value: Some(value),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    pub(super) fn counter_track(
        &mut self,
        parent: u64,
        name: &str,
        unit: Option<i32>,
        unit_name: Option<&str>,
    ) -> std::io::Result<u64> {
        let uuid = self.uuid();
        self.descriptor(TrackDescriptor {
            uuid: Some(uuid),
            parent_uuid: Some(parent),
            name: Some(name.into()),
            counter: Some(CounterDescriptor {
                unit,
                unit_name: unit_name.map(String::from),
            }),
            ..Default::default()
        })?;
        Ok(uuid)
    }

    /// The process's track (created, or renamed when its name changed).
    pub(super) fn process(&mut self, c: &Call) -> std::io::Result<()> {
        let rename = match self.processes.get(&c.pid) {
            Some(p) if Arc::ptr_eq(&p.comm, &c.comm) || *p.comm == *c.comm => return Ok(()),
            Some(p) => Some(p.track),
            None => None,
        };
        let track = match rename {
            Some(t) => t,
            None => self.uuid(),
        };
        self.descriptor(TrackDescriptor {
            uuid: Some(track),
            process: Some(ProcessDescriptor {
                pid: Some(c.pid as i32),
                process_name: Some(c.comm.to_string()),
            }),
            ..Default::default()
        })?;
        match self.processes.get_mut(&c.pid) {
            Some(p) => p.comm = c.comm.clone(),
            None => {
                self.processes.insert(
                    c.pid,
                    Process {
                        track,
                        comm: c.comm.clone(),
                        memory_track: None,
                        rates: None,
                    },
                );
            }
        }
        Ok(())
    }

    /// Counts the call in its process's rate bucket; emits finished buckets.
    pub(super) fn rates(&mut self, c: &Call) -> std::io::Result<()> {
        let launch = matches!(c.args, Args::Launch(_)) as u64;
        let p = self.processes.get_mut(&c.pid).expect("created first");
        if let Some(r) = &mut p.rates {
            if c.ts_ns < r.start + RATE_PERIOD_NS {
                r.calls += 1;
                r.launches += launch;
                return Ok(());
            }
        }
        let parent = p.track;
        let (calls_track, launches_track) = match p.rates.take() {
            Some(r) => {
                self.emit_rates(&r)?;
                if c.ts_ns >= r.start + 2 * RATE_PERIOD_NS {
                    // A quiet gap: back to zero until this call's bucket.
                    let zero = Rates {
                        start: r.start + RATE_PERIOD_NS,
                        calls: 0,
                        launches: 0,
                        ..r
                    };
                    self.emit_rates(&zero)?;
                }
                (r.calls_track, r.launches_track)
            }
            None => (
                self.counter_track(parent, "API calls/s", None, Some("calls/s"))?,
                self.counter_track(parent, "kernel launches/s", None, Some("launches/s"))?,
            ),
        };
        let p = self.processes.get_mut(&c.pid).expect("created first");
        p.rates = Some(Rates {
            calls_track,
            launches_track,
            start: c.ts_ns - c.ts_ns % RATE_PERIOD_NS,
            calls: 1,
            launches: launch,
        });
        Ok(())
    }

    pub(super) fn emit_rates(&mut self, r: &Rates) -> std::io::Result<()> {
        let per_s = |n: u64| (n * (1_000_000_000 / RATE_PERIOD_NS)) as i64;
        self.meta_counter(r.calls_track, r.start, per_s(r.calls))?;
        self.meta_counter(r.launches_track, r.start, per_s(r.launches))
    }
}
