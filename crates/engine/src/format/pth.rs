//! PyTorch `.pth` reader (placeholder, replaced by the format work).
use std::path::Path;

use super::TensorInfo;
use crate::error::{EngineError, Result};

pub fn parse(path: &Path, _map: &[u8]) -> Result<Vec<TensorInfo>> {
    Err(EngineError::Malformed {
        path: path.into(),
        format: "PyTorch .pth",
        what: "reader not written yet".into(),
    })
}
