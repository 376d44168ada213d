//! The daemon's HTTP endpoint: `/metrics` (Prometheus text format),
//! `/healthz`, on hyper's HTTP/1 server, in the daemon's tokio runtime.
//!
//! A client cannot hurt the daemon nor keep a scraper out: malformed
//! requests get hyper's 400 and the connection is closed; headers must
//! arrive within [`HEADER_TIMEOUT`]; which connections stay open under a
//! flood (held, reopened or slow ones) is `admission`'s choice: bounded in
//! all and per address, the oldest idle ones make room for newcomers,
//! idle ones are closed after a few seconds; a connection is closed after
//! [`CONNECTION_LIMIT`] (once its request in flight is answered); errors
//! of `accept` (out of file descriptors) are waited out. `/metrics` is
//! written in chunks of [`CHUNK`] bytes, each rendered under the lock when
//! the connection can take it: a body is never held whole.

use std::convert::Infallible;
use std::io::IoSlice;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

use crate::commands::daemon::admission::Admission;
use crate::commands::daemon::admission::IDLE_TIMEOUT;
use crate::outputs::metrics::Cursor;
use crate::outputs::metrics::Metrics;

pub(super) const HEADER_TIMEOUT: Duration = IDLE_TIMEOUT;
pub(super) const CONNECTION_LIMIT: Duration = Duration::from_secs(120);
pub(super) const CHUNK: usize = 64 * 1024;
/// How often idle connections and overdue responses are looked for.
const SWEEP_EVERY: Duration = Duration::from_millis(500);

/// The exposition format's content type.
const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";

/// Says (one line) when the metrics can be reached from the network.
pub(super) fn warn_if_exposed(addr: SocketAddr) {
    if !addr.ip().to_canonical().is_loopback() {
        crate::say!(
            "WARNING: --listen {addr} is not a loopback address: anyone who can reach it reads the metrics (process ids, commands, kernel names, container and pod ids); restrict it with a firewall or a network policy"
        );
    }
}

/// Serves until the task is dropped.
pub(super) async fn serve(listener: TcpListener, metrics: Arc<Mutex<Metrics>>) {
    let admission = Admission::default();
    let sweeper = {
        let a = admission.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(SWEEP_EVERY);
            loop {
                tick.tick().await;
                a.sweep();
            }
        })
    };
    let _sweeper = AbortOnDrop(sweeper);
    let mut accept_error_said = false;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                if !accept_error_said {
                    crate::say!("accepting a metrics connection failed: {e} (retrying)");
                    accept_error_said = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(admitted) = admission.admit(peer.ip().to_canonical(), waiting(&stream)) else {
            drop(stream);
            continue;
        };
        tokio::spawn(connection(
            stream,
            admitted,
            admission.clone(),
            metrics.clone(),
        ));
        // Its task reads the request before the next of a backlog is let
        // in (a scraper's request, once read, is not pushed out).
        tokio::task::yield_now().await;
    }
}

/// Whether a request's first bytes already wait in `stream` (a scraper's
/// arrive with its connection; a held-open socket's never do).
fn waiting(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut b = [0u8; 1];
    // SAFETY: a one-byte buffer we own, on the stream's open descriptor;
    // MSG_PEEK leaves the byte for hyper, MSG_DONTWAIT never blocks.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            b.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// Aborts a task when dropped (the sweep ends with the server).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn connection(
    stream: TcpStream,
    admitted: crate::commands::daemon::admission::Admitted,
    admission: Admission,
    metrics: Arc<Mutex<Metrics>>,
) {
    let id = admitted.id;
    let a = admission.clone();
    let service = service_fn(move |req| {
        let metrics = metrics.clone();
        let guard = RequestGuard::begin(a.clone(), id);
        async move { Ok::<_, Infallible>(tracked(respond(&req, metrics), guard)) }
    });
    let io = TokioIo::new(Heard {
        inner: stream,
        heard: admitted.heard,
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(64 * 1024)
        .serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        // Pushed out for a newcomer, idle too long, or a response overdue:
        // dropped at once.
        _ = admitted.close.notified() => {}
        _ = tokio::time::sleep(CONNECTION_LIMIT) => {
            // Old keep-alive connections (a scraper's) end after the
            // request in flight; a client that does not read its answer
            // is cut off a little later.
            conn.as_mut().graceful_shutdown();
            tokio::select! {
                _ = tokio::time::timeout(HEADER_TIMEOUT, conn) => {}
                _ = admitted.close.notified() => {}
            }
        }
    }
    admission.left(id);
}

/// Marks a request in flight until its response is written or dropped.
struct RequestGuard {
    admission: Admission,
    id: u64,
}

impl RequestGuard {
    fn begin(admission: Admission, id: u64) -> Self {
        admission.begin(id);
        Self { admission, id }
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.admission.end(self.id);
    }
}

/// `response` with the guard of its request in its body.
fn tracked(response: Response<Payload>, guard: RequestGuard) -> Response<Reply> {
    let (parts, body) = response.into_parts();
    Response::from_parts(
        parts,
        Reply {
            body,
            _guard: guard,
        },
    )
}

/// A response body, and the guard that ends its request when dropped.
pub(super) struct Reply {
    body: Payload,
    _guard: RequestGuard,
}

impl Body for Reply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The connection's socket, noting when a request's first byte arrives
/// (`admission` keeps such connections before silent ones).
struct Heard {
    inner: TcpStream,
    heard: Arc<AtomicBool>,
}

impl AsyncRead for Heard {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.heard.store(true, Ordering::Relaxed);
        }
        r
    }
}

impl AsyncWrite for Heard {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A response body: fixed bytes, or the exposition rendered chunk by chunk.
pub(super) enum Payload {
    Fixed(Option<Bytes>),
    Metrics {
        metrics: Arc<Mutex<Metrics>>,
        cursor: Cursor,
    },
}

impl Body for Payload {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let next = match self.get_mut() {
            Payload::Fixed(b) => b.take(),
            Payload::Metrics { metrics, cursor } => {
                // A panic elsewhere while holding the lock leaves the
                // counters usable: serve them.
                let m = metrics.lock().unwrap_or_else(|p| p.into_inner());
                m.render_chunk(cursor, CHUNK).map(Bytes::from)
            }
        };
        Poll::Ready(next.map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self, Payload::Fixed(None))
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Payload::Fixed(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            Payload::Metrics { .. } => SizeHint::default(),
        }
    }
}

fn reply(status: StatusCode, content_type: &'static str, body: Payload) -> Response<Payload> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn text(status: StatusCode, body: &'static str) -> Response<Payload> {
    reply(
        status,
        PLAIN,
        Payload::Fixed(Some(Bytes::from_static(body.as_bytes()))),
    )
}

fn respond(req: &Request<Incoming>, metrics: Arc<Mutex<Metrics>>) -> Response<Payload> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => reply(
            StatusCode::OK,
            METRICS_TYPE,
            Payload::Metrics {
                metrics,
                cursor: Cursor::default(),
            },
        ),
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/" => text(StatusCode::OK, "gputrace daemon: metrics at /metrics\n"),
        _ => text(StatusCode::NOT_FOUND, "not found: try /metrics\n"),
    }
}
