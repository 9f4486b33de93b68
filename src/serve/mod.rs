//! `ksearch serve`: a local web dashboard over the store, live while runs go.
//!
//! Invariants:
//! - **Read-only.** The store is opened with `Store::open_read` (SQLite read-only); only GET and HEAD are
//!   answered. Nothing a page does can change a run.
//! - **Nothing leaves the machine.** Pages, style and script are the binary's own (`templates/`), every chart
//!   is SVG drawn here, and the Content-Security-Policy forbids the browser any other origin.
//! - **Loopback unless asked.** The default bind is 127.0.0.1, and a loopback server answers only requests
//!   whose Host names it (a web page elsewhere cannot reach it through DNS rebinding). Another address needs
//!   `--expose`, and says on stderr that anyone who reaches it reads every run.
//! - **Live without a reload.** `/events` sends the store's change mark (`Store::change_mark`) whenever it
//!   changes; `dashboard.js` fetches its page again when the mark differs from the one the page was drawn
//!   from, and swaps the page's `<main>`.

mod pages;

use crate::store::Store;
use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Path as UrlPath, Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use pages::Page;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const CSS: &str = include_str!("../../templates/report.css");
const SCRIPT: &str = include_str!("../../templates/dashboard/dashboard.js");

/// How often a live page's connection looks at the store.
const POLL: Duration = Duration::from_millis(400);

/// The browser may load this server's own style, script and pages, and nothing else.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                   connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'";

pub struct Options {
    pub store_dir: PathBuf,
    pub addr: SocketAddr,
    /// Allows a non-loopback `addr`.
    pub expose: bool,
}

/// Binds, calls `ready` with the address it listens on, and serves until the process ends.
pub fn serve(opts: Options, ready: impl FnOnce(SocketAddr)) -> Result<()> {
    if !opts.addr.ip().is_loopback() && !opts.expose {
        anyhow::bail!(
            "--bind {} is not a loopback address: anyone who can reach it would read every run in the store \
             (candidate sources, LLM replies); pass --expose to serve there anyway, or leave --bind at 127.0.0.1",
            opts.addr.ip()
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the dashboard's runtime")?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(opts.addr)
            .await
            .with_context(|| format!("binding {} (another --port?)", opts.addr))?;
        let addr = listener.local_addr()?;
        let hosts = addr.ip().is_loopback().then(|| {
            let port = addr.port();
            vec![
                format!("127.0.0.1:{port}"),
                format!("localhost:{port}"),
                format!("[::1]:{port}"),
            ]
        });
        let shared = Arc::new(Shared {
            label: opts.store_dir.display().to_string(),
            dir: opts.store_dir,
            store: Mutex::new(None),
            hosts,
        });
        ready(addr);
        axum::serve(listener, router(shared))
            .await
            .context("serving the dashboard")
    })
}

struct Shared {
    dir: PathBuf,
    label: String,
    /// Opened on the first request that finds a store (a server may start before the first run).
    store: Mutex<Option<Store>>,
    /// The Host values a loopback server answers (None: exposed, any).
    hosts: Option<Vec<String>>,
}

impl Shared {
    /// `f` with the store (None while there is none) and its change mark, under the one connection's lock.
    fn with<T>(&self, f: impl FnOnce(Option<&Store>, &str, &str) -> Result<T>) -> Result<T> {
        let mut slot = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if slot.is_none() {
            *slot = Store::open_read(&self.dir)?;
        }
        let mark = match slot.as_ref() {
            Some(s) => format!("{}/{}", s.change_mark()?, live_mark(&self.dir)),
            None => "no store".to_string(),
        };
        f(slot.as_ref(), &self.label, &mark)
    }

    fn mark(&self) -> Result<String> {
        self.with(|_, _, mark| Ok(mark.to_string()))
    }
}

/// What the running runs' live files (`progress::LiveFile`) hold, summarised: their names, sizes and times.
fn live_mark(dir: &std::path::Path) -> String {
    let mut files: Vec<String> = std::fs::read_dir(dir.join("live"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            let t = m
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some(format!(
                "{}:{}:{}",
                e.file_name().to_string_lossy(),
                m.len(),
                t.as_nanos()
            ))
        })
        .collect();
    files.sort();
    blake3::hash(files.join("|").as_bytes()).to_hex()[..12].to_string()
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(runs))
        .route("/run/{id}", get(run))
        .route("/run/{id}/diff/{candidate}", get(diff))
        .route("/compare", get(compare))
        .route("/events", get(events))
        .route("/assets/report.css", get(|| asset(CSS, "text/css")))
        .route(
            "/assets/dashboard.js",
            get(|| asset(SCRIPT, "text/javascript")),
        )
        .fallback(|| async { not_found("no such page") })
        .layer(middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared)
}

/// Every request: a loopback server checks the Host (DNS rebinding), only reads are answered, and every
/// answer carries the policy that keeps the browser on this server.
async fn guard(State(shared): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    if let Some(hosts) = &shared.hosts {
        let host = req
            .headers()
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("");
        if !hosts.iter().any(|h| h == host) {
            return (
                StatusCode::FORBIDDEN,
                "this dashboard answers only requests addressed to its loopback address",
            )
                .into_response();
        }
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, "the dashboard is read-only").into_response();
    }
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    resp
}

async fn asset(body: &'static str, kind: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

fn not_found(what: &str) -> Response {
    let page = format!(
        "<!DOCTYPE html><title>not found</title><p>{}. <a href=\"/\">All runs</a>.</p>",
        crate::report::svg::esc(what)
    );
    (StatusCode::NOT_FOUND, Html(page)).into_response()
}

/// Draws a page off the async threads (SQLite and templates block).
async fn page(
    shared: Arc<Shared>,
    draw: impl FnOnce(Option<&Store>, &str, &str) -> Result<Page> + Send + 'static,
) -> Response {
    match tokio::task::spawn_blocking(move || shared.with(draw)).await {
        Ok(Ok(Page::Found(html))) => Html(html).into_response(),
        Ok(Ok(Page::NotFound(what))) => not_found(&what),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the page could not be drawn: {e:#}"),
        )
            .into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("drawing the page failed: {e}"),
        )
            .into_response(),
    }
}

async fn runs(State(shared): State<Arc<Shared>>) -> Response {
    page(shared, pages::runs).await
}

async fn run(State(shared): State<Arc<Shared>>, UrlPath(id): UrlPath<String>) -> Response {
    page(shared, move |store, _, mark| pages::run(store, &id, mark)).await
}

async fn diff(
    State(shared): State<Arc<Shared>>,
    UrlPath((id, candidate)): UrlPath<(String, String)>,
) -> Response {
    page(shared, move |store, label, mark| {
        pages::diff(store, label, &id, &candidate, mark)
    })
    .await
}

#[derive(serde::Deserialize)]
struct Pair {
    a: Option<String>,
    b: Option<String>,
}

async fn compare(State(shared): State<Arc<Shared>>, Query(pair): Query<Pair>) -> Response {
    let (Some(a), Some(b)) = (pair.a, pair.b) else {
        return (
            StatusCode::BAD_REQUEST,
            "compare two runs: /compare?a=RUN&b=RUN (the form on the runs page fills it)",
        )
            .into_response();
    };
    page(shared, move |store, label, mark| {
        pages::compare(store, label, &a, &b, mark)
    })
    .await
}

/// The store's change mark, sent at once and again whenever it changes (with keep-alives between).
async fn events(
    State(shared): State<Arc<Shared>>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, std::convert::Infallible>>> {
    let stream =
        futures_util::stream::unfold((shared, None::<String>), |(shared, last)| async move {
            loop {
                let s = shared.clone();
                let mark = match tokio::task::spawn_blocking(move || s.mark()).await {
                    Ok(Ok(m)) => m,
                    Ok(Err(e)) => format!("unreadable: {e:#}"),
                    Err(_) => "unreadable".to_string(),
                };
                if last.as_deref() != Some(mark.as_str()) {
                    let event = Event::default().event("mark").data(mark.clone());
                    return Some((Ok(event), (shared, Some(mark))));
                }
                tokio::time::sleep(POLL).await;
            }
        });
    Sse::new(stream).keep_alive(KeepAlive::default())
}
