//! The Rust side of the evaluation worker: a long-lived Python process per device speaking JSON lines
//! (`docs/formats.md` §3). This side owns every deadline. A request that outlives its deadline gets the
//! worker's whole process group killed; a worker that dies is reported with its exit signal and the tail
//! of its stderr. Either way the caller restarts it and the run goes on.

use crate::pyenv::PythonEnv;
use crate::target::Target;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const STDERR_TAIL_LINES: usize = 40;

#[derive(Debug, thiserror::Error)]
pub enum WorkerFailure {
    #[error("no reply within {0:.1} s; the worker's process group was killed")]
    Timeout(f64),
    #[error("the worker died ({status}){}", tail_suffix(.stderr))]
    Crashed { status: String, stderr: String },
    #[error("cannot start the worker: {0}")]
    Spawn(String),
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// `text` with every control character but the tab written as an escape (`\u{1b}`), so what candidate code
/// wrote on the worker's stderr can move no cursor and set no colour where it is shown.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\t' {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn tail_suffix(s: &str) -> String {
    if s.trim().is_empty() {
        String::new()
    } else {
        format!("; its stderr ended with:\n{}", s.trim_end())
    }
}

/// Spawns `cmd` from one thread that lives as long as this process. The worker asks the kernel to kill it
/// when its parent dies (`PR_SET_PDEATHSIG`), and Linux counts the *thread* that forked as the parent: a
/// worker forked by a thread that then ends (a device's thread of one batch, a worker start among several
/// at once) would be killed with it.
fn spawn_from_a_lasting_thread(cmd: Command) -> std::io::Result<Child> {
    type Order = (Command, std::sync::mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: std::sync::OnceLock<Mutex<std::sync::mpsc::Sender<Order>>> =
        std::sync::OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = channel::<Order>();
        std::thread::Builder::new()
            .name("ksearch-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("a thread to spawn workers from");
        Mutex::new(tx)
    });
    let (tx, rx) = channel();
    spawner
        .lock()
        .unwrap()
        .send((cmd, tx))
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
    rx.recv()
        .map_err(|_| std::io::Error::other("the spawner thread is gone"))?
}

/// A reply the worker sent: `ok` with a result, or an error it reported itself.
#[derive(Debug, Clone)]
pub enum Reply {
    Ok(Value),
    Err { kind: String, message: String },
}

enum Line {
    Text(String),
    Eof,
}

pub struct Worker {
    env: PythonEnv,
    target: Target,
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    rx: Option<Receiver<Line>>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    /// The progress slot of the thread whose request runs now: the worker's phase lines are shown in it.
    slot: Arc<Mutex<String>>,
    next_id: u64,
    /// Requests replayed after every restart (`load_task`), so a new worker is in the same state.
    preamble: Vec<(String, Value)>,
    pub restarts: u32,
    /// The worker's private working and temporary directory (removed with the worker).
    private: Option<std::path::PathBuf>,
    /// What the last spawn achieved of the sandbox (for `hello` and reports).
    pub sandbox: Value,
    /// Directories the worker may write beneath besides its private one (the build directory).
    pub writable: Vec<std::path::PathBuf>,
    /// Where the worker keeps the reference outputs of the run's input sets between restarts.
    pub reference_cache: Option<std::path::PathBuf>,
    /// The device it holds alone (`crate::devices`): the cores it is pinned to, or the one GPU it sees.
    pub device: crate::devices::Device,
}

impl Worker {
    pub fn new(env: PythonEnv, target: Target) -> Worker {
        Worker {
            env,
            target,
            child: None,
            stdin: None,
            rx: None,
            stderr_tail: Arc::new(Mutex::new(VecDeque::new())),
            slot: Arc::default(),
            next_id: 1,
            preamble: Vec::new(),
            restarts: 0,
            private: None,
            sandbox: Value::Null,
            writable: Vec::new(),
            reference_cache: None,
            device: Default::default(),
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    #[expect(
        clippy::too_many_lines,
        reason = "the worker's launch in order: path, environment, pinning, sandbox, pipes and their readers"
    )]
    fn spawn(&mut self) -> Result<(), WorkerFailure> {
        let mut cmd = Command::new(&self.env.python);
        // The worker package first; a PYTHONPATH the user set (e.g. where MLX is unpacked) stays behind it.
        let mut path = std::ffi::OsString::from(self.env.worker_path.as_os_str());
        if let Some(user) = std::env::var_os("PYTHONPATH").filter(|p| !p.is_empty()) {
            path.push(":");
            path.push(user);
        }
        let private = std::env::temp_dir().join(format!(
            "ksearch-worker-{}-{}",
            std::process::id(),
            crate::rng::splitmix(self.next_id ^ u64::from(self.restarts) << 32)
        ));
        std::fs::create_dir_all(&private)
            .map_err(|e| WorkerFailure::Spawn(format!("private dir {}: {e}", private.display())))?;
        // A bridge to a Ray actor runs no candidate code and must reach the cluster: the actor confines the
        // worker it starts on its node instead (python/ksearch_worker/ray_bridge.py).
        let bridge = self.device.ray.as_deref();
        crate::sandbox::confine(&mut cmd, self.target, &private, bridge.is_none());
        if bridge.is_some() {
            // Ray's own settings (a token-authenticated cluster's among them) reach the bridge, which runs no
            // candidate code; the actor drops them before it starts the worker.
            for (name, value) in std::env::vars_os() {
                if name.to_string_lossy().starts_with("RAY_") {
                    cmd.env(name, value);
                }
            }
        }
        if let Ok(w) = std::env::join_paths(&self.writable) {
            cmd.env("KSEARCH_WRITABLE", w);
        }
        if let Some(dir) = &self.reference_cache {
            cmd.env("KSEARCH_REFERENCE_CACHE", dir);
        }
        if let Some(gpu) = self.device.gpu {
            let inherited = std::env::var("CUDA_VISIBLE_DEVICES").ok();
            let visible = crate::devices::visible_gpu(gpu, inherited.as_deref())
                .map_err(WorkerFailure::Spawn)?;
            cmd.env("CUDA_VISIBLE_DEVICES", visible);
        }
        if let Some(cores) = self.device.cores.clone() {
            // Everything the worker starts (compilers, the kernel host) inherits the pinning.
            // SAFETY: `pin_self` makes one system call on a local set, async-signal-safe.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
                    crate::devices::pin_self(&cores);
                    Ok(())
                });
            }
        }
        match bridge {
            Some(address) => cmd.args([
                "-m",
                "ksearch_worker.ray_bridge",
                "--address",
                address,
                "--target",
                self.target.name(),
            ]),
            None => cmd.args(["-m", "ksearch_worker", "--target", self.target.name()]),
        };
        cmd.env("PYTHONPATH", path)
            .env("PYTHONUNBUFFERED", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Its own process group, so a timeout kills the worker and everything it started.
            .process_group(0);
        let mut child = spawn_from_a_lasting_thread(cmd).map_err(|e| {
            WorkerFailure::Spawn(format!(
                "{} -m ksearch_worker: {e}",
                self.env.python.display()
            ))
        })?;
        let stdout = child.stdout.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                match line {
                    Ok(l) => {
                        if tx.send(Line::Text(l)).is_err() {
                            return;
                        }
                    }
                    Err(_) => break,
                }
            }
            let _ = tx.send(Line::Eof);
        });
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail2 = tail.clone();
        let slot = self.slot.clone();
        std::thread::spawn(move || {
            // Read bytes, not UTF-8 lines: candidate code shares this pipe and may write anything; a reader
            // that stopped at the first invalid byte would leave the pipe undrained (the worker's next write
            // then fails or blocks).
            let mut reader = BufReader::new(stderr);
            let mut buf = Vec::new();
            loop {
                buf.clear();
                // At most 64 KiB a line: a candidate writing without newlines cannot grow this buffer.
                match std::io::BufRead::read_until(
                    &mut std::io::Read::take(&mut reader, 64 << 10),
                    b'\n',
                    &mut buf,
                ) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                // Control characters (a terminal's escape sequences among them) are shown, not sent: candidate
                // code writes here, and these lines reach the user's terminal (`-vv`, crash messages).
                let line = printable(String::from_utf8_lossy(&buf).trim_end_matches(['\n', '\r']));
                tracing::debug!(target: "worker", "{line}");
                if let Some(p) = crate::progress::Phase::from_worker_line(&line) {
                    let slot = slot.lock().unwrap().clone();
                    crate::progress::report_in(&slot, p);
                }
                let mut t = tail2.lock().unwrap();
                if t.len() == STDERR_TAIL_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
        self.sandbox = json!({
            "private_dir": true,
            "secrets_removed_from_env": true,
            "no_core_dumps": true,
            "file_size_limit_bytes": crate::sandbox::FILE_SIZE,
            "address_space_limit_bytes": (self.target == Target::Cpu).then_some(crate::sandbox::CPU_ADDRESS_SPACE),
            // A Ray actor's worker runs elsewhere: its hello's `remote` says whether it is isolated.
            "network_isolated": match bridge {
                None => crate::sandbox::network_isolated(child.id()),
                Some(_) => None,
            },
        });
        self.private = Some(private);
        self.stdin = child.stdin.take();
        self.child = Some(child);
        self.rx = Some(rx);
        self.stderr_tail = tail;
        Ok(())
    }

    /// Kills the worker's process group and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.id() as i32;
            // SAFETY: kill(2) with a negative pid signals the process group we created at spawn.
            unsafe {
                libc::kill(-pid, libc::SIGKILL);
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        self.stdin = None;
        self.rx = None;
        if let Some(p) = self.private.take() {
            let _ = std::fs::remove_dir_all(p);
        }
    }

    fn stderr_tail(&self) -> String {
        // Give the stderr thread a moment to drain what a dying process wrote.
        std::thread::sleep(Duration::from_millis(50));
        let t = self.stderr_tail.lock().unwrap();
        t.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    fn crashed(&mut self) -> WorkerFailure {
        let status = match self.child.as_mut().map(|c| c.wait()) {
            Some(Ok(s)) => match s.signal() {
                Some(sig) => format!("killed by signal {sig} ({})", signal_name(sig)),
                None => format!("exit status {}", s.code().unwrap_or(-1)),
            },
            _ => "unknown status".into(),
        };
        let stderr = self.stderr_tail();
        self.kill();
        WorkerFailure::Crashed { status, stderr }
    }

    /// Sends a request that every future worker must also see first (e.g. `load_task`).
    pub fn preamble(
        &mut self,
        op: &str,
        body: Value,
        deadline: Duration,
    ) -> Result<Reply, WorkerFailure> {
        self.preamble.push((op.to_string(), body.clone()));
        self.request(op, body, deadline)
    }

    fn ensure_started(&mut self, deadline: Duration) -> Result<(), WorkerFailure> {
        if self.child.is_some() {
            return Ok(());
        }
        self.spawn()?;
        for (op, body) in self.preamble.clone() {
            match self.send(&op, body, deadline)? {
                Reply::Ok(_) => {}
                Reply::Err { kind, message } => {
                    return Err(WorkerFailure::Protocol(format!(
                        "replaying `{op}` after a restart failed: {kind}: {message}"
                    )));
                }
            }
        }
        Ok(())
    }

    /// Sends one request and waits for its reply until `deadline`. On timeout or death the worker is
    /// gone; the next request starts a fresh one.
    pub fn request(
        &mut self,
        op: &str,
        body: Value,
        deadline: Duration,
    ) -> Result<Reply, WorkerFailure> {
        if self.child.is_none() && self.next_id > 1 {
            self.restarts += 1;
        }
        self.ensure_started(deadline)?;
        self.send(op, body, deadline)
    }

    fn send(
        &mut self,
        op: &str,
        mut body: Value,
        deadline: Duration,
    ) -> Result<Reply, WorkerFailure> {
        let id = self.next_id;
        self.next_id += 1;
        *self.slot.lock().unwrap() = crate::progress::slot();
        // A nonce the worker must echo: GPU candidates run inside the worker (CPU ones in a kernel host
        // of their own) and could write to its reply pipe, so a reply is believed only with the nonce of
        // its request, and any other line on the pipe is a forgery.
        // 64 bits from the OS for each request, so no nonce follows from an earlier one or from the time.
        let nonce = format!("{:016x}", crate::rng::os_random_u64());
        body["id"] = json!(id);
        body["op"] = json!(op);
        body["nonce"] = json!(nonce);
        let line = serde_json::to_string(&body).expect("request serialises") + "\n";
        let wrote = self
            .stdin
            .as_mut()
            .map(|s| s.write_all(line.as_bytes()).and_then(|_| s.flush()));
        if !matches!(wrote, Some(Ok(()))) {
            return Err(self.crashed());
        }
        let rx = self.rx.as_ref().expect("started");
        match rx.recv_timeout(deadline) {
            Ok(Line::Text(text)) => {
                let v: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
                if v["id"].as_u64() != Some(id) || v["nonce"].as_str() != Some(nonce.as_str()) {
                    // Not the reply to this request: written by the candidate, or the protocol broke.
                    // Either way nothing more from this worker can be trusted.
                    let head: String = text.chars().take(200).collect();
                    self.kill();
                    return Err(WorkerFailure::Protocol(format!(
                        "the worker's reply pipe carried a line that is not the reply to request {id} (a forged or corrupted reply; the worker was killed): {head}"
                    )));
                }
                if v["result"]["restart_worker"].as_bool() == Some(true)
                    || v["error"]["kind"].as_str() == Some("device_lost")
                {
                    // The candidate broke the worker's device context (a sticky CUDA error): this
                    // reply stands, and the next request starts a fresh worker.
                    self.kill();
                }
                Ok(if v["ok"].as_bool() == Some(true) {
                    Reply::Ok(v["result"].clone())
                } else {
                    Reply::Err {
                        kind: v["error"]["kind"].as_str().unwrap_or("unknown").to_string(),
                        message: v["error"]["message"].as_str().unwrap_or("").to_string(),
                    }
                })
            }
            Ok(Line::Eof) | Err(RecvTimeoutError::Disconnected) => Err(self.crashed()),
            Err(RecvTimeoutError::Timeout) => {
                self.kill();
                Err(WorkerFailure::Timeout(deadline.as_secs_f64()))
            }
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "SIGSEGV, invalid memory access",
        libc::SIGBUS => "SIGBUS, misaligned or invalid memory access",
        libc::SIGFPE => "SIGFPE, arithmetic fault",
        libc::SIGILL => "SIGILL, illegal instruction",
        libc::SIGABRT => "SIGABRT, abort",
        libc::SIGKILL => "SIGKILL",
        libc::SIGXCPU => "SIGXCPU, CPU time limit",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn what_candidate_code_writes_on_stderr_is_shown_not_obeyed() {
        // Clear the screen, ring the bell, a C1 control sequence introducer: all shown as escapes.
        let line = "ksearch-worker: ok\t\u{1b}[2J\u{7}é\u{9b}31m";
        assert_eq!(
            super::printable(line),
            "ksearch-worker: ok\t\\u{1b}[2J\\u{7}é\\u{9b}31m"
        );
    }
}
