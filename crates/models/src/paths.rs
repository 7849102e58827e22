//! Where models and the user's catalog live (XDG base directories on Linux, the platform's
//! equivalents elsewhere through the `dirs` crate).

use std::path::PathBuf;

/// Application folder name under the data and config directories.
pub const APP_DIR: &str = "rwkv-studio";

/// The default library: `$XDG_DATA_HOME/rwkv-studio/models` (`~/.local/share/…` when unset;
/// `%APPDATA%\rwkv-studio\models` on Windows, `~/Library/Application Support/…` on macOS).
/// `RWKV_MODELS_DIR` overrides it. `None` when the platform names no data directory.
pub fn default_library_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("RWKV_MODELS_DIR").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(d));
    }
    dirs::data_dir().map(|d| d.join(APP_DIR).join("models"))
}

/// The user's own catalog, merged over the shipped one:
/// `$XDG_CONFIG_HOME/rwkv-studio/catalog.json` (`~/.config/…` when unset).
pub fn user_catalog_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join(APP_DIR).join("catalog.json"))
}
