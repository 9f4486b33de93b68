use super::{print_json, refuse_overwrite};
use crate::target::Target;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(super) struct TranslateArgs {
    /// A .cu file, or a cuda candidate folder (its kernels translated under its own plan).
    pub(super) file: PathBuf,
    /// mlx-metal or mlx-cuda.
    #[arg(long)]
    pub(super) to: Target,
    /// Output folder (default: <file stem>-<target> next to the current directory).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    #[arg(long)]
    pub(super) json: bool,
    /// Replace files already in the output folder (refused otherwise: hand edits there would be lost).
    #[arg(long)]
    pub(super) force: bool,
    /// A folder to search for the file's own headers (after the including file's folder); repeatable.
    /// Headers are read in; the translation carries what its kernels use.
    #[arg(short = 'I', long = "include", value_name = "DIR")]
    pub(super) include: Vec<PathBuf>,
}

pub(super) fn translate(
    file: &Path,
    to: Target,
    out: Option<PathBuf>,
    json: bool,
    force: bool,
    include: &[PathBuf],
) -> Result<u8> {
    let t = crate::translate::translate_and_check(file, to, include)?;
    let dir = out.unwrap_or_else(|| {
        let stem = file.file_stem().unwrap_or_default().to_string_lossy();
        PathBuf::from(format!("{stem}-{to}"))
    });
    if let Some(c) = &t.candidate {
        refuse_overwrite(&dir, c.written_paths(&dir), force)?;
        c.write_dir(&dir)
            .with_context(|| format!("writing {}", dir.display()))?;
    }
    if json {
        let mut v = serde_json::to_value(&t)?;
        v["out"] = json!(t.candidate.as_ref().map(|_| dir.display().to_string()));
        print_json(&v);
    } else {
        print!("{}", crate::translate::report(&t, file));
        match &t.candidate {
            Some(_) if t.errors() > 0 => println!(
                "wrote {}, incomplete: {} error diagnostic(s) above (constructs marked `TODO(Txxx)`, not translated, or checker errors): finish them by hand",
                dir.display(),
                t.errors()
            ),
            Some(_) => println!("wrote {}", dir.display()),
            None => println!(
                "nothing written: the result could not be made meaningful (see the errors)"
            ),
        }
    }
    // 1 when the result is incomplete (a construct marked, not translated) or missing, so scripts notice.
    Ok(if t.candidate.is_some() && t.errors() == 0 {
        0
    } else {
        1
    })
}
