//! RWKV Studio's model catalog, library folder and downloader — the part of "get a model"
//! that needs no GPU, shared by the CLI (`rwkv pull`) and the app.
//!
//! - [`catalog`]: the shipped `assets/catalog/models.json` merged with the user's own
//!   `$XDG_CONFIG_HOME/rwkv-studio/catalog.json`, checked against a strict schema.
//! - [`download`]: one file over HTTP(S) with Range resume (`<dest>.part` + `.part.json`),
//!   progress, a disk-space check, cancellation and a SHA-256 check before the file gets
//!   its final name.
//! - [`partial`]: the unfinished downloads of a folder (listed after a restart, resumed or
//!   discarded).
//! - [`paths`]: where the library and the user catalog live.
//!
//! Every failure is a named [`PullError`] variant that says which URL, path or size.

pub mod catalog;
pub mod download;
mod error;
pub mod partial;
pub mod paths;

pub use catalog::{Catalog, Encoding, Entry};
pub use download::{download, Event, Options, Outcome, Progress, Request};
pub use error::PullError;
pub use partial::{discard, partials, PartialDownload, Sidecar};
