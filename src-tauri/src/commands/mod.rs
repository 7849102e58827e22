//! The Tauri commands, by domain. Each is thin: it parses its arguments, calls the engine
//! (through [`EngineHandle`](crate::worker::EngineHandle)), the store or the module that
//! does the work ([`chat`](crate::chat), [`documents`](crate::documents),
//! [`bench`](crate::bench), [`library`](crate::library)), and returns its error as
//! `{ code, message, details }` ([`AppError`](crate::error::AppError)).
//! `src/lib/api.ts` is the frontend's mirror of every command and type here;
//! [`crate::register`] lists them for Tauri.
//!
//! - [`app`]: the app's info, the dialogs and the text files the user chooses;
//! - [`model`]: GPU adapters, loading and unloading a model;
//! - [`adapters`]: the Model view's LoRA and initial-state list;
//! - [`chat`]: chats, their settings, sending, regenerating, editing, stopping;
//! - [`documents`]: documents (prefilled states), their export and import, field analysis;
//! - [`bench`]: the benchmark dashboard;
//! - [`models`]: the Library view: catalog, downloads, the models on disk;
//! - [`server`]: the Local server panel (an OpenAI-compatible server on 127.0.0.1).

pub mod adapters;
pub mod app;
pub mod bench;
pub mod chat;
pub mod documents;
pub mod model;
pub mod models;
pub mod server;
