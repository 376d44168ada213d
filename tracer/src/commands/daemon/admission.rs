//! Which connections the metrics endpoint keeps when clients flood it.
//!
//! At most [`MAX_CONNECTIONS`] are open, at most [`MAX_PER_PEER`] from one
//! address. A new connection is never refused while an older one can make
//! room: when a limit is reached, one connection goes, of the newcomer's
//! own address if that is at its limit, else of the address holding the
//! most, in this order: idle without a byte received (a held-open socket),
//! idle with a partial request (a slow sender), then a response in flight
//! for longer than [`SLOW_RESPONSE`] (a client that does not read); oldest
//! first in each. A scraper's connection gets its request in at once (its
//! bytes waiting at accept, or read by its task before a flood's backlog
//! is accepted) and is then served: a flood of held or reopened sockets
//! only ever pushes out its own. A sweep closes connections idle for [`IDLE_TIMEOUT`] and
//! responses not sent within [`RESPONSE_LIMIT`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Connections open at once, in all.
pub(super) const MAX_CONNECTIONS: usize = 256;
/// Connections open at once from one address.
pub(super) const MAX_PER_PEER: usize = 128;
/// A connection without a request in flight for this long is closed.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(5);
/// A response in flight this long may be cut for a newcomer.
pub(super) const SLOW_RESPONSE: Duration = Duration::from_secs(1);
/// A response not sent within this is cut.
pub(super) const RESPONSE_LIMIT: Duration = Duration::from_secs(30);

/// One open connection.
struct Conn {
    peer: IpAddr,
    /// Since when without a request in flight (`None`: one is in flight).
    idle_since: Option<Instant>,
    busy_since: Instant,
    /// Set by the connection's reader on the first byte of a request.
    heard: Arc<AtomicBool>,
    close: Arc<Notify>,
}

impl Conn {
    /// Eviction order: lower goes first; `None`: may not be evicted now.
    fn rank(&self, now: Instant) -> Option<(u8, Instant)> {
        match self.idle_since {
            Some(t) if !self.heard.load(Ordering::Relaxed) => Some((0, t)),
            Some(t) => Some((1, t)),
            None if now.duration_since(self.busy_since) >= SLOW_RESPONSE => {
                Some((2, self.busy_since))
            }
            None => None,
        }
    }
}

/// What a connection holds on to: its id, its close signal, its flag.
pub(super) struct Admitted {
    pub id: u64,
    pub close: Arc<Notify>,
    pub heard: Arc<AtomicBool>,
}

#[derive(Default)]
struct Inner {
    conns: HashMap<u64, Conn>,
    per_peer: HashMap<IpAddr, usize>,
    next_id: u64,
    evicted: u64,
}

/// The connections open now (shared by the accept loop, the connections'
/// tasks and the sweep).
#[derive(Clone, Default)]
pub(super) struct Admission {
    inner: Arc<Mutex<Inner>>,
}

impl Inner {
    fn remove(&mut self, id: u64) -> Option<Conn> {
        let c = self.conns.remove(&id)?;
        if let Some(n) = self.per_peer.get_mut(&c.peer) {
            *n -= 1;
            if *n == 0 {
                self.per_peer.remove(&c.peer);
            }
        }
        Some(c)
    }

    /// The connection of `peer` to close first, if one may be closed.
    fn victim_of(&self, peer: IpAddr, now: Instant) -> Option<u64> {
        self.conns
            .iter()
            .filter(|(_, c)| c.peer == peer)
            .filter_map(|(id, c)| c.rank(now).map(|r| (r, *id)))
            .min()
            .map(|(_, id)| id)
    }

    fn evict(&mut self, id: u64) {
        if let Some(c) = self.remove(id) {
            c.close.notify_one();
            self.evicted += 1;
        }
    }
}

impl Admission {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lets a new connection from `peer` in, closing another to make room
    /// if a limit is reached; `None` if there is no room to make. `heard`:
    /// its first bytes are already waiting.
    pub(super) fn admit(&self, peer: IpAddr, heard: bool) -> Option<Admitted> {
        let now = Instant::now();
        let mut t = self.lock();
        if t.per_peer.get(&peer).copied().unwrap_or(0) >= MAX_PER_PEER {
            let victim = t.victim_of(peer, now)?;
            t.evict(victim);
        } else if t.conns.len() >= MAX_CONNECTIONS {
            // The address holding the most gives one up (the newcomer's own
            // if that is the one).
            let mut peers: Vec<(usize, IpAddr)> =
                t.per_peer.iter().map(|(p, n)| (*n, *p)).collect();
            peers.sort_by(|a, b| b.cmp(a));
            let victim = peers.iter().find_map(|(_, p)| t.victim_of(*p, now))?;
            t.evict(victim);
        }
        let id = t.next_id;
        t.next_id += 1;
        let close = Arc::new(Notify::new());
        let heard = Arc::new(AtomicBool::new(heard));
        t.conns.insert(
            id,
            Conn {
                peer,
                idle_since: Some(now),
                busy_since: now,
                heard: heard.clone(),
                close: close.clone(),
            },
        );
        *t.per_peer.entry(peer).or_default() += 1;
        Some(Admitted { id, close, heard })
    }

    /// A request of `id` is being answered.
    pub(super) fn begin(&self, id: u64) {
        if let Some(c) = self.lock().conns.get_mut(&id) {
            c.idle_since = None;
            c.busy_since = Instant::now();
        }
    }

    /// The answer of `id` is written (or dropped): idle again, waiting for
    /// a new request.
    pub(super) fn end(&self, id: u64) {
        if let Some(c) = self.lock().conns.get_mut(&id) {
            c.idle_since = Some(Instant::now());
            c.heard.store(false, Ordering::Relaxed);
        }
    }

    /// The connection `id` has ended.
    pub(super) fn left(&self, id: u64) {
        self.lock().remove(id);
    }

    /// Closes connections idle too long or whose response is overdue.
    pub(super) fn sweep(&self) {
        let now = Instant::now();
        let mut t = self.lock();
        let overdue: Vec<u64> = t
            .conns
            .iter()
            .filter(|(_, c)| match c.idle_since {
                Some(since) => now.duration_since(since) >= IDLE_TIMEOUT,
                None => now.duration_since(c.busy_since) >= RESPONSE_LIMIT,
            })
            .map(|(id, _)| *id)
            .collect();
        for id in overdue {
            if let Some(c) = t.remove(id) {
                c.close.notify_one();
            }
        }
    }

    /// (open connections, connections closed to make room so far).
    #[cfg(test)]
    pub(super) fn counts(&self) -> (usize, u64) {
        let t = self.lock();
        (t.conns.len(), t.evicted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn a_flood_from_one_address_only_pushes_out_its_own() {
        let a = Admission::default();
        // A scraper elsewhere, in the middle of a request.
        let scraper = a.admit(ip(2), false).unwrap();
        a.begin(scraper.id);
        // One address fills its share, then keeps reopening.
        let mut flood = Vec::new();
        for _ in 0..MAX_PER_PEER + 500 {
            flood.push(a.admit(ip(1), false).expect("room is made"));
        }
        let (open, evicted) = a.counts();
        assert_eq!(open, MAX_PER_PEER + 1);
        assert_eq!(evicted, 500);
        // The oldest went first; the scraper was not touched.
        assert!(!a.lock().conns.contains_key(&flood[499].id));
        assert!(a.lock().conns.contains_key(&flood[500].id));
        assert!(a.lock().conns.contains_key(&scraper.id));
    }

    #[test]
    fn sockets_that_said_nothing_go_before_slow_senders_and_busy_ones_stay() {
        let a = Admission::default();
        let slow = a.admit(ip(1), false).unwrap();
        slow.heard.store(true, Ordering::Relaxed);
        let busy = a.admit(ip(1), false).unwrap();
        a.begin(busy.id);
        let mut silent = Vec::new();
        for _ in 0..MAX_PER_PEER - 2 {
            silent.push(a.admit(ip(1), false).unwrap());
        }
        // Newcomers push out the silent ones, oldest first...
        for s in &silent {
            let before = a.lock().conns.contains_key(&s.id);
            assert!(before);
            a.admit(ip(1), false).unwrap();
            assert!(!a.lock().conns.contains_key(&s.id));
        }
        // ... until only newer silent ones remain: those go before the slow sender.
        assert!(a.lock().conns.contains_key(&slow.id));
        assert!(a.lock().conns.contains_key(&busy.id));
    }

    #[test]
    fn a_request_waiting_at_accept_outlasts_a_flood_of_silent_sockets() {
        let a = Admission::default();
        let scraper = a.admit(ip(1), true).unwrap();
        for _ in 0..10 * MAX_PER_PEER {
            a.admit(ip(1), false).expect("room is made");
        }
        assert!(a.lock().conns.contains_key(&scraper.id));
        // Without its bytes it would have gone with the first of them.
        let silent = a.admit(ip(1), false).unwrap();
        for _ in 0..MAX_PER_PEER {
            a.admit(ip(1), false).unwrap();
        }
        assert!(!a.lock().conns.contains_key(&silent.id));
    }

    #[test]
    fn the_whole_is_bounded_and_the_largest_address_gives_way() {
        let a = Admission::default();
        let mut n = 0u8;
        // Many addresses, each under its own limit, fill the whole.
        while a.counts().0 < MAX_CONNECTIONS {
            for _ in 0..MAX_PER_PEER - 1 {
                if a.counts().0 < MAX_CONNECTIONS {
                    a.admit(ip(n), false).unwrap();
                }
            }
            n += 1;
        }
        let newcomer = a.admit(ip(200), false).unwrap();
        assert_eq!(a.counts().0, MAX_CONNECTIONS);
        // One of the two largest addresses gave one up.
        let t = a.lock();
        assert_eq!(
            t.per_peer[&ip(0)] + t.per_peer[&ip(1)],
            2 * (MAX_PER_PEER - 1) - 1
        );
        drop(t);
        assert!(a.lock().conns.contains_key(&newcomer.id));
        // Every connection busy and fresh: nothing can be pushed out.
        let ids: Vec<u64> = a.lock().conns.keys().copied().collect();
        for id in ids {
            a.begin(id);
        }
        assert!(a.admit(ip(201), false).is_none());
        assert_eq!(a.counts().0, MAX_CONNECTIONS);
    }

    #[test]
    fn idle_connections_are_swept() {
        let a = Admission::default();
        let c = a.admit(ip(1), false).unwrap();
        a.lock().conns.get_mut(&c.id).unwrap().idle_since =
            Some(Instant::now() - IDLE_TIMEOUT - Duration::from_millis(1));
        let busy = a.admit(ip(1), false).unwrap();
        a.begin(busy.id);
        a.sweep();
        assert_eq!(a.counts().0, 1);
        a.end(busy.id);
        a.left(busy.id);
        assert_eq!(a.counts().0, 0);
        assert!(a.lock().per_peer.is_empty());
    }
}
