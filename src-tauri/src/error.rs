//! The one error the frontend sees: `{ code, message, details }`.
//!
//! Engine errors keep their stable [`EngineError::code`]; the app adds a few codes of its
//! own (`no_model`, `not_found`, `worker`, `scope`, `io`, `bad_request`). `message` is
//! written for people; `details` holds what a bug report needs (the path, the variant).

use rwkv_engine::EngineError;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// An error as the frontend receives it (mirrored by `AppError` in `src/lib/api.ts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppError {
    pub code: String,
    pub message: String,
    #[serde(default)]
    pub details: Option<Value>,
}

pub type AppResult<T> = Result<T, AppError>;

impl AppError {
    pub fn new(code: &str, message: impl Into<String>) -> Self {
        AppError {
            code: code.to_string(),
            message: message.into(),
            details: None,
        }
    }

    pub fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn no_model() -> Self {
        AppError::new(
            "no_model",
            "No model is loaded. Load one in the Model view first.",
        )
    }

    pub fn not_found(what: &str, id: &str) -> Self {
        AppError::new("not_found", format!("{what} `{id}` does not exist"))
            .with_details(json!({ "what": what, "id": id }))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        AppError::new("bad_request", message)
    }

    /// The engine worker thread is gone (it cannot be restarted without the app).
    pub fn worker() -> Self {
        AppError::new(
            "worker",
            "The engine worker stopped unexpectedly; restart the app.",
        )
    }

    pub fn io(path: &std::path::Path, e: std::io::Error) -> Self {
        AppError::new("io", format!("{}: {e}", path.display())).with_details(
            json!({ "path": path.display().to_string(), "kind": format!("{:?}", e.kind()) }),
        )
    }

    /// A stored JSON file that does not parse.
    pub fn corrupt(path: &std::path::Path, e: impl std::fmt::Display) -> Self {
        AppError::new(
            "corrupt_file",
            format!("{}: cannot read this file: {e}", path.display()),
        )
        .with_details(json!({ "path": path.display().to_string() }))
    }
}

impl From<EngineError> for AppError {
    fn from(e: EngineError) -> Self {
        let path = match &e {
            EngineError::Io { path, .. }
            | EngineError::Malformed { path, .. }
            | EngineError::NotRwkv7 { path, .. }
            | EngineError::Unsupported { path, .. }
            | EngineError::MissingTensor { path, .. }
            | EngineError::Shape { path, .. }
            | EngineError::UnsupportedType { path, .. } => Some(path.display().to_string()),
            _ => None,
        };
        let mut details = json!({ "debug": format!("{e:?}") });
        if let Some(p) = path {
            details["path"] = json!(p);
        }
        AppError {
            code: e.code().to_string(),
            message: e.to_string(),
            details: Some(details),
        }
    }
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for AppError {}
