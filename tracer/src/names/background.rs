//! Calibrations run beside the tracing, never on its path: each on a
//! thread of its own, which runs the helper (`calibrate::run_helper`,
//! confined and bounded by its deadline) and sends what it found back. The
//! namer takes the answers when it next looks ([`Background::take`]);
//! until then the library's layouts are pending: launches are named from
//! what the probes see (name lookups, runtime host stubs), and executable
//! graphs are read once the answer is in.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::host::discover::LibraryFile;
use crate::names::calibrate::Helper;

/// A library file: (device, inode).
pub(crate) type FileId = (u64, u64);

/// One calibration, asked for and answered (`T`: what it finds).
pub(crate) struct Job<T> {
    pub id: FileId,
    pub file: LibraryFile,
    /// The cache key of a trusted library (its answer is cached), `None`
    /// for one calibrated in the sandbox.
    pub key: Option<String>,
    pub result: Result<T, String>,
}

/// How a calibration is run: a helper on the library open in the file,
/// confined and bounded by the timeout.
pub(crate) type Run<T> = fn(&File, Helper, Duration, &AtomicBool) -> Result<T, String>;

/// The calibrations under way.
pub(crate) struct Background<T> {
    tx: Sender<Job<T>>,
    rx: Receiver<Job<T>>,
    cancel: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    run: Run<T>,
}

/// What a calibration thread is given.
pub(crate) struct Request {
    pub id: FileId,
    pub file: LibraryFile,
    /// The library, opened and checked: the helper loads exactly this.
    pub lib: File,
    pub how: Helper,
    pub timeout: Duration,
    pub key: Option<String>,
}

impl<T: Send + 'static> Background<T> {
    pub(crate) fn new(run: Run<T>) -> Self {
        let (tx, rx) = channel();
        Self {
            tx,
            rx,
            cancel: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
            run,
        }
    }

    /// Starts calibrating on a thread of its own.
    pub(crate) fn start(&mut self, r: Request) {
        let tx = self.tx.clone();
        let cancel = self.cancel.clone();
        let run_helper = self.run;
        let spawned = std::thread::Builder::new()
            .name("gputrace-calibrate".into())
            .spawn(move || {
                let result = run_helper(&r.lib, r.how, r.timeout, &cancel);
                let _ = tx.send(Job {
                    id: r.id,
                    file: r.file,
                    key: r.key,
                    result,
                });
            });
        match spawned {
            Ok(t) => self.threads.push(t),
            Err(e) => crate::say!("cannot start a calibration thread: {e}"),
        }
        self.threads.retain(|t| !t.is_finished());
    }

    /// The answers in now.
    pub(crate) fn take(&mut self) -> Vec<Job<T>> {
        self.rx.try_iter().collect()
    }

    /// The next answer, waiting until `until` at most.
    pub(crate) fn wait(&mut self, until: Instant) -> Option<Job<T>> {
        let left = until.saturating_duration_since(Instant::now());
        self.rx.recv_timeout(left).ok()
    }
}

impl<T> Drop for Background<T> {
    /// Helpers still running are killed (with all they started) and their
    /// threads joined: nothing of a calibration outlives the session.
    fn drop(&mut self) {
        self.cancel.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
