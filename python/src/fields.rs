//! `FieldAnalysis`: `Engine::analyze_fields` as numpy arrays.

use numpy::ndarray::{Array1, Array2};
use numpy::{IntoPyArray, PyArray1, PyArray2};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use rwkv_engine::analysis::FieldAnalysis as Analysis;
use rwkv_engine::Pooling;

use crate::shared::shape_err;

/// Labelled texts embedded (optionally after a document) and compared.
#[pyclass(frozen, get_all, module = "rwkv_studio")]
pub struct FieldAnalysis {
    /// The labels, in the order given.
    labels: Vec<String>,
    /// Tokens of each field's text.
    tokens: Vec<usize>,
    /// `[F, C]` float32 embeddings, row `i` for `labels[i]`.
    vectors: Py<PyArray2<f32>>,
    /// `[F]` float32 Euclidean norms of the rows of `vectors`.
    norms: Py<PyArray1<f32>>,
    /// `[F, F]` float32 cosine similarities.
    similarity: Py<PyArray2<f32>>,
    /// C.
    dim: usize,
    /// Whether the fields were embedded after a document.
    with_document: bool,
    /// `"last"` or `"mean"`.
    pooling: String,
    /// The model's fingerprint (64 hex digits).
    model: String,
    /// `total_ms`, `tokenize_ms`, `forward_ms`, `similarity_ms`.
    timing: Py<PyDict>,
}

pub fn pooling_name(p: Pooling) -> &'static str {
    match p {
        Pooling::Last => "last",
        Pooling::Mean => "mean",
    }
}

impl FieldAnalysis {
    /// Flattens the engine's per-field rows into the arrays (F ≤ 1024 rows: the only
    /// copy on this path, on the host, of at most a few MiB).
    pub fn from_engine(py: Python<'_>, a: Analysis) -> PyResult<Self> {
        let f = a.fields.len();
        let mut vectors = Vec::with_capacity(f * a.dim);
        for r in &a.fields {
            vectors.extend_from_slice(&r.embedding);
        }
        let sim: Vec<f32> = a.similarity.iter().flatten().copied().collect();
        let timing = PyDict::new(py);
        timing.set_item("total_ms", a.timing.total_ms)?;
        timing.set_item("tokenize_ms", a.timing.tokenize_ms)?;
        timing.set_item("forward_ms", a.timing.forward_ms)?;
        timing.set_item("similarity_ms", a.timing.similarity_ms)?;
        Ok(FieldAnalysis {
            labels: a.fields.iter().map(|r| r.label.clone()).collect(),
            tokens: a.fields.iter().map(|r| r.tokens).collect(),
            norms: Array1::from_iter(a.fields.iter().map(|r| r.norm))
                .into_pyarray(py)
                .unbind(),
            vectors: Array2::from_shape_vec((f, a.dim), vectors)
                .map_err(shape_err)?
                .into_pyarray(py)
                .unbind(),
            similarity: Array2::from_shape_vec((f, f), sim)
                .map_err(shape_err)?
                .into_pyarray(py)
                .unbind(),
            dim: a.dim,
            with_document: a.with_document,
            pooling: pooling_name(a.pooling).to_string(),
            model: a.model.to_hex(),
            timing: timing.unbind(),
        })
    }
}

#[pymethods]
impl FieldAnalysis {
    fn __repr__(&self) -> String {
        format!(
            "<rwkv_studio.FieldAnalysis: {} fields × {}{}, {} pooling>",
            self.labels.len(),
            self.dim,
            if self.with_document {
                " after a document"
            } else {
                ""
            },
            self.pooling
        )
    }

    fn __len__(&self) -> usize {
        self.labels.len()
    }
}
