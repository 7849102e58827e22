//! Where the app finds its files: the bundled demo model ([`default_model_path`]), kept in
//! managed state as [`AppPaths`]. (The data folder is the store's: `Store::root`.)

use std::path::{Path, PathBuf};

/// File name of the bundled demo model.
pub const DEFAULT_MODEL: &str = "rwkv7-demo-6x256-Q4_K_M.gguf";

/// Where the app finds its files (managed state, set up once).
pub struct AppPaths {
    /// The bundled demo model (`assets/models/` in the repo, resources when installed).
    pub default_model: PathBuf,
}

/// The bundled model: `RWKV_STUDIO_MODEL` if set, else the app's resources (installed),
/// else `models/` next to the executable (`tauri build --no-bundle` copies it there), else
/// the repository's `assets/models/` (development).
pub fn default_model_path(resource_dir: Option<&Path>) -> PathBuf {
    if let Some(p) = std::env::var_os("RWKV_STUDIO_MODEL") {
        return PathBuf::from(p);
    }
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets");
    let candidates = [resource_dir.map(Path::to_path_buf), exe_dir, Some(repo)];
    let found = candidates
        .into_iter()
        .flatten()
        .map(|d| d.join("models").join(DEFAULT_MODEL))
        .find(|p| p.exists());
    match found {
        Some(p) => p.canonicalize().unwrap_or(p),
        // Not found anywhere: loading it reports the path that was expected.
        None => Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../assets/models")
            .join(DEFAULT_MODEL),
    }
}
