//! The confinement of a compiler ksearch itself runs over candidate code: `ksearch check` compiles a Metal
//! kernel with the system's C++ compiler, so whatever the kernel `#include`s is read by that compiler.
//! The policy is the worker's jail's (`python/ksearch_worker/jail.py`), whose list of readable system paths
//! this shares: the compiler reads only the system's headers and tools and its own scratch folder (Landlock),
//! writes only there, opens no TCP connection or port and signals nothing outside (Landlock ABI 4 and 6), runs
//! as a user of its own when ksearch is root (so no two confined commands share a user's process limit or
//! files), under resource limits, and what it starts lives in PID and network namespaces of its own (as root;
//! the PID namespace is emptied when the compiler's first child ends). Linux only; elsewhere the
//! command runs as it is (`docs/sandbox.md`).

use std::path::Path;
use std::process::Command;

/// What candidate code may read besides its folder (one path per line, `#` comments).
const SYSTEM_READ: &str = include_str!("../../../python/ksearch_worker/jail_read.txt");
/// The range of unprivileged uids (and gids) a root ksearch runs confined commands as, one per command:
/// the worker's jail draws its own from the same range (`jail.UID_BASE`).
const UID_BASE: u32 = 1_000_000;
const UID_SPAN: u32 = 1_000_000_000;

/// A uid no other confined command is likely to hold.
fn fresh_uid() -> u32 {
    UID_BASE + (ksearch_model::rng::os_random_u64() % u64::from(UID_SPAN)) as u32
}

/// The readable system paths of the shared list.
pub fn system_read() -> impl Iterator<Item = &'static str> {
    SYSTEM_READ
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

/// A confined command's rule set, held open until the command has been spawned (drop it afterwards).
pub struct Jail {
    /// The Landlock ABI in force in the command (0: none here).
    pub landlock_abi: i32,
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    fd: i32,
}

impl Drop for Jail {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        if self.fd >= 0 {
            // SAFETY: a descriptor this module opened; the child holds its own copy.
            unsafe {
                libc::close(self.fd);
            }
        }
    }
}

/// Confines `cmd`, which must run in `folder` and name its files relative to it (as its own user it may not
/// be able to walk a path through its parents). When ksearch is root the folder is handed to that user. The rule set is built here, with this process's rights, and
/// enforced in the child before it runs; keep the returned `Jail` until the command was spawned.
pub fn confine(cmd: &mut Command, folder: &Path) -> Jail {
    cmd.current_dir(folder);
    #[cfg(target_os = "linux")]
    {
        let (fd, abi) = linux::confine(cmd, folder, fresh_uid());
        Jail {
            landlock_abi: abi,
            fd,
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        Jail {
            landlock_abi: 0,
            fd: -1,
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::system_read;
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    use std::path::Path;
    use std::process::Command;

    const CREATE_RULESET: libc::c_long = 444;
    const ADD_RULE: libc::c_long = 445;
    const RESTRICT_SELF: libc::c_long = 446;
    const RULE_PATH_BENEATH: libc::c_int = 1;
    const EXECUTE: u64 = 1;
    const WRITE_FILE: u64 = 1 << 1;
    const READ_FILE: u64 = 1 << 2;
    const READ_DIR: u64 = 1 << 3;
    const TRUNCATE: u64 = 1 << 14;
    const FILE_RIGHTS: u64 = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE;

    #[repr(C)]
    struct RulesetAttr {
        handled_access_fs: u64,
        /// ABI 4: TCP bind and connect; handled with no rule granting a port, so none is allowed.
        handled_access_net: u64,
        /// ABI 6: signals and abstract Unix sockets to processes outside the domain.
        scoped: u64,
    }

    /// The size of `RulesetAttr` the kernel's ABI reads (older kernels refuse fields they do not know).
    fn attr_size(abi: i64) -> usize {
        match abi {
            ..=3 => 8,
            4 | 5 => 16,
            _ => 24,
        }
    }

    #[repr(C, packed)]
    struct PathBeneath {
        allowed_access: u64,
        parent_fd: i32,
    }

    /// Every file-system right the kernel's ABI knows.
    fn all_rights(abi: i64) -> u64 {
        let mut r = (1u64 << 13) - 1; // ABI 1: EXECUTE .. MAKE_SYM
        if abi >= 2 {
            r |= 1 << 13; // REFER
        }
        if abi >= 3 {
            r |= TRUNCATE;
        }
        if abi >= 5 {
            r |= 1 << 15; // IOCTL_DEV
        }
        r
    }

    /// A rule set granting reads of the system paths and everything within `folder`; -1 without Landlock.
    fn ruleset(folder: &Path) -> (i32, i64) {
        // SAFETY: plain system calls on values we own; a failure only means no Landlock.
        unsafe {
            let abi = libc::syscall(
                CREATE_RULESET,
                std::ptr::null::<RulesetAttr>(),
                0usize,
                1u32,
            );
            if abi < 1 {
                return (-1, 0);
            }
            let every = all_rights(abi);
            let attr = RulesetAttr {
                handled_access_fs: every,
                handled_access_net: if abi >= 4 { 0b11 } else { 0 },
                scoped: if abi >= 6 { 0b11 } else { 0 },
            };
            let fd = libc::syscall(
                CREATE_RULESET,
                &attr as *const RulesetAttr,
                attr_size(abi),
                0u32,
            ) as i32;
            if fd < 0 {
                return (-1, 0);
            }
            // Read the system's paths; write the folder and the null device (compilers discard output there).
            let rules = system_read()
                .map(|p| (Path::new(p).to_path_buf(), EXECUTE | READ_FILE | READ_DIR))
                .chain([
                    (folder.to_path_buf(), every),
                    (Path::new("/dev/null").to_path_buf(), every),
                ]);
            for (path, rights) in rules {
                let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
                    continue;
                };
                let pfd = libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC);
                if pfd < 0 {
                    continue;
                }
                let allowed = if path.is_dir() {
                    rights
                } else {
                    rights & FILE_RIGHTS
                };
                let rule = PathBeneath {
                    allowed_access: allowed & every,
                    parent_fd: pfd,
                };
                libc::syscall(
                    ADD_RULE,
                    fd,
                    RULE_PATH_BENEATH,
                    &rule as *const PathBeneath,
                    0u32,
                );
                libc::close(pfd);
            }
            (fd, abi)
        }
    }

    pub fn confine(cmd: &mut Command, folder: &Path, uid: u32) -> (i32, i32) {
        let (fd, abi) = ruleset(folder);
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        if root {
            use std::os::unix::fs::PermissionsExt;
            // The folder becomes the command's own and no one else's; a failure shows as the command's
            // inability to write there.
            let _ = std::os::unix::fs::chown(folder, Some(uid), Some(uid));
            let _ = std::fs::set_permissions(folder, std::fs::Permissions::from_mode(0o700));
        }
        // SAFETY: between fork and exec only async-signal-safe system calls on values prepared above.
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
                limit(libc::RLIMIT_NOFILE, 256);
                limit(libc::RLIMIT_FSIZE, 64 << 20);
                limit(libc::RLIMIT_NPROC, 256);
                // What the compiler starts (its cc1plus, an assembler) lives in a namespace of its own, with
                // no network (as root; Landlock's TCP rules hold either way).
                libc::unshare(libc::CLONE_NEWPID);
                libc::unshare(libc::CLONE_NEWNET);
                if root {
                    libc::setgroups(0, std::ptr::null());
                    if libc::setgid(uid) != 0 || libc::setuid(uid) != 0 {
                        return Err(std::io::Error::other("cannot become an unprivileged user"));
                    }
                }
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                if fd >= 0 {
                    if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                        || libc::syscall(RESTRICT_SELF, fd, 0u32) != 0
                    {
                        return Err(std::io::Error::other("Landlock could not be applied"));
                    }
                    libc::close(fd);
                }
                Ok(())
            });
        }
        (fd, abi as i32)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confined_command_reads_its_folder_and_the_system_but_nothing_else() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let outside = tempfile::tempdir().unwrap();
        let secret = outside.path().join("secret.txt");
        std::fs::write(&secret, "no").unwrap();
        let folder = tempfile::tempdir().unwrap();
        std::fs::write(folder.path().join("mine.txt"), "yes").unwrap();
        // The command's first child is the first process of its PID namespace (the namespace ends with it),
        // so the work runs in an inner shell, as a compiler's work runs in its driver's first child.
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(format!(
            "/bin/sh -c 'cat mine.txt; cat {} 2>/dev/null || echo denied; echo $$'; true",
            secret.display()
        ));
        let jail = confine(&mut cmd, folder.path());
        let out = cmd.output().unwrap();
        let abi = jail.landlock_abi;
        drop(jail);
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(text.starts_with("yes"), "{text} {err}");
        if abi > 0 {
            assert!(text.contains("denied"), "{text} {err}");
        }
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            // As root the inner shell is the first process of a PID namespace of its own.
            assert!(text.trim_end().ends_with("\n1"), "{text}");
        }
    }

    #[test]
    fn a_confined_command_reaches_no_tcp_port() {
        if !cfg!(target_os = "linux") {
            return;
        }
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let folder = tempfile::tempdir().unwrap();
        let mut cmd = Command::new("python3");
        cmd.arg("-c").arg(format!(
            "import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), 2)\n print('reached')\n\
             except OSError as e:\n print('cut off', e)"
        ));
        let jail = confine(&mut cmd, folder.path());
        let out = cmd.output().unwrap();
        let abi = jail.landlock_abi;
        drop(jail);
        let text = String::from_utf8_lossy(&out.stdout);
        let err = String::from_utf8_lossy(&out.stderr);
        // SAFETY: geteuid has no preconditions.
        if abi >= 4 || unsafe { libc::geteuid() } == 0 {
            assert!(text.starts_with("cut off"), "{text} {err}");
        }
    }
}
