//! Files the engine writes (state files, merged models): each is written to a temporary
//! beside its final name and renamed over it, so nothing half-written is ever left under
//! the final name.

use std::path::Path;

/// A new temporary file at `tmp`, readable by the user only (0600 on Unix). Created with
/// `create_new`, so that a name planted there (a link to another file) is never written
/// through: what has the name — a killed save's leftover, or such a link — is removed
/// first (a link goes, its target stays).
///
/// Errors: those of `open(2)` and `unlink(2)`.
pub(crate) fn create_temporary(tmp: &Path) -> std::io::Result<std::fs::File> {
    let create = || {
        let mut o = std::fs::OpenOptions::new();
        o.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
        o.open(tmp)
    };
    match create() {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            std::fs::remove_file(tmp)?;
            create()
        }
        r => r,
    }
}
