use super::{print_json, refuse_overwrite};
use anyhow::Result;
use serde_json::json;
use std::path::PathBuf;

#[derive(clap::Args)]
pub(super) struct BackTranslateArgs {
    pub(super) candidate: PathBuf,
    /// Output folder (default: `<candidate folder>-mlx-cuda` in the current directory).
    #[arg(long)]
    pub(super) out: Option<PathBuf>,
    #[arg(long)]
    pub(super) json: bool,
    /// Replace files already in the output folder (refused otherwise: hand edits there would be lost).
    #[arg(long)]
    pub(super) force: bool,
}

/// `ksearch back-translate`: an mlx-metal candidate rewritten as an mlx-cuda one.
pub(super) fn back_translate(args: BackTranslateArgs) -> Result<u8> {
    let BackTranslateArgs {
        candidate,
        out,
        json,
        force,
    } = args;
    let bt = crate::back_translate::back_translate_dir(&candidate)?;
    let out = out.unwrap_or_else(|| {
        let base = candidate
            .file_name()
            .map(|n| n.to_string_lossy().into_owned());
        PathBuf::from(format!(
            "{}-mlx-cuda",
            base.unwrap_or_else(|| bt.report.name.clone())
        ))
    });
    // Writing over the Metal candidate itself is refused by `write`, with its own reason.
    let itself =
        candidate.canonicalize().ok() == out.canonicalize().ok() && out.canonicalize().is_ok();
    if !itself {
        refuse_overwrite(&out, bt.candidate.written_paths(&out), force)?;
    }
    bt.write(&candidate, &out)?;
    if json {
        print_json(&json!({"out": out, "hash": bt.candidate.hash(), "report": bt.report}));
    } else {
        print!("{}", crate::back_translate::report_text(&bt.report, &out));
    }
    Ok(0)
}
