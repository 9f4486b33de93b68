//! A tiny scripted HTTP/1.1 server for testing clients for real: it listens on 127.0.0.1:0, answers
//! the n-th connection with the n-th step of its script (one request per connection, then close),
//! records every request, and stops when dropped. Each connection is served on its own thread, so a
//! step that stalls does not hold up the next one.

use serde_json::Value;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One scripted reply.
#[derive(Debug, Clone)]
pub struct Step {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// Wait this long after reading the request before replying.
    pub delay_before: Duration,
    /// Read the request, then hang up without a word.
    pub close_without_reply: bool,
    /// Announce the full Content-Length but send only this many body bytes, then hang up.
    pub truncate_body_after_n_bytes: Option<usize>,
}

impl Step {
    pub fn raw(status: u16, body: &str) -> Step {
        Step {
            status,
            headers: Vec::new(),
            body: body.to_string(),
            delay_before: Duration::ZERO,
            close_without_reply: false,
            truncate_body_after_n_bytes: None,
        }
    }

    pub fn json(status: u16, body: &Value) -> Step {
        Step::raw(status, &body.to_string())
    }

    pub fn ok(body: &Value) -> Step {
        Step::json(200, body)
    }

    pub fn hang_up() -> Step {
        Step {
            close_without_reply: true,
            ..Step::raw(200, "")
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Step {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn delay(mut self, d: Duration) -> Step {
        self.delay_before = d;
        self
    }

    pub fn truncate_after(mut self, n: usize) -> Step {
        self.truncate_body_after_n_bytes = Some(n);
        self
    }
}

/// A request as the server saw it. Header names are lowercase.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("request body is not JSON ({e}): {}", self.body))
    }
}

pub struct Server {
    port: u16,
    requests: Arc<Mutex<Vec<(usize, Recorded)>>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

/// Chooses the reply to the n-th request from the request itself.
pub type Handler = Arc<dyn Fn(usize, &Recorded) -> Step + Send + Sync>;

impl Server {
    /// Answers the n-th request with the n-th step of `script` (a 500 once it is exhausted).
    pub fn start(script: Vec<Step>) -> Server {
        Server::route(move |n, _| {
            script.get(n).cloned().unwrap_or_else(|| {
                Step::raw(
                    500,
                    "{\"error\": \"the test server's script is exhausted\"}",
                )
            })
        })
    }

    /// Answers each request with what `handler` makes of it (a scripted LLM that reads the prompt).
    pub fn route(handler: impl Fn(usize, &Recorded) -> Step + Send + Sync + 'static) -> Server {
        let handler: Handler = Arc::new(handler);
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let next = Arc::new(AtomicUsize::new(0));
        let (reqs, stop2) = (requests.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if stop2.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let n = next.fetch_add(1, Ordering::SeqCst);
                let (handler, reqs) = (handler.clone(), reqs.clone());
                std::thread::spawn(move || serve(conn, n, &handler, &reqs));
            }
        });
        Server {
            port,
            requests,
            stop,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The requests so far, in the order their connections were accepted.
    pub fn requests(&self) -> Vec<Recorded> {
        let mut r = self.requests.lock().unwrap().clone();
        r.sort_by_key(|(n, _)| *n);
        r.into_iter().map(|(_, r)| r).collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(mut conn: TcpStream, n: usize, handler: &Handler, reqs: &Mutex<Vec<(usize, Recorded)>>) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let Some(req) = read_request(&mut conn) else {
        return; // the wake-up connection of Drop, or a client that gave up
    };
    let step = handler(n, &req);
    reqs.lock().unwrap().push((n, req));
    std::thread::sleep(step.delay_before);
    if step.close_without_reply {
        let _ = conn.shutdown(Shutdown::Both);
        return;
    }
    let body = step.body.as_bytes();
    let mut head = format!("HTTP/1.1 {} {}\r\n", step.status, reason(step.status));
    if !step
        .headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
    {
        head.push_str("Content-Type: application/json\r\n");
    }
    for (k, v) in &step.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let sent = step
        .truncate_body_after_n_bytes
        .map_or(body.len(), |t| t.min(body.len()));
    let _ = conn.write_all(head.as_bytes());
    let _ = conn.write_all(&body[..sent]);
    let _ = conn.flush();
    let _ = conn.shutdown(Shutdown::Both);
}

fn read_request(conn: &mut TcpStream) -> Option<Recorded> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        let n = conn.read(&mut chunk).ok().filter(|&n| n > 0)?;
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next()?.split_whitespace();
    let (method, path) = (first.next()?.to_string(), first.next()?.to_string());
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(k, _)| k == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[head_end + 4..].to_vec();
    while body.len() < len {
        let n = conn.read(&mut chunk).ok().filter(|&n| n > 0)?;
        body.extend_from_slice(&chunk[..n]);
    }
    Some(Recorded {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Status",
    }
}
