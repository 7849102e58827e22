//! `rwkv pull (NAME | URL)`: download a catalog model (or any URL) into the library,
//! resuming a `.part` left by an earlier run, verifying its SHA-256; prints the file's path.

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use anyhow::Context;
use rwkv_models::{download, Catalog, Event, Options, PullError, Request};

use crate::interrupt;

#[derive(clap::Args)]
pub struct PullArgs {
    /// A catalog name (see docs/models.md) or an http(s) URL.
    pub target: String,
    /// Expected SHA-256 of the file (hex); overrides the catalog's.
    #[arg(long)]
    pub sha256: Option<String>,
    /// Download folder [default: $XDG_DATA_HOME/rwkv-studio/models, or RWKV_MODELS_DIR].
    #[arg(long)]
    pub dir: Option<PathBuf>,
}

/// Resolves the target, downloads with a progress line on stderr, prints the path.
///
/// Errors: the named [`PullError`]; Ctrl-C ends with [`interrupt::Interrupted`] (status
/// 130) and keeps the `.part` for the next run.
pub fn run(a: PullArgs) -> anyhow::Result<()> {
    let dir = match a.dir {
        Some(d) => d,
        None => rwkv_models::paths::default_library_dir()
            .context("no data directory on this system: pass --dir")?,
    };
    let is_url = a.target.starts_with("http://") || a.target.starts_with("https://");
    let (url, file_name, size, catalog_sha) = if is_url {
        let name = rwkv_models::download::file_name_from_url(&a.target)?;
        (a.target.clone(), name, None, None)
    } else {
        let cat = Catalog::load(None)?;
        let e = cat.find(&a.target)?;
        let url = e
            .urls
            .first()
            .cloned()
            .context("catalog entry without a URL")?;
        (
            url,
            e.file_name.clone(),
            Some(e.size_bytes),
            e.sha256.clone(),
        )
    };
    let req = Request {
        url,
        dest: dir.join(&file_name),
        size,
        sha256: a.sha256.or(catalog_sha),
    };

    interrupt::install()?;
    let armed = interrupt::Armed::new();
    let opts = Options::default();
    let flag = opts.cancel.clone();
    let mut printed = false;
    let result = download(&req, &opts, &mut |e| {
        if armed.token().is_cancelled() {
            flag.store(true, Ordering::SeqCst);
        }
        match e {
            Event::Started { from, .. } if *from > 0 => {
                eprintln!("{file_name}: resuming at {}", mib(*from));
            }
            Event::Restarted { reason } => eprintln!("{file_name}: {reason}"),
            Event::Progress(p) => {
                let total = p.total.map_or("?".to_string(), mib);
                let pct = p.total.filter(|t| *t > 0).map_or(String::new(), |t| {
                    format!(" ({:.0}%)", 100.0 * p.done as f64 / t as f64)
                });
                let eta = p.eta_s.map_or(String::new(), |s| format!(", ETA {s:.0} s"));
                eprint!(
                    "\r{file_name}: {} / {total}{pct}, {}/s{eta}   ",
                    mib(p.done),
                    mib(p.rate as u64)
                );
                printed = true;
            }
            Event::Verifying => {
                if printed {
                    eprintln!();
                    printed = false;
                }
            }
            Event::Started { .. } => {}
        }
    });
    if printed {
        eprintln!();
    }
    match result {
        Ok(out) => {
            match (out.already_present, out.verified) {
                (true, _) => eprintln!("{file_name}: already in the library"),
                (false, true) => eprintln!("{file_name}: sha256 {} verified", out.sha256),
                (false, false) => eprintln!(
                    "{file_name}: sha256 {} (no published checksum: not verified)",
                    out.sha256
                ),
            }
            println!("{}", out.path.display());
            Ok(())
        }
        Err(PullError::Cancelled { part, done }) => {
            eprintln!(
                "stopped after {}; {} kept: run the same command to resume",
                mib(done),
                part.display()
            );
            Err(interrupt::Interrupted.into())
        }
        Err(e) => Err(e.into()),
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}
