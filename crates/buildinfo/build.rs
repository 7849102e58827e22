//! Records the commit the workspace was built from as `RWKV_STUDIO_COMMIT`: the variable of
//! that name when the build sets it (a source tarball without `.git`), else
//! `git rev-parse --short=12 HEAD`, else `unknown`. Reruns when HEAD moves (the HEAD file,
//! the branch it names and packed-refs), not on every edit.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

fn main() {
    println!("cargo:rerun-if-env-changed=RWKV_STUDIO_COMMIT");
    let commit = match std::env::var("RWKV_STUDIO_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => {
            // The files whose change means a new HEAD (paths git gives, worktrees included).
            let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
            if let Some(r) = git(&["symbolic-ref", "-q", "HEAD"]) {
                watch.push(r);
            }
            for w in &watch {
                if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", w]) {
                    if PathBuf::from(&p).exists() {
                        println!("cargo:rerun-if-changed={p}");
                    }
                }
            }
            git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
        }
    };
    println!("cargo:rustc-env=RWKV_STUDIO_COMMIT={commit}");
}
