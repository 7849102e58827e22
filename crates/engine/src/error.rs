//! The engine's one error type: every variant names what it is about (file, tensor, op,
//! field) and, where there is one, the expected and the actual value.

use std::path::PathBuf;

/// Result alias used across the engine.
pub type Result<T, E = EngineError> = std::result::Result<T, E>;

/// Everything the engine can fail with. Messages are written for people: they name the
/// file, tensor or op and say what was expected and what was found.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The operating system refused a file operation.
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file is not a well-formed instance of its format (bad magic, truncated header,
    /// absurd count, offset past the end, …).
    #[error("{path}: malformed {format} file: {what}")]
    Malformed {
        path: PathBuf,
        format: &'static str,
        what: String,
    },

    /// The file is well formed but is not an RWKV-7 model (another architecture, missing
    /// hyper-parameters, …).
    #[error("{path}: not an RWKV-7 model: {what}")]
    NotRwkv7 { path: PathBuf, what: String },

    /// An RWKV-7 model this engine cannot run (a head size other than
    /// [`crate::HEAD_SIZE`], …): `what` names the value and what the engine supports.
    #[error("{path}: unsupported model: {what}")]
    Unsupported { path: PathBuf, what: String },

    /// A tensor the model needs is absent.
    #[error("{path}: missing tensor `{tensor}`")]
    MissingTensor { path: PathBuf, tensor: String },

    /// A tensor has a shape other than the one the architecture needs.
    #[error("{path}: tensor `{tensor}` has shape {got:?}, expected {expected:?}")]
    Shape {
        path: PathBuf,
        tensor: String,
        expected: Vec<usize>,
        got: Vec<usize>,
    },

    /// A tensor is stored in an encoding the engine does not read.
    #[error("{path}: tensor `{tensor}` has unsupported type {dtype}")]
    UnsupportedType {
        path: PathBuf,
        tensor: String,
        dtype: String,
    },

    /// The tokenizer vocabulary is unusable.
    #[error("tokenizer: {what}")]
    Tokenizer { what: String },

    /// No usable GPU adapter, or the adapter lacks something the engine needs.
    #[error("GPU: {what}")]
    Gpu { what: String },

    /// A GPU operation was asked for with inconsistent shapes (an engine bug or bad input).
    #[error("op `{op}`: {what}")]
    Op { op: &'static str, what: String },

    /// The model needs more GPU memory (or a larger binding) than the device allows.
    #[error("model does not fit the device: {what}")]
    TooLarge { what: String },

    /// A call asked for a result larger than one call may return
    /// ([`crate::output::MAX_OUTPUT_BYTES`]): `what` names it (logits of T rows × vocab,
    /// embeddings, …); nothing was computed.
    #[error(
        "output too large: {what} needs {requested} bytes, at most {allowed} per call \
         (ask for fewer positions or sequences per call)"
    )]
    OutputTooLarge {
        what: String,
        requested: u64,
        allowed: u64,
    },

    /// A caller-supplied value is out of range (token id ≥ vocab, empty prompt, …).
    #[error("invalid input: {what}")]
    InvalidInput { what: String },

    /// A LoRA adapter or an initial-state file is unusable with this model (shape, name,
    /// rank, values); `name` is its file.
    #[error("adapter {name}: {what}")]
    Adapter { name: String, what: String },

    /// A state file or state buffer does not belong to this model or layout.
    #[error("state: {what}")]
    State { what: String },

    /// A JSON Schema, regular expression or grammar that constrained decoding cannot use;
    /// `kind` is `json_schema`, `regex`, `lark` or `gbnf`, `what` names the construct
    /// (unsupported keyword, bad rule, syntax error and where). Reported before any token
    /// is generated.
    #[error("{kind}: {what}")]
    Constraint { kind: &'static str, what: String },

    /// The operation was cancelled by its caller; nothing was lost.
    #[error("cancelled")]
    Cancelled,
}

impl EngineError {
    /// Short machine-readable code, stable across versions (used by the app's
    /// `{ code, message, details }` errors and by the CLI's exit codes).
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::Io { .. } => "io",
            EngineError::Malformed { .. } => "malformed_file",
            EngineError::NotRwkv7 { .. } => "not_rwkv7",
            EngineError::Unsupported { .. } => "unsupported_model",
            EngineError::MissingTensor { .. } => "missing_tensor",
            EngineError::Shape { .. } => "tensor_shape",
            EngineError::UnsupportedType { .. } => "unsupported_type",
            EngineError::Tokenizer { .. } => "tokenizer",
            EngineError::Gpu { .. } => "gpu",
            EngineError::Op { .. } => "op",
            EngineError::TooLarge { .. } => "too_large",
            EngineError::OutputTooLarge { .. } => "output_too_large",
            EngineError::InvalidInput { .. } => "invalid_input",
            EngineError::Adapter { .. } => "adapter",
            EngineError::State { .. } => "state",
            EngineError::Constraint { .. } => "constraint",
            EngineError::Cancelled => "cancelled",
        }
    }

    /// [`EngineError::Io`] naming `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        EngineError::Io {
            path: path.into(),
            source,
        }
    }

    /// [`EngineError::InvalidInput`] saying `what` (name the option or value in it).
    pub fn invalid(what: impl Into<String>) -> Self {
        EngineError::InvalidInput { what: what.into() }
    }

    /// [`EngineError::Constraint`] of `kind` saying `what`.
    pub fn constraint(kind: &'static str, what: impl Into<String>) -> Self {
        EngineError::Constraint {
            kind,
            what: what.into(),
        }
    }

    #[allow(dead_code)] // for the API and GPU modules
    pub(crate) fn gpu(what: impl Into<String>) -> Self {
        EngineError::Gpu { what: what.into() }
    }
}
