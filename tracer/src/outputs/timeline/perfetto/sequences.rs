//! The reader's per-sequence state (a sequence is one writer thread's
//! packets: its clock, default track and interned strings), bounded: at
//! most [`MAX_SEQUENCES`] sequences, the least recently used dropped past
//! it (the writer drops its sequences the same way and never uses a
//! dropped one again), and at most [`MAX_INTERNED`] interned bytes in all
//! (the least recently used sequences go first). A file that uses a
//! dropped sequence again gets a problem per event that needs its state.

use rustc_hash::FxHashMap;

use crate::outputs::timeline::perfetto::proto::InternedData;
use crate::outputs::timeline::perfetto::writer::MAX_INTERNED_TOTAL;

/// Sequences kept (the writer keeps 1,024 at once).
pub(super) const MAX_SEQUENCES: usize = 2048;
/// Interned bytes kept over all sequences, each entry counted with
/// [`ENTRY_COST`] more: twice what the writer keeps (it starts a
/// sequence's interning again past 1 MiB, and drops sequences past its
/// total), so that a file it wrote never needs a sequence dropped here.
pub(super) const MAX_INTERNED: usize = 2 * MAX_INTERNED_TOTAL;
/// What one interned entry is counted besides its text, as the writer
/// counts it.
const ENTRY_COST: usize = 16;

#[derive(Default)]
pub(super) struct SequenceState {
    pub(super) track: Option<u64>,
    /// The delta clock: (its value, REALTIME − value).
    pub(super) clock: Option<(u64, u64)>,
    pub(super) delta_default: bool,
    pub(super) names: FxHashMap<u64, String>,
    pub(super) annotation_names: FxHashMap<u64, String>,
    pub(super) strings: FxHashMap<u64, String>,
    bytes: usize,
    last_use: u64,
}

#[derive(Default)]
pub(super) struct Sequences {
    map: FxHashMap<u32, SequenceState>,
    tick: u64,
    /// Interned bytes held, counted as [`MAX_INTERNED`] counts them.
    bytes: usize,
    /// Sequences dropped to stay within the bounds.
    pub(super) dropped: u64,
}

impl Sequences {
    /// Makes `id` the most recently used sequence (creating it); returns
    /// the default tracks of the sequences dropped to make room.
    pub(super) fn touch(&mut self, id: u32) -> Vec<u64> {
        self.tick += 1;
        let mut gone = Vec::new();
        if !self.map.contains_key(&id) {
            while self.map.len() >= MAX_SEQUENCES {
                gone.extend(self.drop_oldest(id));
            }
        }
        let tick = self.tick;
        self.map.entry(id).or_default().last_use = tick;
        gone
    }

    /// Drops the least recently used sequence other than `keep`: its
    /// default track, if it had one.
    fn drop_oldest(&mut self, keep: u32) -> Option<u64> {
        let (&oldest, _) = self
            .map
            .iter()
            .filter(|(k, _)| **k != keep)
            .min_by_key(|(k, s)| (s.last_use, **k))?;
        let s = self.map.remove(&oldest)?;
        self.bytes -= s.bytes;
        self.dropped += 1;
        s.track
    }

    pub(super) fn get(&self, id: u32) -> Option<&SequenceState> {
        self.map.get(&id)
    }

    /// The state of a sequence [`Sequences::touch`] made.
    pub(super) fn get_mut(&mut self, id: u32) -> &mut SequenceState {
        self.map.entry(id).or_default()
    }

    /// The writer cleared the sequence's incremental state.
    pub(super) fn clear(&mut self, id: u32) {
        if let Some(s) = self.map.get_mut(&id) {
            self.bytes -= s.bytes;
            let last_use = s.last_use;
            *s = SequenceState {
                last_use,
                ..SequenceState::default()
            };
        }
    }

    /// Adds a packet's interned strings to sequence `id`; returns the
    /// default tracks of sequences dropped to stay within the bytes.
    pub(super) fn intern(&mut self, id: u32, i: &InternedData) -> Result<Vec<u64>, String> {
        let mut entries: Vec<(u8, u64, String)> = Vec::new();
        let mut add = |table: u8, iid: Option<u64>, s: String| -> Result<(), String> {
            entries.push((table, iid.ok_or("an interned entry without an iid")?, s));
            Ok(())
        };
        for n in &i.event_names {
            add(0, n.iid, n.name.clone().unwrap_or_default())?;
        }
        for n in &i.debug_annotation_names {
            add(1, n.iid, n.name.clone().unwrap_or_default())?;
        }
        for s in &i.debug_annotation_string_values {
            let text = String::from_utf8(s.str.clone().unwrap_or_default())
                .map_err(|_| "an interned string that is not UTF-8")?;
            add(2, s.iid, text)?;
        }
        let cost: usize = entries.iter().map(|e| e.2.len() + ENTRY_COST).sum();
        if cost > MAX_INTERNED {
            return Err(format!(
                "over {} MiB interned in one packet",
                MAX_INTERNED >> 20
            ));
        }
        let mut gone = Vec::new();
        while self.bytes + cost > MAX_INTERNED {
            match self.drop_oldest(id) {
                Some(track) => gone.push(track),
                None if self.map.len() <= 1 => break,
                None => {}
            }
        }
        if self.bytes + cost > MAX_INTERNED {
            // This sequence alone holds the rest: it starts again.
            self.clear(id);
        }
        let seq = self.get_mut(id);
        seq.bytes += cost;
        for (table, iid, s) in entries {
            let map = match table {
                0 => &mut seq.names,
                1 => &mut seq.annotation_names,
                _ => &mut seq.strings,
            };
            map.insert(iid, s);
        }
        self.bytes += cost;
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outputs::timeline::perfetto::proto::EventName;

    fn names(n: usize, len: usize) -> InternedData {
        InternedData {
            event_names: (0..n)
                .map(|i| EventName {
                    iid: Some(i as u64 + 1),
                    name: Some(format!("{i:0len$}")),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn sequences_past_the_bound_drop_the_least_recently_used() {
        let mut s = Sequences::default();
        for id in 0..MAX_SEQUENCES as u32 + 5 {
            s.touch(id);
            s.get_mut(id).track = Some(u64::from(id));
        }
        assert_eq!(s.map.len(), MAX_SEQUENCES);
        assert_eq!(s.dropped, 5);
        assert!(s.get(0).is_none() && s.get(5).is_some());
        // Used again, sequence 5 outlives 6.
        s.touch(5);
        let gone = s.touch(999_999);
        assert_eq!(gone, [6]);
    }

    #[test]
    fn interned_bytes_are_bounded_over_all_sequences() {
        let mut s = Sequences::default();
        // 1 MiB of names per sequence, far more sequences than fit.
        let per = names(1 << 12, 256 - ENTRY_COST);
        let mut gone = 0;
        for id in 0..400u32 {
            s.touch(id);
            gone += s.intern(id, &per).unwrap().len();
            assert!(s.bytes <= MAX_INTERNED);
        }
        assert_eq!(s.bytes, s.map.values().map(|q| q.bytes).sum::<usize>());
        assert!(s.dropped > 0 && s.map.len() <= MAX_INTERNED >> 20);
        assert_eq!(gone, 0, "no sequence had a track");
        // The newest keeps its names.
        assert_eq!(s.get(399).unwrap().names.len(), 1 << 12);
        s.clear(399);
        assert_eq!(s.bytes, s.map.values().map(|q| q.bytes).sum::<usize>());
    }
}
