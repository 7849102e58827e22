//! Engine errors as Python exceptions, with the engine's message:
//! - `OSError` (its `FileNotFoundError` / `PermissionError` subclasses where the OS said
//!   so) for file operations the OS refused;
//! - `ValueError` for bad input: malformed or foreign files, not an RWKV-7 model, missing
//!   tensors, wrong shapes, unsupported encodings, token ids out of range, empty prompts,
//!   sampler options out of range, states of another model;
//! - `RuntimeError` for the device: no adapter, GPU errors, a model too large for it;
//! - `MemoryError` for a result larger than one call may return (logits of a million
//!   positions, …): what Python raises when a result does not fit in memory (numpy's
//!   `_ArrayMemoryError` is one), refused before any work, so the call can be retried on
//!   fewer positions.

use pyo3::exceptions::{
    PyFileNotFoundError, PyKeyboardInterrupt, PyMemoryError, PyOSError, PyPermissionError,
    PyRuntimeError, PyValueError,
};
use pyo3::PyErr;
use rwkv_engine::EngineError;

/// The exception for `e`.
pub fn to_py(e: EngineError) -> PyErr {
    let msg = e.to_string();
    match &e {
        EngineError::Io { source, .. } => match source.kind() {
            std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
            std::io::ErrorKind::PermissionDenied => PyPermissionError::new_err(msg),
            _ => PyOSError::new_err(msg),
        },
        EngineError::Malformed { .. }
        | EngineError::NotRwkv7 { .. }
        | EngineError::Unsupported { .. }
        | EngineError::MissingTensor { .. }
        | EngineError::Shape { .. }
        | EngineError::UnsupportedType { .. }
        | EngineError::Tokenizer { .. }
        | EngineError::InvalidInput { .. }
        | EngineError::Adapter { .. }
        | EngineError::State { .. }
        | EngineError::Constraint { .. } => PyValueError::new_err(msg),
        EngineError::Gpu { .. } | EngineError::Op { .. } | EngineError::TooLarge { .. } => {
            PyRuntimeError::new_err(msg)
        }
        EngineError::OutputTooLarge { .. } => PyMemoryError::new_err(msg),
        EngineError::Cancelled => PyKeyboardInterrupt::new_err(msg),
    }
}
