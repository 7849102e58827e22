//! The model catalog: a JSON list of downloadable models with the facts a download and a
//! "does it fit" check need. The app ships `assets/catalog/models.json`; a user's
//! `$XDG_CONFIG_HOME/rwkv-studio/catalog.json` (same schema) adds entries or replaces
//! shipped ones of the same name.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::PullError;

/// The catalog shipped with the app (compiled in, so the CLI needs no asset folder).
pub const SHIPPED_JSON: &str = include_str!("../../../assets/catalog/models.json");

/// Schema version this crate reads.
pub const SCHEMA_VERSION: u32 = 1;

/// How the weights are stored in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Encoding {
    #[serde(rename = "gguf-q4_k_m")]
    GgufQ4KM,
    #[serde(rename = "gguf-q8_0")]
    GgufQ8_0,
    #[serde(rename = "gguf-f16")]
    GgufF16,
    #[serde(rename = "safetensors")]
    SafeTensors,
    /// BlinkDL's PyTorch checkpoints (bf16 tensors in a zip/pickle).
    #[serde(rename = "pth")]
    Pth,
}

/// One downloadable model file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// Unique name, what `rwkv pull NAME` takes (lower case, no spaces).
    pub name: String,
    /// Model family, e.g. "RWKV-7 G1a" or "RWKV-7 Pile".
    pub family: String,
    /// Parameter count as published, e.g. "2.9B".
    pub parameters: String,
    pub encoding: Encoding,
    /// File name in the library folder.
    pub file_name: String,
    /// Exact file size in bytes, as the source lists it.
    pub size_bytes: u64,
    /// Lower-case hex SHA-256 as the source publishes it; `null` when it publishes none
    /// (the download then reports the computed hash but cannot verify it).
    pub sha256: Option<String>,
    /// Download URLs, tried in order.
    pub urls: Vec<String>,
    /// SPDX licence id of the weights.
    pub license: String,
    /// Host memory the model needs to load, bytes (estimate; see docs/models.md).
    pub ram_bytes: Option<u64>,
    /// GPU memory the model needs, bytes (estimate; see docs/models.md).
    pub vram_bytes: Option<u64>,
    /// One line for the catalog view.
    pub description: String,
    /// Where the entry's facts come from (the repository page or commit).
    pub source: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    version: u32,
    models: Vec<Entry>,
}

/// The merged catalog: shipped entries, then the user's (a user entry with a shipped
/// entry's name replaces it).
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    pub entries: Vec<Entry>,
}

impl Catalog {
    /// Parses and checks one catalog file's text. `origin` names it in errors;
    /// `require_https`: the shipped catalog must use https, a user's may use http.
    ///
    /// Errors: [`PullError::Catalog`] naming the entry and the broken rule.
    pub fn parse(text: &str, origin: &Path, require_https: bool) -> Result<Catalog, PullError> {
        let bad = |reason: String| PullError::Catalog {
            path: origin.to_path_buf(),
            reason,
        };
        let file: CatalogFile = serde_json::from_str(text).map_err(|e| bad(e.to_string()))?;
        if file.version != SCHEMA_VERSION {
            return Err(bad(format!(
                "schema version {}, this build reads {SCHEMA_VERSION}",
                file.version
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for e in &file.models {
            validate(e, require_https).map_err(|r| bad(format!("entry {:?}: {r}", e.name)))?;
            if !seen.insert(e.name.as_str()) {
                return Err(bad(format!("entry {:?} appears twice", e.name)));
            }
        }
        Ok(Catalog {
            entries: file.models,
        })
    }

    /// The shipped catalog alone.
    ///
    /// Errors: [`PullError::Catalog`] (a broken build: the schema test guards it).
    pub fn shipped() -> Result<Catalog, PullError> {
        Catalog::parse(SHIPPED_JSON, Path::new("assets/catalog/models.json"), true)
    }

    /// The shipped catalog merged with the user's file at `user` when it exists
    /// ([`crate::paths::user_catalog_path`] by default).
    ///
    /// Errors: [`PullError::Catalog`] for a user file that does not parse or check;
    /// [`PullError::Io`] when it exists but cannot be read.
    pub fn load(user: Option<&Path>) -> Result<Catalog, PullError> {
        let mut cat = Catalog::shipped()?;
        let user: Option<PathBuf> = match user {
            Some(p) => Some(p.to_path_buf()),
            None => crate::paths::user_catalog_path(),
        };
        if let Some(path) = user.filter(|p| p.exists()) {
            let text = std::fs::read_to_string(&path).map_err(|e| PullError::io(&path, e))?;
            cat.merge(Catalog::parse(&text, &path, false)?);
        }
        Ok(cat)
    }

    /// Adds `other`'s entries; one with an existing name replaces it in place.
    pub fn merge(&mut self, other: Catalog) {
        for e in other.entries {
            match self.entries.iter_mut().find(|x| x.name == e.name) {
                Some(slot) => *slot = e,
                None => self.entries.push(e),
            }
        }
    }

    /// The entry called `name` (exact match).
    ///
    /// Errors: [`PullError::UnknownModel`] listing the known names.
    pub fn find(&self, name: &str) -> Result<&Entry, PullError> {
        self.entries
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| PullError::UnknownModel {
                name: name.to_string(),
                known: self
                    .entries
                    .iter()
                    .map(|e| e.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

/// Adds `entry` to the user catalog at `path` (created with its folder when missing; an
/// entry of the same name is replaced), checked by the same rules as any user catalog
/// before the file is written, and written whole-or-nothing (a temporary file renamed over
/// it). Returns the user catalog as written.
///
/// Errors: [`PullError::Catalog`] for an entry that breaks a rule (named) or an existing
/// file that does not parse; [`PullError::Io`] naming the file.
pub fn save_user_entry(path: &Path, entry: Entry) -> Result<Catalog, PullError> {
    let mut user = if path.exists() {
        let text = std::fs::read_to_string(path).map_err(|e| PullError::io(path, e))?;
        Catalog::parse(&text, path, false)?
    } else {
        Catalog::default()
    };
    user.merge(Catalog {
        entries: vec![entry],
    });
    let file = CatalogFile {
        version: SCHEMA_VERSION,
        models: user.entries,
    };
    let text = serde_json::to_string_pretty(&file).map_err(|e| PullError::Catalog {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    // The same checks a later read makes: a file this writes always reads back.
    let checked = Catalog::parse(&text, path, false)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| PullError::io(dir, e))?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text).map_err(|e| PullError::io(&tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| PullError::io(path, e))?;
    Ok(checked)
}

/// Whether `s` is a SHA-256 in hex (64 digits, either case).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The schema rules beyond the types: what the catalog test and a user file must meet.
fn validate(e: &Entry, require_https: bool) -> Result<(), String> {
    let plain = |s: &str| !s.is_empty() && !s.chars().any(|c| c.is_whitespace() || c == '/');
    if !plain(&e.name) {
        return Err("name must be non-empty, without spaces or '/'".into());
    }
    if !plain(&e.file_name) || e.file_name.starts_with('.') {
        return Err("file_name must be a plain file name".into());
    }
    if e.size_bytes == 0 {
        return Err("size_bytes must be > 0".into());
    }
    if let Some(h) = &e.sha256 {
        if !is_sha256_hex(h) || h.bytes().any(|b| b.is_ascii_uppercase()) {
            return Err(format!("sha256 {h:?} is not 64 lower-case hex digits"));
        }
    }
    if e.urls.is_empty() {
        return Err("urls must name at least one URL".into());
    }
    for u in &e.urls {
        let ok = u.starts_with("https://") || (!require_https && u.starts_with("http://"));
        if !ok {
            return Err(format!("url {u:?} is not https"));
        }
    }
    for (field, v) in [
        ("family", &e.family),
        ("parameters", &e.parameters),
        ("license", &e.license),
        ("description", &e.description),
    ] {
        if v.trim().is_empty() {
            return Err(format!("{field} is empty"));
        }
    }
    if !e.source.starts_with("https://") {
        return Err("source must be the https address the facts come from".into());
    }
    Ok(())
}
