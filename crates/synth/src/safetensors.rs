//! A synthetic model as SafeTensors with BlinkDL's names and shapes (f16), as
//! `make_model.py` writes it.

use std::borrow::Cow;
use std::path::Path;
use std::time::Instant;

use rwkv_engine::{DType, EngineError, Result};

use crate::init::{stream_rows, Blink, Init};
use crate::{threads, SynthOptions, SynthReport};

/// A BlinkDL tensor whose f16 bytes are generated when the SafeTensors writer asks.
struct LazyF16<'a> {
    init: &'a Init,
    t: Blink,
    threads: usize,
}

impl safetensors::View for LazyF16<'_> {
    fn dtype(&self) -> safetensors::Dtype {
        safetensors::Dtype::F16
    }
    fn shape(&self) -> &[usize] {
        &self.t.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        let mut out = Vec::with_capacity(self.data_len());
        // F16 encoding cannot fail; the sink only appends.
        let _ = stream_rows(self.init, &self.t, DType::F16, self.threads, false, |b| {
            out.extend_from_slice(b);
            Ok(())
        });
        Cow::Owned(out)
    }
    fn data_len(&self) -> usize {
        self.t.shape.iter().product::<usize>() * 2
    }
}

/// Writes a synthetic RWKV-7 SafeTensors file (BlinkDL names and shapes, f16, metadata
/// `{"format": "pt"}` as `make_model.py`) to `path`. `opts.dtype` is ignored.
///
/// Errors: as [`write()`].
pub fn write_safetensors(opts: &SynthOptions, path: impl AsRef<Path>) -> Result<SynthReport> {
    let path = path.as_ref();
    let t0 = Instant::now();
    let init = Init::new(opts)?;
    let cfg = init.cfg;
    let tensors = init.blink_tensors();
    let params: u64 = tensors
        .iter()
        .map(|t| t.shape.iter().product::<usize>() as u64)
        .sum();
    let n = tensors.len();
    let n_threads = threads(opts);
    let views = tensors.into_iter().map(|t| {
        (
            t.name.clone(),
            LazyF16 {
                init: &init,
                t,
                threads: n_threads,
            },
        )
    });
    let meta = std::collections::HashMap::from([("format".to_string(), "pt".to_string())]);
    safetensors::serialize_to_file(views, Some(meta), path).map_err(|e| match e {
        safetensors::SafeTensorError::IoError(io) => EngineError::io(path, io),
        other => EngineError::invalid(format!("synth: {}: {other}", path.display())),
    })?;
    SynthReport::of_written(path, n, params, t0, cfg)
}
