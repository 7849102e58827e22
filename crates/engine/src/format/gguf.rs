//! GGUF v2/v3 reader (placeholder, replaced by the format work).
use std::path::Path;

use super::{MetaValue, TensorInfo};
use crate::error::{EngineError, Result};

pub struct Parsed {
    pub tensors: Vec<TensorInfo>,
    pub metadata: Vec<(String, MetaValue)>,
}

pub fn parse(path: &Path, _map: &[u8]) -> Result<Parsed> {
    Err(EngineError::Malformed {
        path: path.into(),
        format: "GGUF",
        what: "reader not written yet".into(),
    })
}
