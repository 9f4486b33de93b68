use super::print_json;
use crate::builtin;
use crate::task::Task;
use anyhow::Result;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(super) struct CheckArgs {
    pub(super) path: PathBuf,
    #[arg(long)]
    pub(super) task: Option<String>,
    /// A folder to search for a complete file's local includes (after the file's own folder); repeatable.
    #[arg(short = 'I', long = "include", value_name = "DIR")]
    pub(super) include: Vec<PathBuf>,
    #[arg(long)]
    pub(super) json: bool,
}

pub(super) fn check(
    path: &Path,
    task: Option<String>,
    include: &[PathBuf],
    json: bool,
) -> Result<u8> {
    let findings = if path.is_dir() {
        if !include.is_empty() {
            anyhow::bail!(
                "{}: -I applies to a complete Metal file; a candidate's kernel is compiled by MLX, where only Metal's own headers exist (drop -I)",
                path.display()
            );
        }
        let task = match task {
            Some(t) => Some(Task::load(&builtin::task_dir(&t)?)?),
            None => None,
        };
        let mut f = crate::check::check_candidate(path, task.as_ref())?;
        for x in &mut f {
            x.file = path.join(&x.file).display().to_string();
        }
        f
    } else {
        if task.is_some() {
            anyhow::bail!(
                "{}: --task applies to a candidate folder; a complete Metal file carries its own signature (drop --task)",
                path.display()
            );
        }
        crate::check::check_file(path, include)?
    };
    if json {
        print_json(&crate::check::to_json(
            &path.display().to_string(),
            &findings,
        ));
    } else if findings.is_empty() {
        println!("{}: no findings", path.display());
    } else {
        print!("{}", crate::check::render_text(&findings));
    }
    Ok(if crate::check::has_errors(&findings) {
        1
    } else {
        0
    })
}
