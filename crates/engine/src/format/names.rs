//! Tensor-name mapping to [`crate::model::weights::Rwkv7Weights`] (placeholder).
use crate::error::{EngineError, Result};
use crate::format::ModelFile;
use crate::model::weights::Rwkv7Weights;

pub fn map_rwkv7(file: &ModelFile) -> Result<Rwkv7Weights<'_>> {
    Err(EngineError::NotRwkv7 {
        path: file.path().into(),
        what: "mapping not written yet".into(),
    })
}
