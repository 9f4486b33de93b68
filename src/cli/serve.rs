//! `ksearch serve`: the dashboard over the store (`crate::serve`).

use anyhow::Result;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;

#[derive(clap::Args)]
pub(super) struct ServeArgs {
    /// The port to listen on (0: any free one; the address is printed).
    #[arg(long, default_value_t = 8470)]
    port: u16,
    /// The address to listen on. Loopback by default; any other needs --expose.
    #[arg(long, default_value = "127.0.0.1")]
    bind: IpAddr,
    /// Allow a --bind that is not loopback: anyone who reaches it reads every run in the store.
    #[arg(long)]
    expose: bool,
}

pub(super) fn serve(args: ServeArgs, store_dir: &Path) -> Result<u8> {
    let opts = crate::serve::Options {
        store_dir: store_dir.to_path_buf(),
        addr: SocketAddr::new(args.bind, args.port),
        expose: args.expose,
    };
    crate::serve::serve(opts, |addr| {
        if !addr.ip().is_loopback() {
            eprintln!(
                "ksearch serve: warning: listening on {addr}, not loopback: anyone who can reach it reads every \
                 run in {} (candidate sources, LLM replies)",
                store_dir.display()
            );
        }
        // The first stdout line is the address (scripts and tests read it); stdout is flushed at once.
        let mut out = std::io::stdout();
        let _ = writeln!(
            out,
            "ksearch serve: http://{addr}/ (store {}, read-only; Ctrl-C stops it)",
            store_dir.display()
        );
        let _ = out.flush();
    })?;
    Ok(0)
}
