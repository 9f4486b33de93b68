//! What a worker, and the candidate code it runs, is confined to. `docs/sandbox.md` says what is and is
//! not isolated on each OS.
//!
//! Applied when the worker is spawned: a private working and temporary directory, an environment without
//! credentials, resource limits (no core dumps, bounded file size, bounded address space on the CPU target),
//! and on Linux a network namespace of its own (no network), best effort.

use crate::target::Target;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// Markers of secret variable names, shared with the Ray bridge's scrub on a cluster's nodes.
const SECRET_MARKERS: &str = include_str!("../python/ksearch_worker/secret_markers.txt");

/// Environment variables a candidate must never see: provider keys and anything that looks like a secret.
pub fn is_secret(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    SECRET_MARKERS
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .any(|p| n.contains(p))
}

/// Address-space limit of CPU workers: enough for any built-in workload, far from the machine's memory.
pub const CPU_ADDRESS_SPACE: u64 = 16 << 30;
/// Largest file a worker may write.
pub const FILE_SIZE: u64 = 4 << 30;

/// `candidate_code`: the process runs candidates (a worker), so it gets the CPU target's address-space limit
/// and network namespace; a bridge to a Ray actor does not, and needs the network.
pub fn confine(cmd: &mut Command, target: Target, private: &Path, candidate_code: bool) {
    for (name, _) in std::env::vars_os() {
        if is_secret(&name.to_string_lossy()) {
            cmd.env_remove(&name);
        }
    }
    cmd.current_dir(private)
        .env("TMPDIR", private)
        .env("TMP", private)
        .env("TEMP", private)
        .env("HOME", private);
    let cpu = target == Target::Cpu && candidate_code;
    // SAFETY: only async-signal-safe system calls between fork and exec; failures are ignored on purpose
    // (a limit the system refuses leaves the worker less confined, not broken).
    unsafe {
        cmd.pre_exec(move || {
            let limit = |res, v: u64| {
                let r = libc::rlimit {
                    rlim_cur: v as libc::rlim_t,
                    rlim_max: v as libc::rlim_t,
                };
                libc::setrlimit(res, &r);
            };
            limit(libc::RLIMIT_CORE, 0);
            limit(libc::RLIMIT_FSIZE, FILE_SIZE);
            if cpu {
                // Not on GPU targets: CUDA reserves far more address space than it uses.
                limit(libc::RLIMIT_AS, CPU_ADDRESS_SPACE);
                #[cfg(target_os = "linux")]
                {
                    // A network namespace of its own: as root directly, otherwise inside a user namespace.
                    if libc::unshare(libc::CLONE_NEWNET) != 0 {
                        libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNET);
                    }
                }
            }
            Ok(())
        });
    }
}

/// Whether process `pid` runs in another network namespace than this one (Linux).
pub fn network_isolated(pid: u32) -> Option<bool> {
    let own = std::fs::read_link("/proc/self/ns/net").ok()?;
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/net")).ok()?;
    Some(own != theirs)
}

#[cfg(test)]
mod tests {
    #[test]
    fn secrets_are_recognised() {
        for n in [
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "aws_secret_access_key",
            "DB_PASSWORD",
            "HF_TOKEN",
        ] {
            assert!(super::is_secret(n), "{n}");
        }
        for n in ["PATH", "HOME", "PYTHONPATH", "CUDA_VISIBLE_DEVICES", "LANG"] {
            assert!(!super::is_secret(n), "{n}");
        }
    }
}
