//! A command line as the model (`command:CMDLINE`), for command-line coding agents: run through
//! `sh -c` in its own process group, the prompt on stdin, the reply on stdout. The deadline kills the
//! whole group, so an agent and everything it started go together.

use super::{Backend, Failure, LlmError, Message, Reply, Request, Role};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::{Duration, Instant};

const STDERR_TAIL_LINES: usize = 20;

pub(crate) struct Command {
    cmdline: String,
}

impl Command {
    pub fn new(cmdline: &str) -> Command {
        Command {
            cmdline: cmdline.to_string(),
        }
    }
}

/// The messages as plain text, each under a `## Role` header.
pub fn render_prompt(messages: &[Message]) -> String {
    let mut s = String::new();
    for m in messages {
        let head = match m.role {
            Role::System => "System",
            Role::User => "User",
            Role::Assistant => "Assistant",
        };
        if !s.is_empty() {
            s.push('\n');
        }
        s.push_str(&format!("## {head}\n\n{}\n", m.content.trim_end()));
    }
    s
}

fn kill_group(child: &mut Child) {
    // SAFETY: kill(2) with a negative pid signals the process group we created at spawn.
    unsafe {
        libc::kill(-(child.id() as i32), libc::SIGKILL);
    }
    let _ = child.kill();
}

fn read_all(mut r: impl Read + Send + 'static) -> Receiver<Vec<u8>> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = r.read_to_end(&mut buf);
        let _ = tx.send(buf);
    });
    rx
}

fn tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().collect();
    let skip = lines.len().saturating_sub(STDERR_TAIL_LINES);
    lines[skip..].join("\n")
}

impl Backend for Command {
    fn call(&mut self, req: &Request, timeout: Duration) -> Result<Reply, Failure> {
        let start = Instant::now();
        let mut child = std::process::Command::new("sh")
            .arg("-c")
            .arg(&self.cmdline)
            .env("KSEARCH_LLM_PURPOSE", &req.purpose)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| {
                LlmError::Command(format!("cannot start `sh -c {}`: {e}", self.cmdline))
            })?;
        // Write from a thread: a command that never reads stdin must not block us past the deadline.
        let mut stdin = child.stdin.take().expect("piped");
        let prompt = render_prompt(&req.messages);
        std::thread::spawn(move || {
            let _ = stdin.write_all(prompt.as_bytes());
        });
        let out = read_all(child.stdout.take().expect("piped"));
        let err = read_all(child.stderr.take().expect("piped"));
        let timed_out = || LlmError::Timeout {
            after_s: timeout.as_secs_f64(),
        };
        let status = loop {
            match child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) if start.elapsed() >= timeout => {
                    kill_group(&mut child);
                    let _ = child.wait();
                    return Err(timed_out().into());
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(e) => {
                    kill_group(&mut child);
                    return Err(
                        LlmError::Command(format!("cannot wait for the command: {e}")).into(),
                    );
                }
            }
        };
        // Whatever the shell left running in the background goes too (it could hold our pipes).
        kill_group(&mut child);
        let left = timeout
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(100));
        let stdout = out.recv_timeout(left).map_err(|_| timed_out())?;
        let stderr = err.recv_timeout(left).unwrap_or_default();
        if !status.success() {
            let how = match status.signal() {
                Some(sig) => format!("was killed by signal {sig}"),
                None => format!("exited with status {}", status.code().unwrap_or(-1)),
            };
            let tail = tail(&stderr);
            let tail = match tail.trim().is_empty() {
                true => String::new(),
                false => format!("; its stderr ended with:\n{tail}"),
            };
            return Err(LlmError::Command(format!("`{}` {how}{tail}", self.cmdline)).into());
        }
        let text = String::from_utf8_lossy(&stdout).trim_end().to_string();
        if text.trim().is_empty() {
            return Err(LlmError::BadBody(format!("`{}` printed nothing", self.cmdline)).into());
        }
        Ok(Reply { text, usage: None })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompt_has_role_headers() {
        let p = render_prompt(&[Message::system("be brief"), Message::user("hi\n")]);
        assert_eq!(p, "## System\n\nbe brief\n\n## User\n\nhi\n");
    }
}
