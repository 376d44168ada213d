//! The timeline written on its own thread: formatting JSON and writing the
//! file are half of the work per event, and the thread that drains the ring
//! buffer must keep up with the probes. Calls go over in batches; a bounded
//! queue means a disk that cannot keep up slows the draining (and the
//! kernel then counts what the ring could not take) rather than memory
//! growing without end.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use super::Timeline;
use crate::events::model::Call;

const BATCH: usize = 1024;
const QUEUED_BATCHES: usize = 64;

type Batch = Vec<(Call, Option<u64>)>;

pub struct TimelineWriter {
    tx: Option<SyncSender<Batch>>,
    batch: Batch,
    thread: Option<JoinHandle<Timeline>>,
    /// The first write error, set by the writer thread.
    error: Arc<Mutex<Option<std::io::Error>>>,
}

fn write_batches(
    mut timeline: Timeline,
    rx: Receiver<Batch>,
    error: Arc<Mutex<Option<std::io::Error>>>,
) -> Timeline {
    let mut failed = false;
    for batch in rx {
        if failed {
            continue; // keep receiving, so the sender never blocks
        }
        for (call, device_bytes) in &batch {
            if let Err(e) = timeline.write(call, *device_bytes) {
                *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
                failed = true;
                break;
            }
        }
    }
    timeline
}

impl TimelineWriter {
    pub fn start(timeline: Timeline) -> Self {
        let (tx, rx) = sync_channel(QUEUED_BATCHES);
        let error = Arc::new(Mutex::new(None));
        let e = error.clone();
        let thread = std::thread::Builder::new()
            .name("gputrace-writer".into())
            .spawn(move || write_batches(timeline, rx, e))
            .expect("spawning the writer thread");
        Self {
            tx: Some(tx),
            batch: Vec::with_capacity(BATCH),
            thread: Some(thread),
            error,
        }
    }

    pub fn write(&mut self, call: Call, device_bytes: Option<u64>) {
        self.batch.push((call, device_bytes));
        if self.batch.len() >= BATCH {
            self.send();
        }
    }

    /// Hands over what is batched (called on every drain tick too).
    pub fn send(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        if let Some(tx) = &self.tx {
            let _ = tx.send(batch);
        }
    }

    /// The first write error, if any happened.
    pub fn take_error(&self) -> Option<std::io::Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Writes everything queued, then the ending.
    pub fn finish(mut self, summary: &serde_json::Value) -> std::io::Result<()> {
        self.send();
        drop(self.tx.take());
        let timeline = self
            .thread
            .take()
            .expect("joined once")
            .join()
            .map_err(|_| std::io::Error::other("the writer thread panicked"))?;
        if let Some(e) = self.take_error() {
            return Err(e);
        }
        timeline.finish(summary)
    }
}
