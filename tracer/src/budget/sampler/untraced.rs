//! When the samplable APIs' calls were not all traced (the shared hot
//! probes off, or on for the APIs called so far only), for
//! `Sampler::busy_traced`.

/// How many of the times the hot probes were off are kept, for
/// [`super::Sampler::busy_traced`] (a second's worth of periods many times over).
pub(super) const OFF_HISTORY: usize = 1024;

/// When the samplable APIs' calls were not all traced: their probes off,
/// or on for the APIs called so far only.
#[derive(Debug, Default)]
pub(super) struct Untraced {
    /// Since when, if they are not now.
    since: Option<u64>,
    /// The last [`OFF_HISTORY`] such times, and where the history kept
    /// begins (what came before is not known).
    past: std::collections::VecDeque<(u64, u64)>,
    known_from: u64,
}

impl Untraced {
    /// The probes are about to change.
    pub(super) fn off(&mut self, now: u64) {
        self.since.get_or_insert(now);
    }

    /// They are on again; `whole`: every samplable API's.
    pub(super) fn on(&mut self, now: u64, whole: bool) {
        if !whole {
            return;
        }
        if let Some(from) = self.since.take() {
            if self.past.len() == OFF_HISTORY {
                if let Some((_, to)) = self.past.pop_front() {
                    self.known_from = to;
                }
            }
            self.past.push_back((from, now));
        }
    }

    /// Whether every call from `from` to `to` was traced.
    pub(super) fn traced(&self, from: u64, to: u64) -> bool {
        from >= self.known_from
            && self.since.is_none_or(|s| s > to)
            && !self.past.iter().any(|&(a, b)| a <= to && b > from)
    }
}
