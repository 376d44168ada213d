//! The binary timeline formats for `gputrace stats`: `.jsonl.zst` (the
//! JSONL reader behind a streaming zstd decoder) and `.pftrace` (Perfetto
//! packets). Chosen by the file's first bytes, not its name.

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read};

use crate::outputs::timeline::perfetto::PerfettoReader;
use crate::outputs::timeline::perfetto::TRUNCATED;
use crate::read::lost_from;
use crate::read::read_text_timeline;
use crate::read::records::RecordReader;
use crate::read::Problems;
use crate::read::StatsInput;
use crate::schema::parse::take_api_names_over;
use crate::stacks::table::FoldedStacks;
use crate::summary::Summary;

const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// What a timeline's first bytes say it is.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Zstd,
    /// A protobuf `Trace`: field 1 (`packet`), length-delimited.
    Perfetto,
    /// JSONL or a Chrome trace.
    Text,
}

pub(crate) fn sniff(head: &[u8]) -> Kind {
    if head.starts_with(&ZSTD_MAGIC) {
        Kind::Zstd
    } else if head.first() == Some(&0x0a) {
        Kind::Perfetto
    } else {
        Kind::Text
    }
}

/// Counts bytes read (the compressed offset for messages).
struct Counted<'a, R> {
    inner: R,
    bytes: &'a Cell<u64>,
}

impl<R: Read> Read for Counted<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.set(self.bytes.get() + n as u64);
        Ok(n)
    }
}

/// Ends the stream at the first decoding error instead of failing it, so
/// what came before is still summarised; remembers the error.
struct UntilError<R> {
    inner: R,
    error: Option<std::io::Error>,
    newlines: u64,
    bytes: u64,
}

impl<R: Read> Read for UntilError<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.error.is_some() {
            return Ok(0);
        }
        loop {
            match self.inner.read(buf) {
                Ok(n) => {
                    self.newlines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
                    self.bytes += n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.error = Some(e);
                    return Ok(0);
                }
            }
        }
    }
}

/// `.jsonl.zst`: decompressed as it is read; a damaged or cut-short
/// stream is summarised up to the damage and reported at that line.
pub(crate) fn read_zst<R: Read>(input: R, folded: bool) -> std::io::Result<StatsInput> {
    let compressed = Cell::new(0);
    let counted = Counted {
        inner: input,
        bytes: &compressed,
    };
    let decoder = zstd::stream::read::Decoder::new(counted)?;
    let mut inner = UntilError {
        inner: decoder,
        error: None,
        newlines: 0,
        bytes: 0,
    };
    let mut out = read_text_timeline(&mut inner, folded)?;
    match inner.error.take() {
        // The input ended inside the frame: cut short (what was flushed
        // before, whole blocks, was read), not damaged.
        Some(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
            out.cut = Some(format!(
                "its zstd frame does not end, after {} bytes of JSONL",
                inner.bytes
            ));
            out.complete = false;
        }
        Some(e) => {
            let what = format!(
                "zstd: {e}: the compressed data is damaged (after {} bytes of JSONL, at compressed byte {})",
                inner.bytes,
                compressed.get()
            );
            out.problems.add(inner.newlines + 1, what);
            out.summary.unreadable = out.problems.count;
            out.complete = false;
        }
        None => {}
    }
    Ok(out)
}

/// `.pftrace`: problems are numbered by packet.
pub(crate) fn read_perfetto<R: Read>(input: R, folded: bool) -> std::io::Result<StatsInput> {
    let mut reader = PerfettoReader::new(input);
    let mut summary = Summary::default();
    let mut problems = Problems {
        unit: "packet",
        ..Problems::default()
    };
    let mut records = RecordReader::default();
    let mut folded = folded.then(FoldedStacks::new);
    let mut cut = None;
    // Counted afresh for this file.
    let _ = take_api_names_over();
    // Records come out of the reader in file order, before the call read
    // after them (a graph's record before its launch).
    let take = |reader: &mut PerfettoReader<R>,
                records: &mut RecordReader,
                summary: &mut Summary,
                problems: &mut Problems| {
        for v in reader.take_records() {
            if let Err(e) = records.record(&v, summary) {
                problems.add(reader.packets(), e);
            }
        }
    };
    while let Some(item) = reader.next_step() {
        take(&mut reader, &mut records, &mut summary, &mut problems);
        match item {
            Ok(None) => {}
            Ok(Some(mut call)) => match records.complete(&mut call, None) {
                Ok(()) => {
                    summary.record(&call);
                    if let (Some(f), Some(s)) = (folded.as_mut(), &call.stack) {
                        f.add(&s.frames, call.dur_ns.unwrap_or(0));
                    }
                }
                Err(e) => problems.add(reader.packets(), e),
            },
            // Half a packet at the end: the file was cut there.
            Err(p) if p.what == TRUNCATED => {
                cut = Some(format!(
                    "its last packet, {}, at byte {}, ends mid-way",
                    p.packet, p.offset
                ))
            }
            Err(p) => problems.add(p.packet, format!("at byte {}: {}", p.offset, p.what)),
        }
    }
    take(&mut reader, &mut records, &mut summary, &mut problems);
    if reader.dropped_records() > 0 {
        problems.add(
            reader.packets(),
            format!(
                "{} records dropped unread (over a million waited)",
                reader.dropped_records()
            ),
        );
    }
    summary.api_names_over = take_api_names_over();
    summary.apply_estimates();
    let complete = match reader.summary() {
        Some(v) => {
            if let Some(l) = lost_from(v) {
                summary.lost = l;
            }
            true
        }
        None => false,
    };
    let unfinished = reader.unfinished();
    if unfinished > 0 {
        let what = format!("{unfinished} call(s) begun and never ended");
        if complete {
            problems.add(reader.packets(), format!("{what} (the file was cut short)"));
        } else {
            // No summary: the file was cut between a call's two packets.
            cut = Some(cut.map_or(what.clone(), |c| format!("{c}; {what}")));
        }
    }
    summary.unreadable = problems.count;
    Ok(StatsInput {
        summary,
        problems,
        complete,
        cut,
        records: reader.records(),
        folded,
    })
}

/// Reads any timeline gputrace writes, by its first bytes.
pub(crate) fn read_any<R: Read>(input: R, folded: bool) -> std::io::Result<StatsInput> {
    let mut r = BufReader::with_capacity(1 << 16, input);
    let kind = sniff(r.fill_buf()?);
    match kind {
        Kind::Zstd => read_zst(r, folded),
        Kind::Perfetto => read_perfetto(r, folded),
        Kind::Text => read_text_timeline(r, folded),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::model::call::{Args, Call};
    use crate::outputs::timeline::jsonl_zst::JsonlZstWriter;

    /// What a writer wrote so far, readable while it still writes.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

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

    /// A `.jsonl.zst` cut where it was flushed (gputrace killed): every
    /// call written before the flush is read, and the file is said cut
    /// short, not damaged.
    #[test]
    fn a_zst_stream_cut_after_a_flush_reads_up_to_it() {
        let out = Shared::default();
        let mut w = JsonlZstWriter::new(out.clone()).unwrap();
        for i in 0..5 {
            w.write(&call(i)).unwrap();
        }
        w.flush().unwrap();
        let flushed = out.0.lock().unwrap().clone();
        let r = read_any(&flushed[..], false).unwrap();
        assert_eq!(r.summary.events(), 5);
        assert_eq!(r.problems.count, 0, "{:?}", r.problems.first);
        assert!(!r.complete);
        assert!(
            r.cut
                .as_deref()
                .unwrap()
                .contains("zstd frame does not end"),
            "{:?}",
            r.cut
        );
    }
}
