//! SafeTensors reader (placeholder, replaced by the format work).
use std::path::Path;

use super::{MetaValue, TensorInfo};
use crate::error::{EngineError, Result};

pub fn parse(path: &Path, _map: &[u8]) -> Result<(Vec<TensorInfo>, Vec<(String, MetaValue)>)> {
    Err(EngineError::Malformed {
        path: path.into(),
        format: "SafeTensors",
        what: "reader not written yet".into(),
    })
}
