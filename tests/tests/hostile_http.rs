//! Issue 14, the daemon's HTTP side given what is not a polite scrape:
//! oversized headers, pipelined and HTTP/1.0 requests, bytes that are not
//! HTTP, other paths and methods, a huge announced body. Each gets the
//! right status (or a closed connection), within a time limit; the daemon
//! still serves /metrics afterwards, in bounded memory. (Floods of idle and
//! slow connections: metrics_flood.rs.)

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use gputrace_tests::node::{http_get, rss_kib, Daemon};

/// Sends `raw` on a new connection and reads what comes back until the
/// daemon closes it or 10 s pass (then whatever came, and `timed_out`).
fn exchange(addr: &str, raw: &[u8]) -> (String, bool) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The daemon may answer and close before all of a big request is sent.
    let _ = s.write_all(raw);
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let timed_out = loop {
        match s.read(&mut buf) {
            Ok(0) => break false,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                break true
            }
            Err(_) => break false, // reset: closed
        }
    };
    (String::from_utf8_lossy(&got).into_owned(), timed_out)
}

/// Status codes of the responses in `text`, in order.
fn statuses(text: &str) -> Vec<u16> {
    text.match_indices("HTTP/1.")
        .filter_map(|(i, _)| text[i..].split(' ').nth(1)?.parse().ok())
        .collect()
}

#[test]
fn hostile_requests_get_the_right_answers() {
    let d = Daemon::start(&[], &[]);
    let a = d.addr.as_str();
    let rss_before = rss_kib(d.pid());

    // Pipelined: two requests in one write, two answers in order.
    let (r, _) = exchange(
        a,
        format!("GET /healthz HTTP/1.1\r\nHost: {a}\r\n\r\nGET /nope HTTP/1.1\r\nHost: {a}\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    assert_eq!(statuses(&r), vec![200, 404], "{r}");

    // HTTP/1.0, no Host: answered, then closed (no keep-alive asked).
    let (r, timed_out) = exchange(a, b"GET /metrics HTTP/1.0\r\n\r\n");
    assert_eq!(statuses(&r)[..1], [200], "{r}");
    assert!(!timed_out, "an HTTP/1.0 connection left open");
    assert!(r.contains("gputrace_probes_attached"));

    // Methods other than GET and HEAD: 405 naming what is allowed; HEAD: no body.
    for m in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FROB"] {
        let (r, _) = exchange(
            a,
            format!("{m} /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").as_bytes(),
        );
        assert_eq!(statuses(&r), vec![405], "{m}: {r}");
        assert!(
            r.to_ascii_lowercase().contains("allow: get, head"),
            "{m}: {r}"
        );
    }
    let (r, _) = exchange(
        a,
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(statuses(&r), vec![200], "{r}");
    assert!(r.ends_with("\r\n\r\n"), "HEAD answered with a body: {r}");

    // A huge announced body on a refused method: answered at once, never read.
    let (r, timed_out) = exchange(
        a,
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000000\r\n\r\nxxxx",
    );
    assert_eq!(statuses(&r)[..1], [405], "{r}");
    assert!(!timed_out, "the daemon waited for a 100 GB body");

    // Other paths: 404, traversal and query strings included.
    for p in [
        "/metricsx",
        "/../../etc/passwd",
        "/metrics/..",
        "//metrics",
        "/%00",
        "/healthz/x",
    ] {
        let (r, _) = exchange(
            a,
            format!("GET {p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        );
        assert_eq!(statuses(&r), vec![404], "{p}: {r}");
    }
    let (r, _) = exchange(
        a,
        b"GET /metrics?x=1&y HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(statuses(&r), vec![200], "{r}");

    // Oversized headers: refused (431) or closed, never buffered without end.
    let mut big = b"GET /metrics HTTP/1.1\r\nHost: x\r\n".to_vec();
    for i in 0..4000 {
        big.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "a".repeat(100)).as_bytes());
    }
    big.extend_from_slice(b"\r\n");
    let (r, timed_out) = exchange(a, &big);
    assert!(!timed_out, "400 KB of headers: no answer, no close");
    assert!(statuses(&r).iter().all(|s| *s == 431 || *s == 400), "{r}");
    // One header line of 1 MB, without an end.
    let mut long = b"GET /metrics HTTP/1.1\r\nX-Long: ".to_vec();
    long.extend(std::iter::repeat_n(b'a', 1 << 20));
    let (r, timed_out) = exchange(a, &long);
    assert!(!timed_out, "a 1 MB header line: no answer, no close");
    assert!(statuses(&r).iter().all(|s| *s == 431 || *s == 400), "{r}");

    // Not HTTP: a TLS ClientHello, binary noise, a bare newline flood.
    let tls = b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\x00\x01\x02\x03";
    let noise: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let newlines = vec![b'\n'; 100_000];
    for raw in [
        &tls[..],
        &noise[..],
        &newlines[..],
        b"GET\r\n\r\n",
        b"GET / HTTP/9.9\r\n\r\n",
    ] {
        let (r, timed_out) = exchange(a, raw);
        assert!(
            !timed_out,
            "no answer and no close to {:?}",
            &raw[..raw.len().min(16)]
        );
        assert!(statuses(&r).iter().all(|s| (400..=505).contains(s)), "{r}");
    }

    // Still serving, and memory is where it was (within 16 MiB).
    let (status, body) = http_get(a, "/metrics");
    assert_eq!(status, 200);
    assert!(body.contains("gputrace_probes_attached"));
    let rss_after = rss_kib(d.pid());
    assert!(
        rss_after < rss_before + 16 * 1024,
        "RSS {rss_before} KiB -> {rss_after} KiB"
    );
}
