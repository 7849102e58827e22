//! The store's file operations: they never follow a symbolic link, keep what they create
//! private to the user (folders 0700, files 0600 on Unix), and write atomically.
//!
//! Why links matter: the store deletes (recovery, pruning) and overwrites (atomic writes)
//! under its folders. A link planted there — by another program, a sync tool, a restored
//! backup — would otherwise point those deletes and writes at files outside the store, and
//! a link to a FIFO or `/dev/zero` would hang or exhaust memory on read. So every entry is
//! judged by `symlink_metadata` / `DirEntry::file_type` (which do not follow links), only
//! regular files are read, and only real folders are walked.

use std::fs::{File, FileType, Metadata};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::{de::DeserializeOwned, Serialize};

use crate::error::{AppError, AppResult};

/// What an entry is, in words, for errors and set-aside reasons.
pub fn describe(t: FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link (the store never follows links)"
    } else if t.is_dir() {
        "a folder"
    } else if t.is_file() {
        "a file"
    } else {
        "not a regular file (a device, FIFO or socket)"
    }
}

fn not_regular(path: &Path, t: FileType) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{} is {}", path.display(), describe(t)),
    )
}

/// Opens `path` for reading when it is a regular file, never through a link: the name is
/// judged by `symlink_metadata`, and on Unix the opened file must be that very file (same
/// device and inode), so a link swapped in between is refused as well.
///
/// Errors: `InvalidData` for a link, folder or special file; the OS's error otherwise.
pub fn open_regular(path: &Path) -> io::Result<(File, Metadata)> {
    let named = std::fs::symlink_metadata(path)?;
    if !named.file_type().is_file() {
        return Err(not_regular(path, named.file_type()));
    }
    let f = File::open(path)?;
    let opened = f.metadata()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        if (opened.dev(), opened.ino()) != (named.dev(), named.ino()) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} changed while it was opened", path.display()),
            ));
        }
    }
    Ok((f, opened))
}

/// The bytes of regular file `path` ([`open_regular`]), at most `max` of them.
///
/// Errors: `InvalidData` for a link or special file, or a file over `max` bytes (judged
/// by its size before reading, and by what was read, for a file that grows meanwhile).
pub fn read_regular(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (f, meta) = open_regular(path)?;
    let too_big = |n: u64| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} has {n} bytes; at most {max} are read", path.display()),
        )
    };
    if meta.len() > max {
        return Err(too_big(meta.len()));
    }
    let mut bytes = Vec::new();
    f.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_big(bytes.len() as u64));
    }
    Ok(bytes)
}

/// Most bytes of one stored JSON record or text (a chat of many long turns stays far
/// below; a 16 MiB document text too).
pub const MAX_RECORD_BYTES: u64 = 256 << 20;

/// Reads JSON record `path`, a regular file ([`read_regular`]).
pub(crate) fn read_json<T: DeserializeOwned>(path: &Path) -> AppResult<T> {
    let bytes = read_regular(path, MAX_RECORD_BYTES).map_err(|e| AppError::io(path, e))?;
    serde_json::from_slice(&bytes).map_err(|e| AppError::corrupt(path, e))
}

pub(crate) fn write_json<T: Serialize>(path: &Path, value: &T) -> AppResult<()> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| AppError::corrupt(path, e))?;
    write_atomic(path, &bytes)
}

/// The entries of folder `dir` with their types, links not followed (none when `dir` does
/// not exist).
pub fn entries(dir: &Path) -> io::Result<Vec<(PathBuf, FileType)>> {
    match std::fs::read_dir(dir) {
        Ok(rd) => rd
            .map(|e| e.and_then(|e| Ok((e.path(), e.file_type()?))))
            .collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Removes entry `p` without following it: a folder with everything in it (`remove_dir_all`
/// does not follow the links inside), anything else (a link included: the link goes, its
/// target stays) as a file.
pub fn remove_entry(p: &Path) -> io::Result<()> {
    if std::fs::symlink_metadata(p)?.file_type().is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    }
}

/// Creates folder `dir` and its missing parents, private to the user (0700 on Unix;
/// folders that exist keep their mode). A link on the way is followed: the data folder
/// itself, or a user's save folder, may be a link the user made (to another disk).
pub fn create_private(dir: &Path) -> io::Result<()> {
    let mut b = std::fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}

/// [`create_private`], then checks that `dir` itself is a real folder: for the store's own
/// folders (`chats/<id>/`, `documents/`, `set-aside/`), where a link would take what the
/// store writes or moves there into its target.
///
/// Errors: the OS's, or `InvalidData` when `dir` is a link or not a folder.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    create_private(dir)?;
    let t = std::fs::symlink_metadata(dir)?.file_type();
    if t.is_dir() {
        Ok(())
    } else {
        Err(not_regular(dir, t))
    }
}

/// Writes through a temporary file and a rename, so a crash never leaves half a file: the
/// bytes go to `<name>.<pid>-<n>.tmp` in the same folder (unique, so two writers of one
/// file never share a temporary; created with `create_new` and mode 0600, so a name planted
/// there — a link included — is never opened, and the bytes are never readable by other
/// users, even once renamed), are fsynced, renamed over `path` (a rename replaces a link,
/// never writes through it), and the folder is fsynced so that the rename itself survives
/// a power cut (POSIX; Windows has no folder handles to sync, and its `MoveFileEx` rename
/// is what `std` uses there).
/// Leftover `*.tmp` files of a killed process are removed by [`super::Store::open`].
pub fn write_atomic(path: &Path, bytes: &[u8]) -> AppResult<()> {
    use std::io::Write;
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    create_private(dir).map_err(|e| AppError::io(dir, e))?;
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(
        ".{}-{}.tmp",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let tmp = dir.join(name);
    let mut created = false;
    let mut write = || -> io::Result<()> {
        let mut f = create_new_private(&tmp)?;
        created = true;
        f.write_all(bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    };
    if let Err(e) = write() {
        // Only a temporary this call created is removed, never a name found there.
        if created {
            let _ = std::fs::remove_file(&tmp);
        }
        return Err(AppError::io(path, e));
    }
    sync_dir(dir).map_err(|e| AppError::io(dir, e))
}

/// A new file at `path` for writing, readable by the user only (0600 on Unix).
///
/// Errors: `AlreadyExists` when anything (a link included) has that name.
pub fn create_new_private(path: &Path) -> io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path)
}

/// Makes a folder's entries (renames, removals) durable: fsync of the folder on Unix; a
/// no-op elsewhere (Windows cannot open a folder as a file; NTFS journals the rename).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}
