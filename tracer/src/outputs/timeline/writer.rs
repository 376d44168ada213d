//! The timeline sink: calls are formatted and written on a thread of their
//! own. Formatting JSON and writing the file are half of the work per
//! event, and the thread that drains the ring buffer must keep up with the
//! probes. Calls go over in batches; a bounded queue means a disk that
//! cannot keep up slows the draining (and the kernel then counts what the
//! ring could not take) rather than memory growing without end. What was
//! written is flushed to the file every [`FLUSH_EVERY`], in every format,
//! so `tail -f` follows it and a killed gputrace leaves what came before.

use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::Failure;
use crate::graphs::json::graph_record;
use crate::model::call::Call;
use crate::model::record::Record;
use crate::model::sink::Halt;
use crate::model::sink::Sink;
use crate::model::sink::Status;
use crate::model::Event;
use crate::nccl::json::{collective_record, stall_over_record, stall_record};
use crate::outputs::timeline::TimelineFile;

const BATCH: usize = 1024;
const QUEUED_BATCHES: usize = 64;
/// What was written reaches the file at least this often, whatever the
/// rate (else only when a 1 MiB buffer fills: at a thousand calls a
/// second, every five seconds, and a killed gputrace left nothing): with
/// the ticks about every 100 ms, a call is in the file within about
/// 0.6 s of its being drained.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(500);

/// A call (with device memory in use after it, when that changed), or an
/// entry that is not a call (`model::record`), in the order they came.
// Calls are nearly every item: boxing them to shrink the rarer record
// would cost an allocation per call.
#[allow(clippy::large_enum_variant)]
enum Item {
    Call(Call, Option<u64>),
    Record(Record),
}

type Batch = Vec<Item>;

enum Message {
    Items(Batch),
    Lost(crate::model::types::LostCounts),
    Flush,
}

/// What a write error does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum OnError {
    /// Stop the trace, which then fails (`gputrace --output`).
    Stop,
    /// Say so once and write no more; everything else goes on (the daemon).
    Disable,
}

pub(crate) struct TimelineSink<T: TimelineFile> {
    /// What is written, for messages: `writing trace.jsonl`.
    what: String,
    on_error: OnError,
    /// Make the file readable this often (else only when the buffer fills).
    flush_every: Duration,
    last_flush: Instant,
    tx: Option<SyncSender<Message>>,
    batch: Batch,
    thread: Option<JoinHandle<T>>,
    /// The first write error, set by the writer thread.
    error: Arc<Mutex<Option<std::io::Error>>>,
    /// The latest call start seen (Unix ns): the time of records that
    /// carry none of their own (a stall's end).
    last_ns: u64,
}

fn write_messages<T: TimelineFile>(
    mut file: T,
    rx: Receiver<Message>,
    error: Arc<Mutex<Option<std::io::Error>>>,
) -> T {
    let mut failed = false;
    for message in rx {
        if failed {
            continue; // keep receiving, so the sender never blocks
        }
        let result = match message {
            Message::Items(batch) => batch.iter().try_for_each(|item| match item {
                Item::Call(call, device_bytes) => file.write(call, *device_bytes),
                Item::Record(r) => file.record(r),
            }),
            Message::Lost(lost) => {
                file.lost(lost);
                Ok(())
            }
            Message::Flush => file.flush(),
        };
        if let Err(e) = result {
            *error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e);
            failed = true;
        }
    }
    file
}

impl<T: TimelineFile> TimelineSink<T> {
    /// Starts the writer thread for `file`; `what` names it in messages
    /// (`writing trace.jsonl`).
    pub(crate) fn start(file: T, what: String, on_error: OnError) -> std::io::Result<Self> {
        let (tx, rx) = sync_channel(QUEUED_BATCHES);
        let error = Arc::new(Mutex::new(None));
        let e = error.clone();
        let thread = std::thread::Builder::new()
            .name("gputrace-writer".into())
            .spawn(move || write_messages(file, rx, e))?;
        Ok(Self {
            what,
            on_error,
            flush_every: FLUSH_EVERY,
            last_flush: Instant::now(),
            tx: Some(tx),
            batch: Vec::with_capacity(BATCH),
            thread: Some(thread),
            error,
            last_ns: 0,
        })
    }

    /// What it writes, as said in messages.
    pub(crate) fn what(&self) -> &str {
        &self.what
    }

    /// Whether it stopped writing after an error ([`OnError::Disable`]).
    pub(crate) fn is_disabled(&self) -> bool {
        self.tx.is_none()
    }

    fn push(&mut self, call: Call, device_bytes: Option<u64>) {
        if self.tx.is_none() {
            return; // disabled after an error
        }
        self.push_item(Item::Call(call, device_bytes));
    }

    fn push_item(&mut self, item: Item) {
        if self.tx.is_none() {
            return; // disabled after an error
        }
        self.batch.push(item);
        if self.batch.len() >= BATCH {
            self.send_batch();
        }
    }

    fn send(&mut self, message: Message) {
        if let Some(tx) = &self.tx {
            let _ = tx.send(message);
        }
    }

    fn send_batch(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(BATCH));
        self.send(Message::Items(batch));
    }

    /// Queues a non-call entry, in order with the calls before it.
    pub(crate) fn record(&mut self, r: Record) {
        self.push_item(Item::Record(r));
    }

    fn take_error(&self) -> Option<std::io::Error> {
        self.error.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Writes everything queued, then the ending. `summary`: the summary
    /// of the whole trace, for files that end with it.
    pub(crate) fn finish(mut self, summary: Option<&serde_json::Value>) -> std::io::Result<()> {
        self.send_batch();
        drop(self.tx.take());
        let file = self
            .thread
            .take()
            .expect("joined once")
            .join()
            .map_err(|_| std::io::Error::other("the writer thread panicked"))?;
        if let Some(e) = self.take_error() {
            return Err(e);
        }
        file.finish(summary)
    }
}

impl<T: TimelineFile> Sink for TimelineSink<T> {
    fn event(&mut self, event: &Event) {
        match event {
            Event::Call { call, device_bytes } => {
                self.last_ns = self.last_ns.max(call.ts_ns);
                self.push(call.clone(), *device_bytes)
            }
            Event::Graph(record) => self.record(graph_record(record)),
            Event::Lost(report) => {
                self.send_batch();
                self.send(Message::Lost(report.total));
            }
            Event::NcclCollective(c) => self.record(collective_record(c)),
            Event::NcclStall(s) => self.record(stall_record(s)),
            Event::NcclStallEnded(e) => self.record(stall_over_record(e, self.last_ns)),
            // One `sampling` record per process and sampled period, with
            // the process's estimates so far (periods traced in full have none).
            Event::Sampling(r) if !r.exact() => {
                for p in &r.processes {
                    self.record(Record {
                        kind: "sampling",
                        ts_ns: r.start_ns,
                        dur_ns: Some(r.end_ns.saturating_sub(r.start_ns)),
                        pid: Some(p.pid),
                        tid: None,
                        fields: r.record_fields(p),
                        view: None,
                    });
                }
            }
            Event::Gpu(w) => self.record(crate::gpu::record::work_record(w)),
            Event::GpuAgent(n) => self.record(crate::gpu::record::note_record(n)),
            Event::Exec(x) => self.record(x.record()),
            // `:counts` is the daemon's, refused with a timeline.
            Event::Sampling(_)
            | Event::ProcessSeen(_)
            | Event::ProcessGone { .. }
            | Event::Counted(_) => {}
        }
    }

    fn take(&mut self, event: Event) {
        match event {
            Event::Call { call, device_bytes } => {
                self.last_ns = self.last_ns.max(call.ts_ns);
                self.push(call, device_bytes)
            }
            other => self.event(&other),
        }
    }

    fn flush(&mut self) -> Result<(), Halt> {
        self.send_batch();
        let Some(e) = self.take_error() else {
            return Ok(());
        };
        match self.on_error {
            OnError::Stop => Err(Halt::Failed(Failure::runtime(format!(
                "{} failed: {e}; tracing stopped",
                self.what
            )))),
            OnError::Disable => {
                crate::say!(
                    "{} failed: {e}; no more timelines are written (metrics go on)",
                    self.what
                );
                self.tx = None;
                self.batch.clear();
                Ok(())
            }
        }
    }

    fn tick(&mut self, status: &Status) {
        if status.now.saturating_duration_since(self.last_flush) >= self.flush_every {
            self.last_flush = status.now;
            self.send_batch();
            self.send(Message::Flush);
        }
    }
}
