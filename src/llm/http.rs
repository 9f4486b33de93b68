//! The one HTTP exchange every web provider makes: POST JSON, get JSON, and say precisely what went
//! wrong otherwise (timeout, transport, status, truncated or non-JSON body).

use super::config::{Endpoint, is_loopback};
use super::{Failure, LlmError, retry};
use reqwest::blocking::Client;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use serde_json::Value;
use std::time::Duration;

const EXCERPT_CHARS: usize = 600;

pub(crate) fn client(base_url: &str) -> Result<Client, LlmError> {
    let mut b = Client::builder()
        .user_agent(concat!("ksearch/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30));
    // A proxy configured for the outside world must not capture calls to a local server.
    if reqwest::Url::parse(base_url).is_ok_and(|u| is_loopback(&u)) {
        b = b.no_proxy();
    }
    b.build()
        .map_err(|e| LlmError::Config(format!("cannot set up the HTTP client: {}", chain(&e))))
}

/// Headers with the key marked sensitive (kept out of reqwest's own Debug output).
pub(crate) fn headers(ep: &Endpoint, auth: Option<(&'static str, String)>) -> HeaderMap {
    let mut h = HeaderMap::new();
    if let Some((name, value)) = auth
        && ep.key.is_some()
        && let Ok(mut v) = HeaderValue::from_str(&value)
    {
        v.set_sensitive(true);
        h.insert(HeaderName::from_static(name), v);
    }
    h
}

/// Sends `body` and returns the reply's JSON.
pub(crate) fn post_json(
    client: &Client,
    url: &str,
    headers: HeaderMap,
    body: &Value,
    timeout: Duration,
) -> Result<Value, Failure> {
    let timed_out = || LlmError::Timeout {
        after_s: timeout.as_secs_f64(),
    };
    let resp = client
        .post(url)
        .headers(headers)
        .timeout(timeout)
        .json(body)
        .send()
        .map_err(|e| {
            if e.is_timeout() {
                timed_out()
            } else {
                LlmError::Transport(chain(&e))
            }
        })?;
    let status = resp.status();
    let retry_after = resp
        .headers()
        .get(RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| retry::parse_retry_after(v, crate::clock::now()));
    let bytes = resp.bytes().map_err(|e| {
        if e.is_timeout() {
            timed_out()
        } else {
            LlmError::BadBody(format!("the reply was cut short: {}", chain(&e)))
        }
    });
    if status.as_u16() == 429 {
        return Err(Failure {
            error: LlmError::RateLimited {
                retry_after_s: retry_after.map(|d| (d.as_secs_f64() * 1000.0).round() / 1000.0),
                body_excerpt: bytes.map(|b| excerpt(&b)).unwrap_or_default(),
            },
            retry_after,
        });
    }
    if !status.is_success() {
        return Err(Failure {
            error: LlmError::Http {
                status: status.as_u16(),
                body_excerpt: bytes.map(|b| excerpt(&b)).unwrap_or_default(),
            },
            retry_after,
        });
    }
    let bytes = bytes?;
    serde_json::from_slice(&bytes).map_err(|e| {
        let what = if e.is_eof() {
            "the reply was cut short"
        } else {
            "the reply is not JSON"
        };
        LlmError::BadBody(format!("{what} ({e}): {}", excerpt(&bytes))).into()
    })
}

/// The start of a body, for error messages.
pub(crate) fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    match text.char_indices().nth(EXCERPT_CHARS) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// A JSON value's excerpt (for "no text in the reply" messages).
pub(crate) fn json_excerpt(v: &Value) -> String {
    excerpt(v.to_string().as_bytes())
}

/// An error with its causes: reqwest's top-level message alone rarely says what happened.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        let m = c.to_string();
        if !s.contains(&m) {
            s.push_str(": ");
            s.push_str(&m);
        }
        src = c.source();
    }
    s
}
