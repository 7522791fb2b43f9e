//! The agent's HTTP endpoint (`execprof agent --listen`): `GET /metrics` in the format the
//! scraper asks for, `/debug/pprof/exec` (a pprof profile of the last N seconds' exec
//! samples), `/healthz`, `/readyz`. It routes to `render::metrics` and owns no
//! figures. What a bad client can do is bounded: the request head must arrive within
//! [`HEADER_TIMEOUT`] and fit in [`MAX_HEAD_BYTES`], at most [`MAX_CONNECTIONS`] are served at
//! once (the next get a 503 and are closed), and each answer is encoded under a lock the
//! agent's reads take only to fold a delta in, so no scrape stops the counting.
use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, Result};
use http_body_util::Full;
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Incoming},
    header,
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::Semaphore};

use crate::{
    analysis::profile_window::ProfileWindow,
    render::{
        metrics::{Format, MetricsState, encode},
        pprof,
    },
};

pub(crate) mod web_config;

pub(crate) use web_config::WebConfig;

/// How long a client may take to send its request head.
pub(crate) const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest request head read.
pub(crate) const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Connections served at once.
pub(crate) const MAX_CONNECTIONS: usize = 256;

/// What the endpoint serves from.
#[derive(Clone)]
pub(crate) struct Shared {
    /// The figures a scrape encodes.
    pub metrics: Arc<Mutex<MetricsState>>,
    /// Set once the kernel's maps were read a first time.
    pub ready: Arc<AtomicBool>,
    /// TLS and basic auth (`--web-config`).
    pub web: WebConfig,
    /// The sampled exec stacks of the last `--profile-window` seconds (None: not sampling).
    pub profiles: Option<Arc<Mutex<ProfileWindow>>>,
    /// The sampling rate, for the profiles' period.
    pub sample_hz: u64,
    /// When the agent started, for a profile's time.
    pub started: SystemTime,
}

/// Binds `addr` (before the agent drops its privileges: a port below 1024 is allowed).
pub(crate) async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .with_context(|| format!("listening on {addr} failed: is another agent (or exporter) using it? choose another with --listen"))
}

/// Serves connections from `listener` until the task is dropped.
pub(crate) async fn serve(listener: TcpListener, shared: Shared) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait, and go on serving.
                log::warn!("accepting a connection failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let permit = permits.clone().try_acquire_owned();
        let shared = shared.clone();
        tokio::spawn(async move {
            let busy = permit.is_err();
            match shared.web.tls.clone() {
                // The handshake, too, must end within the head's time.
                Some(tls) => match tokio::time::timeout(HEADER_TIMEOUT, tls.accept(stream)).await {
                    Ok(Ok(stream)) => connection(TokioIo::new(stream), shared, busy, peer).await,
                    Ok(Err(e)) => log::debug!("TLS handshake with {peer} failed: {e}"),
                    Err(_) => log::debug!("TLS handshake with {peer} timed out"),
                },
                None => connection(TokioIo::new(stream), shared, busy, peer).await,
            }
            drop(permit);
        });
    }
}

/// Serves one connection's requests.
async fn connection<I>(io: I, shared: Shared, busy: bool, peer: SocketAddr)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let service = service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(if busy { too_busy() } else { answer(req, shared).await }) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(!busy)
        .serve_connection(io, service);
    if let Err(e) = conn.await {
        log::debug!("connection from {peer}: {e}");
    }
}

/// Checks the credentials (when basic auth is configured), then routes.
async fn answer(req: Request<Incoming>, shared: Shared) -> Response<Full<Bytes>> {
    if let Some(auth) = shared.web.auth.clone() {
        let header = req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).map(str::to_owned);
        // bcrypt takes tens of ms: off the event loop that reads the kernel's maps.
        let ok = tokio::task::spawn_blocking(move || auth.check(header.as_deref())).await.unwrap_or(false);
        if !ok {
            let mut r = text(StatusCode::UNAUTHORIZED, "unauthorized: give the user and password of --web-config's basic_auth_users\n");
            r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Basic realm=\"execprof\""));
            return r;
        }
    }
    route(&req, &shared)
}

fn too_busy() -> Response<Full<Bytes>> {
    let mut r = text(StatusCode::SERVICE_UNAVAILABLE, "too many connections at once; retry\n");
    r.headers_mut().insert(header::CONNECTION, header::HeaderValue::from_static("close"));
    r
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
    *r.status_mut() = status;
    r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

/// The answer to one request.
fn route(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD are served\n");
        r.headers_mut().insert(header::ALLOW, header::HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let mut r = match req.uri().path() {
        "/metrics" => metrics(req, shared),
        "/debug/pprof/exec" => profile(req, shared),
        "/healthz" => text(StatusCode::OK, "ok\n"),
        "/readyz" if shared.ready.load(Ordering::Acquire) => text(StatusCode::OK, "ready\n"),
        "/readyz" => text(StatusCode::SERVICE_UNAVAILABLE, "not ready: the kernel's maps have not been read yet\n"),
        "/" => text(
            StatusCode::OK,
            "execprof agent\n/metrics                      Prometheus metrics (text, OpenMetrics, protobuf by Accept)\n/debug/pprof/exec?seconds=N   the kernel stacks sampled inside exec attempts in the last N seconds (pprof)\n/healthz                      liveness\n/readyz                       readiness\n",
        ),
        _ => text(StatusCode::NOT_FOUND, "not found: this endpoint serves /metrics, /debug/pprof/exec, /healthz and /readyz\n"),
    };
    if req.method() == Method::HEAD {
        *r.body_mut() = Full::new(Bytes::new());
    }
    r
}

fn metrics(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let accept = req.headers().get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    match encode(&shared.metrics, format) {
        Ok(body) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static(format.content_type()));
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("encoding the metrics failed: {e}\n")),
    }
}

/// The seconds a profile covers when the request names none (as Go's /debug/pprof/profile).
pub(crate) const DEFAULT_PROFILE_SECONDS: u64 = 30;

/// `GET /debug/pprof/exec?seconds=N`: the kernel stacks sampled inside exec attempts in the
/// last N seconds, as a gzipped pprof profile, at once (the window is kept as the agent reads
/// the kernel's maps; nothing waits N seconds).
fn profile(req: &Request<Incoming>, shared: &Shared) -> Response<Full<Bytes>> {
    let Some(window) = &shared.profiles else {
        return text(
            StatusCode::NOT_FOUND,
            "no profiles: this agent samples no kernel stacks (--sample-hz 0); start it with --sample-hz N\n",
        );
    };
    let span = window.lock().unwrap_or_else(|p| p.into_inner()).span();
    let seconds = match profile_seconds(req.uri().query(), span.as_secs()) {
        Ok(s) => s,
        Err(why) => return text(StatusCode::BAD_REQUEST, &format!("{why}\n")),
    };
    let now = std::time::Instant::now();
    let period_ns = 1_000_000_000u64.checked_div(shared.sample_hz).unwrap_or(0);
    let last = window.lock().unwrap_or_else(|p| p.into_inner()).last(Duration::from_secs(seconds), now, period_ns);
    let end = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    let start = end.saturating_sub(last.covered).max(shared.started.duration_since(UNIX_EPOCH).unwrap_or_default());
    match pprof::from_window(&last, shared.sample_hz, start.as_nanos() as i64).gzipped() {
        Ok(body) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut().insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/octet-stream"));
            r.headers_mut().insert(header::CONTENT_DISPOSITION, header::HeaderValue::from_static("attachment; filename=\"exec.pb.gz\""));
            r
        }
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &format!("encoding the profile failed: {e}\n")),
    }
}

/// The `seconds` of a profile request's query: a whole number from 1 to the window's span
/// (`DEFAULT_PROFILE_SECONDS`, or the span if shorter, when absent); other parameters are
/// ignored.
fn profile_seconds(query: Option<&str>, span: u64) -> Result<u64, String> {
    let given = query.unwrap_or_default().split('&').filter_map(|p| p.split_once('=')).find(|(k, _)| *k == "seconds").map(|(_, v)| v);
    let Some(v) = given else { return Ok(DEFAULT_PROFILE_SECONDS.min(span)) };
    match v.parse::<u64>() {
        Ok(n) if (1..=span).contains(&n) => Ok(n),
        _ => Err(format!(
            "bad request: seconds={} is not a whole number from 1 to {span}, the seconds this agent keeps (--profile-window)",
            crate::model::names::escape_name(v.as_bytes())
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_profiles_seconds_are_checked_against_the_window() {
        assert_eq!(profile_seconds(None, 300), Ok(30));
        assert_eq!(profile_seconds(Some("seconds=5"), 300), Ok(5));
        assert_eq!(profile_seconds(Some("debug=0&seconds=300"), 300), Ok(300));
        assert_eq!(profile_seconds(Some("gc=1"), 10), Ok(10), "the default, within a short window");
        for bad in ["seconds=0", "seconds=301", "seconds=-1", "seconds=1.5", "seconds=", "seconds=%1b[31m"] {
            let e = profile_seconds(Some(bad), 300).unwrap_err();
            assert!(e.contains("from 1 to 300") && !e.contains('\x1b'), "{bad}: {e}");
        }
    }
}
