//! `ksearch report RUN --html FILE`: the run as one self-contained HTML page (`report::html`).

use crate::report::html;
use crate::store::Store;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub(super) struct ReportArgs {
    pub(super) run: String,
    /// The HTML file to write (inline CSS and SVG, no script, nothing fetched).
    #[arg(long)]
    pub(super) html: PathBuf,
    /// Replace the file if it exists (refused otherwise).
    #[arg(long)]
    pub(super) force: bool,
}

pub(super) fn report(args: ReportArgs, store_dir: &Path) -> Result<u8> {
    let store = Store::open_existing(store_dir)?;
    let run = store.resolve_run(&args.run)?;
    if args.html.exists() && !args.force {
        anyhow::bail!(
            "{} exists; pass --force to replace it, or name another file with --html",
            args.html.display()
        );
    }
    let page = html::render(&store, &run)?;
    std::fs::write(&args.html, page).with_context(|| format!("writing {}", args.html.display()))?;
    eprintln!(
        "ksearch: wrote the report of run {run} to {}",
        args.html.display()
    );
    Ok(0)
}
