//! The daemon's HTTP endpoint: `/metrics` (Prometheus text format),
//! `/healthz`, on hyper's HTTP/1 server, in the daemon's tokio runtime.
//!
//! A client cannot hurt the daemon: malformed requests get hyper's 400 and
//! the connection is closed; headers must arrive within
//! [`HEADER_TIMEOUT`]; a connection is closed after [`CONNECTION_LIMIT`]
//! (once its request in flight is answered); at
//! most [`MAX_CONNECTIONS`] are served at once (more are closed at accept);
//! errors of `accept` (out of file descriptors) are waited out. `/metrics`
//! is written in chunks of [`CHUNK`] bytes, each rendered under the lock
//! when the connection can take it: a body is never held whole.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Body, Bytes, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::sinks::metrics::{Cursor, Metrics};

pub const MAX_CONNECTIONS: usize = 64;
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(120);
pub const CHUNK: usize = 64 * 1024;

/// The exposition format's content type.
const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
const PLAIN: &str = "text/plain; charset=utf-8";

/// Serves until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Mutex<Metrics>>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut accept_error_said = false;
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(e) => {
                if !accept_error_said {
                    eprintln!("gputrace: accepting a metrics connection failed: {e} (retrying)");
                    accept_error_said = true;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let metrics = metrics.clone();
                async move { Ok::<_, Infallible>(respond(&req, metrics)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(64 * 1024)
                .serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = tokio::time::sleep(CONNECTION_LIMIT) => {
                    // Old keep-alive connections (a scraper's) end after the
                    // request in flight; a client that does not read its
                    // answer is cut off a little later.
                    conn.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(HEADER_TIMEOUT, conn).await;
                }
            }
            drop(slot);
        });
    }
}

/// A response body: fixed bytes, or the exposition rendered chunk by chunk.
pub enum Payload {
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
