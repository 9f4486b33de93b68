use super::{best_candidate, refuse_overwrite};
use crate::builtin;
use crate::candidate::Candidate;
use crate::store::Store;
use crate::task::Task;
use anyhow::{Result, anyhow, bail};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(super) struct ExportArgs {
    pub(super) source: String,
    #[arg(long)]
    pub(super) task: Option<String>,
    #[arg(long, default_value = "mlx-python")]
    pub(super) format: String,
    #[arg(long, default_value = ".")]
    pub(super) out: PathBuf,
    /// Replace files already in the output folder (refused otherwise: hand edits there would be lost).
    #[arg(long)]
    pub(super) force: bool,
}

/// `ksearch export`: a run's best candidate, or a candidate folder, as a Python module for MLX programs.
pub(super) fn export(args: ExportArgs, store_dir: &Path) -> Result<u8> {
    let ExportArgs {
        source,
        task,
        format,
        out,
        force,
    } = args;
    if format != "mlx-python" {
        bail!("--format {format}: the only export format is mlx-python");
    }
    let dir = Path::new(&source);
    let (task, cand) = if dir.join("plan.toml").is_file() {
        let task = task.ok_or_else(|| anyhow!("exporting a candidate folder needs --task TASK"))?;
        let task = Task::load(&builtin::task_dir(&task)?)?;
        let c = Candidate::load(dir)?;
        c.check_against(&task)
            .map_err(|m| anyhow!("{}: {m}", dir.join("plan.toml").display()))?;
        (task, c)
    } else {
        let store = Store::open_existing(store_dir)?;
        let row = store.run(&source)?.ok_or_else(|| {
            anyhow!(
                "`{source}` is neither a candidate folder nor a run in {}",
                store.path().display()
            )
        })?;
        let hash = best_candidate(&row)
            .ok_or_else(|| anyhow!("run {source} has no best candidate"))?
            .to_string();
        let c = store
            .candidate(&hash)?
            .ok_or_else(|| anyhow!("candidate {hash} missing from the store"))?;
        (Task::load(Path::new(&row.task_dir))?, c)
    };
    let function = crate::export::function_name(&task);
    refuse_overwrite(
        &out,
        vec![
            out.join(format!("{function}.py")),
            out.join(format!("{function}_test.py")),
        ],
        force,
    )?;
    let (module, test) = crate::export::mlx_python(&task, &cand, &out)?;
    println!("{}\n{}", module.display(), test.display());
    Ok(0)
}
