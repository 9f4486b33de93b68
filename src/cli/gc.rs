use super::{flags, print_json};
use crate::builtin;
use anyhow::Result;
use std::path::Path;

#[derive(clap::Args)]
pub(super) struct GcArgs {
    /// List what would be removed, remove nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Cache entries (other versions, references) must have gone unused (their date not renewed by a
    /// use) for this many days.
    #[arg(long, default_value_t = 7.0, value_parser = flags::days)]
    pub(super) older_than: f64,
    #[arg(long)]
    pub(super) json: bool,
}

/// `ksearch gc`: see `gc.rs`.
pub(super) fn gc(store_dir: &Path, dry_run: bool, older_than_days: f64, json: bool) -> Result<u8> {
    let older_than = std::time::Duration::from_secs_f64(older_than_days * 86_400.0);
    let report = crate::gc::collect(store_dir, &builtin::cache_root(), older_than, dry_run)?;
    let code = if report.failed.is_empty() { 0 } else { 1 };
    if json {
        print_json(&serde_json::to_value(&report)?);
        return Ok(code);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for it in &report.removed {
        println!(
            "{verb} {} {} ({})",
            it.kind,
            it.name,
            crate::units::fmt_bytes(it.bytes)
        );
    }
    if report.removed.is_empty() {
        println!("nothing to collect");
    } else {
        println!(
            "{verb} {} item(s), {}",
            report.removed.len(),
            crate::units::fmt_bytes(report.bytes)
        );
    }
    for f in &report.failed {
        eprintln!("ksearch: gc could not remove {f}");
    }
    Ok(code)
}
