//! The Python the worker runs on. By default ksearch manages its own virtual environment: created on
//! first use from the pinned `python/requirements.txt`, named by the hash of that file, reused after.
//! `--python` / `KSEARCH_PYTHON` use another interpreter instead (it must already have numpy).

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Clone)]
pub struct PythonEnv {
    pub python: PathBuf,
    /// Folder to put on PYTHONPATH: it holds the `ksearch_worker` package.
    pub worker_path: PathBuf,
    pub managed: bool,
}

fn venv_dir() -> PathBuf {
    crate::builtin::cache_root().join(venv_dir_name())
}

/// The managed environment's folder name: by the hash of the pinned requirements.
pub fn venv_dir_name() -> String {
    let h = blake3::hash(crate::builtin::requirements().as_bytes()).to_hex();
    format!("venv-{}", &h[..12])
}

fn base_python() -> String {
    std::env::var("KSEARCH_BASE_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("{what}: cannot start {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// `pip install -r requirements` into the environment of `python`.
fn pip_install(python: &Path, requirements: &Path, what: &str) -> Result<()> {
    run(
        Command::new(python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(requirements),
        what,
    )
}

/// The managed environment's lock, held until the file is dropped: one creator or installer at a time,
/// whether the others are concurrent runs, parallel test processes or threads of one test process (each
/// call opens the file anew, and the lock belongs to that open file).
fn lock_venv() -> Result<std::fs::File> {
    std::fs::create_dir_all(crate::builtin::cache_root())?;
    let lock_path = crate::builtin::cache_root().join("venv.lock");
    let lock = std::fs::File::create(&lock_path)
        .with_context(|| format!("creating {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    Ok(lock)
}

/// Finds or creates the worker's Python. `explicit` comes from `--python` or `KSEARCH_PYTHON`.
pub fn ensure(explicit: Option<&Path>) -> Result<PythonEnv> {
    let worker_path = crate::builtin::python_dir()?;
    if let Some(p) = explicit {
        return Ok(PythonEnv {
            python: p.to_path_buf(),
            worker_path,
            managed: false,
        });
    }
    let dir = venv_dir();
    let python = dir.join("bin").join("python");
    let ready = dir.join(".ksearch-ready");
    if ready.exists() {
        crate::builtin::mark_used(&dir);
        return Ok(PythonEnv {
            python,
            worker_path,
            managed: true,
        });
    }
    let _lock = lock_venv()?;
    if !ready.exists() {
        eprintln!(
            "ksearch: creating the worker's Python environment in {} (first use only)",
            dir.display()
        );
        let _ = std::fs::remove_dir_all(&dir);
        run(
            Command::new(base_python()).args(["-m", "venv"]).arg(&dir),
            "creating the virtual environment (set KSEARCH_BASE_PYTHON to pick the interpreter)",
        )?;
        pip_install(
            &python,
            &worker_path.join("requirements.txt"),
            "installing the worker's pinned packages",
        )?;
        std::fs::write(&ready, crate::builtin::requirements())?;
    }
    Ok(PythonEnv {
        python,
        worker_path,
        managed: true,
    })
}

impl PythonEnv {
    /// Makes sure the packages `target` needs are there. The managed environment gets MLX installed on
    /// first use of an MLX target; an interpreter given with `--python` is used as it is.
    pub fn ensure_target(&self, target: crate::target::Target) -> Result<()> {
        if !target.is_gpu() {
            return Ok(());
        }
        if target == crate::target::Target::Cuda {
            return self.install_extra(
                "requirements-cuda.txt",
                ".ksearch-cuda-ready",
                "installing CuPy and NVRTC for the cuda target (first use)",
            );
        }
        self.install_extra(
            "requirements-mlx.txt",
            ".ksearch-mlx-ready",
            "installing MLX for the MLX targets (first use of an MLX target)",
        )
    }

    /// Makes sure Ray is there for `--cluster`: installed into the managed environment on first use; an
    /// interpreter given with `--python` is used as it is (the bridge says how to install it if missing).
    pub fn ensure_ray(&self) -> Result<()> {
        self.install_extra(
            "requirements-ray.txt",
            ".ksearch-ray-ready",
            "installing Ray for --cluster (first use)",
        )
    }

    /// Installs the worker package's `requirements` file into the managed environment unless the `marker`
    /// beside it says it was, with the same content: a changed pin installs again. Nothing for `--python`.
    fn install_extra(&self, requirements: &str, marker: &str, what: &str) -> Result<()> {
        if !self.managed {
            return Ok(());
        }
        let file = self.worker_path.join(requirements);
        let wanted = std::fs::read_to_string(&file)?;
        let ready = self
            .python
            .parent()
            .and_then(Path::parent)
            .map(|v| v.join(marker));
        let installed = || {
            ready
                .as_ref()
                .and_then(|r| std::fs::read_to_string(r).ok())
                .is_some_and(|t| t == wanted)
        };
        if installed() {
            return Ok(());
        }
        let _lock = lock_venv()?;
        if installed() {
            return Ok(()); // installed by whoever held the lock before
        }
        eprintln!("ksearch: {what} into the worker's environment");
        pip_install(&self.python, &file, what)?;
        if let Some(r) = ready {
            std::fs::write(r, &wanted)?;
        }
        Ok(())
    }

    /// Installs the test requirements into the managed environment (the test suite uses this).
    pub fn install_test_requirements(&self) -> Result<()> {
        let _lock = lock_venv()?;
        pip_install(
            &self.python,
            &self.worker_path.join("requirements-test.txt"),
            "installing the worker's test packages",
        )
    }
}
