//! What every RWKV Studio program reports about its build: the workspace version (one for
//! the CLI, the app and the Python package) and the commit it was built from.
//!
//! The commit is `git rev-parse --short=12 HEAD` at build time, or the build's
//! `RWKV_STUDIO_COMMIT` variable (source tarballs without `.git`), or `unknown`.

/// The workspace version (`Cargo.toml` `[workspace.package] version`), e.g. `0.1.0`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The commit the build came from: 12 hex digits, the builder's `RWKV_STUDIO_COMMIT`, or
/// `unknown`.
pub const COMMIT: &str = env!("RWKV_STUDIO_COMMIT");

/// `VERSION (commit COMMIT)`, as `rwkv --version` prints it after the program's name.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RWKV_STUDIO_COMMIT"),
    ")"
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_version_names_version_and_commit() {
        assert!(LONG_VERSION.starts_with(VERSION));
        assert!(LONG_VERSION.contains(COMMIT));
        assert!(!COMMIT.is_empty());
        // Inside this repository the commit is a real one.
        if std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.git")).exists() {
            assert!(
                COMMIT.len() == 12 && COMMIT.chars().all(|c| c.is_ascii_hexdigit()),
                "{COMMIT}"
            );
        }
    }
}
