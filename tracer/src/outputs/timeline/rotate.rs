//! `daemon --output-dir DIR`: the JSONL timeline (the trace command's event
//! schema), cut into files of at most `--max-file-mb` MB and at most
//! `--max-files` files.
//!
//! Files are `DIR/gputrace-NNNNNN.jsonl`, numbered upwards (a restarted
//! daemon goes on after the highest number of its own files); the highest is being
//! written. A file is closed once it holds the size cap (one event more at
//! most) and ends, as every `.jsonl` of gputrace does, with a summary line of
//! the events in it (totals and `process_count`, without the per-process
//! list: `gputrace stats FILE` gives that), so any closed file reads as a
//! complete timeline. Then the oldest files are deleted until at most
//! `--max-files` remain: the disk used stays under about max-files ×
//! max-file-mb.
//!
//! The directory may be shared (it runs as root): it is held open and
//! every file made in it with `O_CREAT | O_EXCL | O_NOFOLLOW` (mode 0640),
//! so a name someone planted (a symbolic link to a file of root's, say) is
//! skipped, never written through; only regular files of ours are deleted;
//! a directory anyone may write without the sticky bit is refused
//! (`sinks::files::OutputDir`).

use std::collections::HashMap;
use std::path::Path;

use crate::model::call::Args;
use crate::model::call::Call;
use crate::model::graph::GraphRecord;
use crate::model::record::Record;
use crate::model::types::LostCounts;
use crate::outputs::files::OutputDir;
use crate::outputs::timeline::jsonl::JsonlWriter;
use crate::outputs::timeline::TimelineFile;
use crate::summary::render::render_json;
use crate::summary::Summary;

const PREFIX: &str = "gputrace-";
const SUFFIX: &str = ".jsonl";
/// Names found taken (planted) in a row before giving up.
const MAX_TAKEN: u64 = 1000;

pub(crate) struct RotatingTimeline {
    dir: OutputDir,
    max_bytes: u64,
    keep: usize,
    current: Option<JsonlWriter>,
    /// The events of the current file, for its summary line.
    summary: Summary,
    /// Lost counts when the current file was opened (each file reports its
    /// own), and the latest.
    lost_at_open: LostCounts,
    lost: LostCounts,
    next_seq: u64,
    /// The latest graph record of each executable graph, by (pid, exec),
    /// and whether the current file has it: each file says what its graph
    /// launches run before the first of them, so it reads back on its own.
    graphs: HashMap<(u32, u64), (GraphRecord, bool)>,
}

/// Graph records kept for later files, at most (past it they are
/// forgotten: a later file then reads those launches as opaque).
const MAX_GRAPH_RECORDS: usize = 1 << 16;

/// The sequence number of a timeline file name.
fn seq_of(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)?
        .parse()
        .ok()
}

impl RotatingTimeline {
    /// Creates `dir` if needed; numbering goes on after the files there.
    pub(crate) fn open(dir: &Path, max_bytes: u64, keep: usize) -> std::io::Result<Self> {
        let dir = OutputDir::open(dir)?;
        // After our own files: a name someone else made is skipped when
        // reached, and cannot push the numbering to its end.
        let next_seq = existing(&dir)?
            .into_iter()
            .rfind(|(_, name)| dir.is_ours(name))
            .map_or(1, |(s, _)| s.saturating_add(1));
        Ok(Self {
            dir,
            max_bytes: max_bytes.max(1),
            keep: keep.max(1),
            current: None,
            summary: Summary::default(),
            lost_at_open: LostCounts::default(),
            lost: LostCounts::default(),
            next_seq,
            graphs: HashMap::new(),
        })
    }

    /// A new file at the next free number.
    fn create_next(&mut self) -> std::io::Result<JsonlWriter> {
        for _ in 0..MAX_TAKEN {
            let name = format!("{PREFIX}{:06}{SUFFIX}", self.next_seq);
            self.next_seq = self.next_seq.saturating_add(1);
            if let Some(file) = self.dir.create_new(&name, 0o640)? {
                return Ok(JsonlWriter::create(file));
            }
        }
        Err(std::io::Error::other(format!(
            "{MAX_TAKEN} timeline names in a row were taken by files gputrace did not make"
        )))
    }

    /// Writes one call; closes the file and starts the next at the size cap.
    fn write_call(&mut self, call: &Call) -> std::io::Result<()> {
        let lost = self.lost;
        self.open_current()?;
        let w = self.current.as_mut().expect("opened above");
        if let Args::Graph(g) = &call.args {
            if let Some((record, said)) = self.graphs.get_mut(&(call.pid, g.exec)) {
                if !*said {
                    w.record(&crate::graphs::json::graph_record(record))?;
                    *said = true;
                }
            }
        }
        w.write(call)?;
        self.summary.record(call);
        if w.bytes_written() >= self.max_bytes {
            self.close(lost)?;
        }
        Ok(())
    }

    /// Opens the next file when none is being written.
    fn open_current(&mut self) -> std::io::Result<()> {
        if self.current.is_none() {
            self.current = Some(self.create_next()?);
            self.lost_at_open = self.lost;
            self.prune()?;
        }
        Ok(())
    }

    /// Ends the current file with its summary line.
    fn close(&mut self, lost: LostCounts) -> std::io::Result<()> {
        let Some(w) = self.current.take() else {
            return Ok(());
        };
        for (_, said) in self.graphs.values_mut() {
            *said = false;
        }
        let mut summary = std::mem::take(&mut self.summary);
        summary.lost = lost.since(self.lost_at_open);
        let mut line = render_json(&summary);
        // A file of a busy node may hold thousands of processes: the line
        // keeps the totals (`gputrace stats FILE` recomputes each process
        // from the events), so it stays a few KB.
        if let Some(obj) = line.as_object_mut() {
            obj.remove("processes");
            obj.insert(
                "process_count".into(),
                serde_json::Value::from(
                    summary.processes.len() as u64 + summary.processes_over.keys(),
                ),
            );
        }
        w.finish(&line)
    }

    /// Deletes the oldest files beyond the limit (the one being written
    /// counts); only timeline files of ours count and go.
    fn prune(&self) -> std::io::Result<()> {
        let files: Vec<(u64, String)> = existing(&self.dir)?
            .into_iter()
            .filter(|(_, name)| self.dir.is_ours(name))
            .collect();
        let extra = files.len().saturating_sub(self.keep);
        for (_, name) in files.into_iter().take(extra) {
            self.dir.remove(&name)?;
        }
        Ok(())
    }
}

impl TimelineFile for RotatingTimeline {
    fn write(&mut self, call: &Call, _device_bytes: Option<u64>) -> std::io::Result<()> {
        self.write_call(call)
    }

    fn record(&mut self, r: &Record) -> std::io::Result<()> {
        if r.kind == "graph" {
            // Written with the launch that follows (into whichever file that
            // goes), so each file stands alone.
            if let Ok(g) = crate::graphs::json::parse_record(&r.to_json()) {
                if self.graphs.len() >= MAX_GRAPH_RECORDS {
                    self.graphs.clear();
                }
                self.graphs.insert((g.pid, g.exec), (g, false));
            }
            return Ok(());
        }
        self.open_current()?;
        self.current.as_mut().expect("opened above").record(r)
    }

    fn lost(&mut self, lost: LostCounts) {
        self.lost = lost;
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.current {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }

    /// Each file ends with its own summary: the trace's is not used.
    fn finish(mut self, _summary: Option<&serde_json::Value>) -> std::io::Result<()> {
        let lost = self.lost;
        self.close(lost)
    }
}

/// The timeline names in `dir` (whoever made them), oldest first.
fn existing(dir: &OutputDir) -> std::io::Result<Vec<(u64, String)>> {
    let mut out = Vec::new();
    for name in dir.names()? {
        if let Some(name) = name.to_str() {
            if let Some(seq) = seq_of(name) {
                out.push((seq, name.to_string()));
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::model::call::Args;

    fn call(i: u64) -> Call {
        Call {
            ts_ns: 1_000 + i,
            dur_ns: Some(10),
            pid: 7,
            tid: 7,
            comm: Arc::from("w"),
            api: "cuCtxSynchronize",
            family: None,
            ret: Some(0),
            stack: None,
            args: Args::Sync {
                stream: None,
                event: None,
            },
        }
    }

    #[test]
    fn rotates_keeps_the_newest_and_ends_each_file_with_a_summary() {
        let dir = std::env::temp_dir().join(format!("gputrace-rotate-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        // A stray older file and an unrelated one.
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("gputrace-000004.jsonl"), "old\n").unwrap();
        std::fs::write(dir.join("notes.txt"), "keep me").unwrap();
        let mut t = RotatingTimeline::open(&dir, 1000, 3).unwrap();
        for i in 0..100 {
            t.write(&call(i), None).unwrap();
        }
        t.finish(None).unwrap();
        let files: Vec<(u64, std::path::PathBuf)> = existing(&OutputDir::open(&dir).unwrap())
            .unwrap()
            .into_iter()
            .map(|(s, n)| (s, dir.join(n)))
            .collect();
        let seqs: Vec<u64> = files.iter().map(|f| f.0).collect();
        assert_eq!(seqs.len(), 3, "{seqs:?}");
        assert!(
            seqs[0] > 5,
            "numbering goes on after the old file: {seqs:?}"
        );
        assert!(dir.join("notes.txt").exists());
        let mut events = 0;
        for (_, path) in &files {
            let text = std::fs::read_to_string(path).unwrap();
            let lines: Vec<&str> = text.lines().collect();
            let last: serde_json::Value = serde_json::from_str(lines.last().unwrap()).unwrap();
            assert_eq!(last["type"], "summary");
            assert_eq!(last["events"], lines.len() as u64 - 1);
            assert_eq!(last["process_count"], 1);
            assert!(last.get("processes").is_none());
            let body: usize = lines[..lines.len() - 1].iter().map(|l| l.len() + 1).sum();
            // The cap, plus at most the one event that crossed it.
            assert!(body < 1000 + lines[0].len() + 1, "{body}");
            events += lines.len() - 1;
        }
        assert!(events > 0 && events < 100);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each rotated file says what a graph launch runs before the first
    /// launch of it there, so each file reads back on its own: a launch of
    /// two kernels counts them, in every file; a captured launch nowhere.
    #[test]
    fn each_file_says_what_its_graph_launches_run() {
        use crate::model::graph::ExecContents;
        use crate::model::graph::GraphLaunch;
        use crate::model::graph::GraphRecord;
        use crate::model::graph::KernelNode;
        use crate::model::graph::Node;
        use crate::read::read_timeline;
        let dir = std::env::temp_dir().join(format!("gputrace-rotate-g-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let kernel = |name: &str| {
            Node::Kernel(KernelNode {
                function: 0x10,
                cukernel: 0,
                kernel: Some(Arc::from(name)),
                grid: [1, 1, 1],
                block: [32, 1, 1],
                shared_mem_bytes: 0,
            })
        };
        let contents = Arc::new(ExecContents {
            nodes: vec![kernel("a"), Node::Memset { bytes: 64 }, kernel("b")],
            from_memory: false,
        });
        let launch = |i: u64, captured: Option<u64>| Call {
            api: "cuGraphLaunch",
            args: Args::Graph(GraphLaunch {
                exec: 0xe0,
                stream: 0x5,
                contents: Some(contents.clone()),
                captured,
            }),
            ..call(i)
        };
        let mut t = RotatingTimeline::open(&dir, 600, 100).unwrap();
        t.record(&crate::graphs::json::graph_record(&GraphRecord {
            ts_ns: 1_000,
            pid: 7,
            comm: Arc::from("w"),
            exec: 0xe0,
            contents: Some(contents.clone()),
        }))
        .unwrap();
        t.write(&launch(0, Some(1)), None).unwrap();
        for i in 1..40 {
            t.write(&launch(i, None), None).unwrap();
        }
        t.finish(None).unwrap();
        let files = existing(&OutputDir::open(&dir).unwrap()).unwrap();
        assert!(files.len() > 3, "{files:?}");
        let mut launches = 0;
        for (_, name) in &files {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            let first = text.lines().next().unwrap();
            assert!(first.starts_with("{\"type\":\"graph\""), "{first}");
            let s = read_timeline(text.as_bytes()).unwrap().summary;
            let p = &s.processes[&7];
            launches += p.graphs.launches;
            assert_eq!(p.graphs.opaque, 0);
            assert_eq!(p.graphs.kernels, 2 * p.graphs.launches);
            let a = p.kernels.get(&Some(Arc::from("a"))).unwrap();
            assert_eq!((a.launches, a.graph_launches), (0, p.graphs.launches));
            let sets = &p.copies[&crate::model::types::Direction::Memset];
            assert_eq!(
                (sets.count, sets.bytes),
                (p.graphs.launches, 64 * p.graphs.launches)
            );
        }
        assert_eq!(launches, 39);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
