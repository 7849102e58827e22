//! The one error the frontend sees: `{ code, message, details }`.
//!
//! `code` is an [`ErrorCode`]: the engine's stable [`EngineError::code`] for engine errors,
//! and a few codes of the app's own. Every code is listed once, in [`error_codes!`] below,
//! with what it means; the frontend's `ErrorCode` union (`src/lib/wire.gen.ts`) is
//! generated from that list and `tests/frontend_types.rs` fails when it is stale, and
//! docs/app.md ("Error codes") must name every code. `message` is written for people;
//! `details` holds what a bug report needs (the path, the variant).

use rwkv_engine::EngineError;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{json, Value};

/// Declares [`ErrorCode`] from one list of `Variant => "wire_name"` with a doc comment each:
/// the enum, [`ErrorCode::ALL`], the wire name and the doc of each, so that none of them
/// is written twice.
macro_rules! error_codes {
    ($($(#[doc = $doc:literal])+ $variant:ident => $name:literal,)+) => {
        /// What went wrong, as the frontend's code (`AppError.code`; the union `ErrorCode`
        /// in `src/lib/wire.gen.ts`). Serialised as its wire name (`no_model`, …); the
        /// engine's codes keep [`EngineError::code`]'s names.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl ErrorCode {
            /// Every code, in the order declared.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),+];

            /// The code on the wire: `AppError.code` as the frontend receives it.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => $name,)+
                }
            }

            /// What the code means, for people (its doc comment, one line per line).
            pub const fn doc(self) -> &'static str {
                match self {
                    $(ErrorCode::$variant => concat!($($doc, "\n"),+),)+
                }
            }
        }
    };
}

error_codes! {
    // ---- the engine's (`EngineError::code`) ----
    /// The engine: the operating system refused a file operation (the path is in
    /// `details.path`). Also the app's, for its own files and the user's.
    Io => "io",
    /// The engine: a model, adapter or state file is not a well-formed instance of its
    /// format (truncated, bad magic, an offset past the end).
    MalformedFile => "malformed_file",
    /// The engine: a well-formed file that is not an RWKV-7 model (another architecture).
    NotRwkv7 => "not_rwkv7",
    /// The engine: an RWKV-7 model this engine cannot run (a head size other than 64).
    UnsupportedModel => "unsupported_model",
    /// The engine: a tensor the model needs is absent from the file.
    MissingTensor => "missing_tensor",
    /// The engine: a tensor of the file has another shape than the architecture needs.
    TensorShape => "tensor_shape",
    /// The engine: a tensor is stored in an encoding the engine does not read.
    UnsupportedType => "unsupported_type",
    /// The engine: the model's tokenizer vocabulary is unusable.
    Tokenizer => "tokenizer",
    /// The engine: no usable GPU, a lost device, or a GPU fault.
    Gpu => "gpu",
    /// The engine: an operation with inconsistent shapes (an engine bug or bad input).
    Op => "op",
    /// The engine: the model or a request needs more GPU memory than the device has.
    TooLarge => "too_large",
    /// The engine: one call would return more than the engine returns at once.
    OutputTooLarge => "output_too_large",
    /// The engine: a value out of range (sampling settings, token ids, an empty prompt).
    InvalidInput => "invalid_input",
    /// The engine: a LoRA or initial-state file that does not fit the model (named).
    Adapter => "adapter",
    /// The engine: a state file or state that belongs to another model or is damaged.
    State => "state",
    /// The engine: a JSON Schema or grammar that constrained decoding cannot use (the
    /// message names the construct).
    Constraint => "constraint",
    /// The engine: the operation was cancelled by its caller.
    Cancelled => "cancelled",
    // ---- the app's ----
    /// No model is loaded (load one in the Model view first).
    NoModel => "no_model",
    /// A chat, document or adapter the request names does not exist (`details.what`,
    /// `details.id`).
    NotFound => "not_found",
    /// The request itself is wrong: an empty or too large text, an id that is not one, a
    /// setting out of range.
    BadRequest => "bad_request",
    /// A chat message longer than a chat takes (`details.bytes`, `details.max`); add
    /// long texts as documents.
    TooLong => "too_long",
    /// A file the user chose to read as text is not UTF-8.
    NotText => "not_text",
    /// A path the user did not choose in a dialog or drop on the window, or chose for the
    /// other direction (read / write).
    Scope => "scope",
    /// A stored file of the app (a chat, document, the adapter list) does not parse
    /// (`details.path`).
    CorruptFile => "corrupt_file",
    /// The local server (Model view) could not start or stopped: its port is taken
    /// (`details.port`), it runs already, or its engine thread failed.
    Server => "server",
    /// A model download could not connect: offline, a wrong host, or the server is down
    /// (`details.url`).
    Offline => "offline",
    /// A model download failed on the way: the server answered an error (404 and others,
    /// `details.status`), the connection broke (the `.part` stays; resume continues it), or
    /// the server's file has another size than the catalog says (`details.url`).
    Download => "download",
    /// A downloaded model does not hash to the SHA-256 its catalog entry (or the user)
    /// gave; the partial file was deleted (`details.expected`, `details.got`).
    Checksum => "checksum",
    /// Too little free disk space for a model download (checked before it starts,
    /// `details.needed`, `details.available`), or the disk filled up while writing.
    DiskSpace => "disk_space",
    /// The model catalog: a catalog file or a new entry that breaks the schema (the entry
    /// and rule named), a name no entry has, or a URL / SHA-256 that is not one.
    Catalog => "catalog",
    /// The engine's worker thread is gone; the app must be restarted.
    Worker => "worker",
    /// A bug of the app (a state it should never reach); the message says which.
    Internal => "internal",
}

impl From<&EngineError> for ErrorCode {
    /// The engine error's code; the same name as [`EngineError::code`] (a test checks
    /// every variant). An engine variant added later fails to compile here until it has
    /// its code.
    fn from(e: &EngineError) -> Self {
        match e {
            EngineError::Io { .. } => ErrorCode::Io,
            EngineError::Malformed { .. } => ErrorCode::MalformedFile,
            EngineError::NotRwkv7 { .. } => ErrorCode::NotRwkv7,
            EngineError::Unsupported { .. } => ErrorCode::UnsupportedModel,
            EngineError::MissingTensor { .. } => ErrorCode::MissingTensor,
            EngineError::Shape { .. } => ErrorCode::TensorShape,
            EngineError::UnsupportedType { .. } => ErrorCode::UnsupportedType,
            EngineError::Tokenizer { .. } => ErrorCode::Tokenizer,
            EngineError::Gpu { .. } => ErrorCode::Gpu,
            EngineError::Op { .. } => ErrorCode::Op,
            EngineError::TooLarge { .. } => ErrorCode::TooLarge,
            EngineError::OutputTooLarge { .. } => ErrorCode::OutputTooLarge,
            EngineError::InvalidInput { .. } => ErrorCode::InvalidInput,
            EngineError::Adapter { .. } => ErrorCode::Adapter,
            EngineError::State { .. } => ErrorCode::State,
            EngineError::Constraint { .. } => ErrorCode::Constraint,
            EngineError::Cancelled => ErrorCode::Cancelled,
        }
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|c| c.as_str() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code `{name}`")))
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as the frontend receives it (mirrored by `AppError` in `src/lib/api.ts`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AppError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(default)]
    pub details: Option<Value>,
}

pub type AppResult<T> = Result<T, AppError>;

impl AppError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        AppError {
            code,
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
            ErrorCode::NoModel,
            "No model is loaded. Load one in the Model view first.",
        )
    }

    pub fn not_found(what: &str, id: &str) -> Self {
        AppError::new(ErrorCode::NotFound, format!("{what} `{id}` does not exist"))
            .with_details(json!({ "what": what, "id": id }))
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        AppError::new(ErrorCode::BadRequest, message)
    }

    /// A state the app should never reach (`internal`): `what` says which.
    pub fn internal(what: impl Into<String>) -> Self {
        AppError::new(ErrorCode::Internal, what)
    }

    /// The engine worker thread is gone (it cannot be restarted without the app).
    pub fn worker() -> Self {
        AppError::new(
            ErrorCode::Worker,
            "The engine worker stopped unexpectedly; restart the app.",
        )
    }

    pub fn io(path: &std::path::Path, e: std::io::Error) -> Self {
        AppError::new(ErrorCode::Io, format!("{}: {e}", path.display())).with_details(
            json!({ "path": path.display().to_string(), "kind": format!("{:?}", e.kind()) }),
        )
    }

    /// A stored JSON file that does not parse.
    pub fn corrupt(path: &std::path::Path, e: impl std::fmt::Display) -> Self {
        AppError::new(
            ErrorCode::CorruptFile,
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
            code: ErrorCode::from(&e),
            message: e.to_string(),
            details: Some(details),
        }
    }
}

impl From<rwkv_models::PullError> for AppError {
    /// The downloader's and catalog's named errors, each with the URL or path it names.
    fn from(e: rwkv_models::PullError) -> Self {
        use rwkv_models::PullError as P;
        let message = e.to_string();
        let (code, details) = match &e {
            P::Offline { url, .. } => (ErrorCode::Offline, json!({ "url": url })),
            P::NotFound { url } => (ErrorCode::Download, json!({ "url": url, "status": 404 })),
            P::HttpStatus { url, status } => {
                (ErrorCode::Download, json!({ "url": url, "status": status }))
            }
            P::Transfer { url, done, .. } => {
                (ErrorCode::Download, json!({ "url": url, "done": done }))
            }
            P::SizeMismatch { url, expected, got } => (
                ErrorCode::Download,
                json!({ "url": url, "expected": expected, "got": got }),
            ),
            P::ChecksumMismatch {
                path,
                expected,
                got,
            } => (
                ErrorCode::Checksum,
                json!({ "path": path.display().to_string(), "expected": expected, "got": got }),
            ),
            P::NotEnoughSpace {
                dir,
                needed,
                available,
            } => (
                ErrorCode::DiskSpace,
                json!({ "path": dir.display().to_string(), "needed": needed, "available": available }),
            ),
            P::DiskFull { path } => (
                ErrorCode::DiskSpace,
                json!({ "path": path.display().to_string() }),
            ),
            P::Cancelled { part, done } => (
                ErrorCode::Cancelled,
                json!({ "path": part.display().to_string(), "done": done }),
            ),
            P::Io { path, source } => (
                ErrorCode::Io,
                json!({ "path": path.display().to_string(), "kind": format!("{:?}", source.kind()) }),
            ),
            P::Catalog { path, .. } => (
                ErrorCode::Catalog,
                json!({ "path": path.display().to_string() }),
            ),
            P::UnknownModel { name, .. } => (ErrorCode::Catalog, json!({ "name": name })),
            P::BadChecksum(h) => (ErrorCode::Catalog, json!({ "sha256": h })),
            P::BadUrl { url, .. } => (ErrorCode::Catalog, json!({ "url": url })),
            P::Client(_) => (ErrorCode::Download, json!({})),
        };
        AppError {
            code,
            message,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// One error of every engine variant (the match in `From<&EngineError>` is exhaustive,
    /// so a new variant is added here too once it compiles there).
    fn every_engine_error() -> Vec<EngineError> {
        let path = || PathBuf::from("m.gguf");
        let what = || "x".to_string();
        vec![
            EngineError::io(path(), std::io::Error::other("refused")),
            EngineError::Malformed {
                path: path(),
                format: "GGUF",
                what: what(),
            },
            EngineError::NotRwkv7 {
                path: path(),
                what: what(),
            },
            EngineError::Unsupported {
                path: path(),
                what: what(),
            },
            EngineError::MissingTensor {
                path: path(),
                tensor: what(),
            },
            EngineError::Shape {
                path: path(),
                tensor: what(),
                expected: vec![1],
                got: vec![2],
            },
            EngineError::UnsupportedType {
                path: path(),
                tensor: what(),
                dtype: what(),
            },
            EngineError::Tokenizer { what: what() },
            EngineError::Gpu { what: what() },
            EngineError::Op {
                op: "matmul",
                what: what(),
            },
            EngineError::TooLarge { what: what() },
            EngineError::OutputTooLarge {
                what: what(),
                requested: 2,
                allowed: 1,
            },
            EngineError::invalid(what()),
            EngineError::Adapter {
                name: what(),
                what: what(),
            },
            EngineError::State { what: what() },
            EngineError::constraint("json_schema", what()),
            EngineError::Cancelled,
        ]
    }

    #[test]
    fn engine_errors_keep_the_engines_code_on_the_wire() {
        let all = every_engine_error();
        for e in &all {
            let code = ErrorCode::from(e);
            assert_eq!(code.as_str(), e.code(), "{e:?}");
            assert_eq!(serde_json::to_value(code).unwrap(), json!(e.code()));
        }
        // Every engine code is a distinct code of the list.
        let mut codes: Vec<&str> = all.iter().map(|e| e.code()).collect();
        codes.sort_unstable();
        codes.dedup();
        assert_eq!(codes.len(), all.len());
    }

    #[test]
    fn codes_are_unique_snake_case_and_round_trip() {
        let mut names: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
        for c in ErrorCode::ALL {
            let n = c.as_str();
            assert!(
                !n.is_empty()
                    && n.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{n}"
            );
            let v = serde_json::to_value(c).unwrap();
            assert_eq!(v, json!(n));
            assert_eq!(serde_json::from_value::<ErrorCode>(v).unwrap(), *c);
            assert!(!c.doc().trim().is_empty(), "{n} has no doc");
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ErrorCode::ALL.len());
        assert!(serde_json::from_value::<ErrorCode>(json!("nope")).is_err());
    }

    #[test]
    fn download_errors_keep_their_url_or_path() {
        use rwkv_models::PullError as P;
        let e = AppError::from(P::NotFound {
            url: "http://h/m.gguf".into(),
        });
        assert_eq!(e.code, ErrorCode::Download);
        assert_eq!(e.details.as_ref().unwrap()["status"], 404);
        assert!(e.message.contains("http://h/m.gguf") && e.message.contains("404"));
        let e = AppError::from(P::ChecksumMismatch {
            path: "/lib/m.gguf".into(),
            expected: "aa".into(),
            got: "bb".into(),
        });
        assert_eq!(e.code, ErrorCode::Checksum);
        assert_eq!(e.details.as_ref().unwrap()["path"], "/lib/m.gguf");
        let e = AppError::from(P::DiskFull {
            path: "/lib/m.gguf.part".into(),
        });
        assert_eq!(e.code, ErrorCode::DiskSpace);
        let e = AppError::from(P::Offline {
            url: "http://127.0.0.1:1/m".into(),
            reason: "refused".into(),
        });
        assert_eq!(e.code, ErrorCode::Offline);
        assert!(e.message.contains("127.0.0.1:1"));
    }

    #[test]
    fn an_error_reaches_the_frontend_as_code_message_details() {
        let e = AppError::not_found("chat", "00ff");
        assert_eq!(
            serde_json::to_value(&e).unwrap(),
            json!({ "code": "not_found", "message": "chat `00ff` does not exist",
                    "details": { "what": "chat", "id": "00ff" } })
        );
        let e = AppError::from(EngineError::Malformed {
            path: "m.gguf".into(),
            format: "GGUF",
            what: "truncated".into(),
        });
        let v = serde_json::to_value(&e).unwrap();
        assert_eq!(v["code"], "malformed_file");
        assert_eq!(v["details"]["path"], "m.gguf");
    }
}
