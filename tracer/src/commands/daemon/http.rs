//! The daemon's HTTP endpoint: `/metrics` (Prometheus text format),
//! `/healthz`, on hyper's HTTP/1 server, in the daemon's tokio runtime.
//!
//! A client cannot hurt the daemon: malformed requests get hyper's 400 and
//! the connection is closed; headers must arrive within
//! [`HEADER_TIMEOUT`]; a connection lives at most [`CONNECTION_LIMIT`]; at
//! most [`MAX_CONNECTIONS`] are served at once (more are closed at accept);
//! errors of `accept` (out of file descriptors) are waited out.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::export::prometheus::Metrics;

pub const MAX_CONNECTIONS: usize = 64;
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(120);

/// The exposition format's content type.
const METRICS_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

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
                async move { Ok::<_, Infallible>(respond(&req, &metrics)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_buf_size(64 * 1024)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIMIT, conn).await;
            drop(slot);
        });
    }
}

fn text(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

fn respond(req: &Request<Incoming>, metrics: &Mutex<Metrics>) -> Response<Full<Bytes>> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, PLAIN, "only GET and HEAD\n");
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    match req.uri().path() {
        "/metrics" => {
            // A copy, rendered without the lock: the tracing loop records
            // calls meanwhile. A panic elsewhere while holding the lock
            // leaves the counters usable: serve them.
            let snapshot = metrics
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .clone();
            let body = snapshot.render();
            text(StatusCode::OK, METRICS_TYPE, body)
        }
        "/healthz" => text(StatusCode::OK, PLAIN, "ok\n"),
        "/" => text(
            StatusCode::OK,
            PLAIN,
            "gputrace daemon: metrics at /metrics\n",
        ),
        _ => text(StatusCode::NOT_FOUND, PLAIN, "not found: try /metrics\n"),
    }
}
