//! Root tests: `/metrics` stays available to a scraper while local clients
//! flood the daemon with idle, reopening and slow connections; the daemon
//! warns when it listens beyond loopback.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gputrace_tests::node::{non_link_fds, Daemon};
use gputrace_tests::*;

/// Whether the server has closed `s` (non-blocking peek).
fn closed(s: &TcpStream) -> bool {
    let mut b = [0u8; 1];
    s.set_nonblocking(true).ok();
    let r = s.peek(&mut b);
    s.set_nonblocking(false).ok();
    !matches!(r, Err(ref e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Attackers sharing the scraper's address (127.0.0.1), until `stop`:
/// `idle` connections held open and reopened as soon as the daemon closes
/// them, `reopeners` threads connecting and dropping in a loop, `slow`
/// connections sending a request header one byte every 500 ms.
fn flood(
    addr: &str,
    idle: usize,
    reopeners: usize,
    slow: usize,
    stop: &Arc<AtomicBool>,
    opened: &Arc<AtomicU64>,
) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    let (a, s, o) = (addr.to_string(), stop.clone(), opened.clone());
    threads.push(std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        while !s.load(Ordering::Relaxed) {
            held.retain(|c| !closed(c));
            while held.len() < idle {
                match TcpStream::connect(&a) {
                    Ok(c) => {
                        o.fetch_add(1, Ordering::Relaxed);
                        held.push(c);
                    }
                    Err(_) => break,
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }));
    for _ in 0..reopeners {
        let (a, s, o) = (addr.to_string(), stop.clone(), opened.clone());
        threads.push(std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                if let Ok(c) = TcpStream::connect(&a) {
                    o.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(5));
                    drop(c);
                }
            }
        }));
    }
    let (a, s, o) = (addr.to_string(), stop.clone(), opened.clone());
    threads.push(std::thread::spawn(move || {
        let header = b"GET /metrics HTTP/1.1\r\nHost: flood\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let mut conns: Vec<(TcpStream, usize)> = Vec::new();
        while !s.load(Ordering::Relaxed) {
            conns.retain(|(c, _)| !closed(c));
            while conns.len() < slow {
                match TcpStream::connect(&a) {
                    Ok(c) => {
                        o.fetch_add(1, Ordering::Relaxed);
                        conns.push((c, 0));
                    }
                    Err(_) => break,
                }
            }
            for (c, at) in conns.iter_mut() {
                let _ = c.write_all(&header[*at % header.len()..*at % header.len() + 1]);
                *at += 1;
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }));
    threads
}

/// GET /metrics with a bound of 10 s on connecting and on each read:
/// (status, body length, whether it is the exposition).
fn scrape(addr: &str) -> std::io::Result<(u16, usize, bool)> {
    let bound = Duration::from_secs(10);
    let mut s = TcpStream::connect_timeout(&addr.parse().unwrap(), bound)?;
    s.set_read_timeout(Some(bound))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: scraper\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((
        status,
        raw.len(),
        text.contains("# TYPE gputrace_api_calls_total counter"),
    ))
}

#[test]
fn metrics_are_served_to_a_scraper_through_a_connection_flood() {
    let mut d = Daemon::start(&[], &[]);
    let addr = d.addr.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let threads = flood(&addr, 300, 4, 50, &stop, &opened);
    // Let the flood fill every slot first.
    std::thread::sleep(Duration::from_secs(2));
    let t0 = Instant::now();
    const SCRAPES: usize = 20;
    let mut ok = 0;
    let mut latencies = Vec::new();
    let mut failures = Vec::new();
    let mut most_fds = 0;
    for _ in 0..SCRAPES {
        let start = Instant::now();
        // A bound, not a timing target: a scrape that takes this long failed.
        match scrape(&addr) {
            Ok((200, _, true)) => {
                ok += 1;
                latencies.push(start.elapsed());
            }
            other => failures.push(format!("{other:?} after {:?}", start.elapsed())),
        }
        most_fds = most_fds.max(non_link_fds(d.pid()));
        std::thread::sleep(Duration::from_millis(500));
    }
    let flood_secs = t0.elapsed().as_secs_f64() + 2.0;
    stop.store(true, Ordering::Relaxed);
    for t in threads {
        let _ = t.join();
    }
    latencies.sort();
    let ms = |d: &Duration| d.as_secs_f64() * 1e3;
    println!(
        "scrapes: {ok} of {SCRAPES} succeeded under a flood of {} connections in {flood_secs:.1} s \
         ({:.0}/s); latency min {:.1} ms, median {:.1} ms, max {:.1} ms; the daemon held at most {most_fds} descriptors",
        opened.load(Ordering::Relaxed),
        opened.load(Ordering::Relaxed) as f64 / flood_secs,
        latencies.first().map(ms).unwrap_or(f64::NAN),
        latencies.get(latencies.len() / 2).map(ms).unwrap_or(f64::NAN),
        latencies.last().map(ms).unwrap_or(f64::NAN),
    );
    assert_eq!(ok, SCRAPES, "failed scrapes: {failures:?}");
    // Connections stay bounded whatever the flood (a few hundred).
    assert!(most_fds < 600, "the daemon held {most_fds} descriptors");
    assert!(
        d.tracer.child.try_wait().unwrap().is_none(),
        "the daemon died"
    );
    // And it still answers once the flood is over.
    assert!(d.metrics().contains("gputrace_probes_attached"));
}

#[test]
fn a_daemon_listening_beyond_loopback_says_so() {
    let mut t = Tracer::spawn(&["daemon", "--listen", "0.0.0.0:0"]);
    let line = t
        .stderr
        .wait_for("gputrace: serving metrics at", Duration::from_secs(60));
    let port = line
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches("/metrics");
    t.stderr
        .wait_for("gputrace: attached", Duration::from_secs(60));
    // It serves there (on loopback too: 0.0.0.0 is every address).
    let mut s = TcpStream::connect(format!("127.0.0.1:{port}")).unwrap();
    s.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    assert!(r.ends_with("ok\n"), "{r}");
    std::thread::sleep(Duration::from_millis(300));
    t.signal(libc::SIGTERM);
    let f = t.finish(Duration::from_secs(30));
    let warnings: Vec<&String> = f
        .stderr
        .iter()
        .filter(|l| l.contains("not a loopback address"))
        .collect();
    assert_eq!(warnings.len(), 1, "{:?}", f.stderr);
    assert!(
        warnings[0].starts_with("gputrace: WARNING: --listen 0.0.0.0:"),
        "{}",
        warnings[0]
    );

    // On loopback: no warning.
    let d = Daemon::start(&[], &[]);
    let Daemon { tracer, .. } = d;
    std::thread::sleep(Duration::from_millis(300));
    tracer.signal(libc::SIGTERM);
    let f = tracer.finish(Duration::from_secs(30));
    assert!(!f.stderr_text().contains("loopback"), "{}", f.stderr_text());
}
