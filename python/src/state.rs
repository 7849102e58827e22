//! `State`: a sequence's recurrent state on the model's GPU (`[att_shift C | wkv H×N×N |
//! ffn_shift C]` per layer, f32), freed when the Python object dies.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use numpy::ndarray::{Array2, Array4};
use numpy::{IntoPyArray, PyArray2, PyArray4};
use pyo3::prelude::*;
use rwkv_engine::StateId;

use crate::model::Model;
use crate::shared::{shape_err, Shared};

/// A sequence's recurrent state on its model's GPU (per layer `[att_shift C | wkv H×N×N |
/// ffn_shift C]` f32): `model.prefill(text)`, `fork()`, `to_numpy()`, `save(path)`,
/// `State.load(model, path)`. Freed when garbage-collected and no generation runs on it.
#[pyclass(frozen, module = "rwkv_studio")]
pub struct State {
    pub shared: Arc<Shared>,
    pub id: StateId,
    /// Tokens fed since the zero state (what `save` records; 0 = unknown).
    pub tokens: Arc<AtomicU64>,
    /// The slot's owner, shared with every generation running on this state.
    pub slot: Arc<Slot>,
}

/// Owns a state's slot: frees it when the last holder lets go — the Python `State`, or a
/// streaming generation still writing into it after `del state` (which would otherwise
/// free the slot under it, for the next new state to take).
pub struct Slot {
    shared: Arc<Shared>,
    id: StateId,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.shared.release(self.id);
    }
}

impl State {
    pub fn new(shared: Arc<Shared>, id: StateId, tokens: u64) -> Self {
        State {
            slot: Arc::new(Slot {
                shared: shared.clone(),
                id,
            }),
            shared,
            id,
            tokens: Arc::new(AtomicU64::new(tokens)),
        }
    }

    pub fn token_count(&self) -> u64 {
        self.tokens.load(Ordering::Relaxed)
    }
}

type Arrays<'py> = (
    Bound<'py, PyArray2<f32>>,
    Bound<'py, PyArray4<f32>>,
    Bound<'py, PyArray2<f32>>,
);

#[pymethods]
impl State {
    /// Tokens fed into this state since the zero state.
    #[getter]
    fn tokens(&self) -> u64 {
        self.token_count()
    }

    /// A copy of this state (made on the GPU); this one is untouched.
    fn fork(&self, py: Python<'_>) -> PyResult<State> {
        let id = self.id;
        let new = self.shared.run(py, move |eng| eng.fork_state(id))?;
        Ok(State::new(self.shared.clone(), new, self.token_count()))
    }

    /// The state as the fixtures' three arrays (float32, C order, owned by numpy):
    /// `att_x_prev [L, C]`, `att_kv [L, H, N, N]`, `ffn_x_prev [L, C]`.
    fn to_numpy<'py>(&self, py: Python<'py>) -> PyResult<Arrays<'py>> {
        let id = self.id;
        let a = self.shared.run(py, move |eng| eng.state_arrays(id))?;
        let c = &self.shared.info.config;
        let (l, e, h, n) = (c.n_layer, c.n_embd, c.n_head, c.head_size);
        let att = Array2::from_shape_vec((l, e), a.att_x_prev).map_err(shape_err)?;
        let kv = Array4::from_shape_vec((l, h, n, n), a.att_kv).map_err(shape_err)?;
        let ffn = Array2::from_shape_vec((l, e), a.ffn_x_prev).map_err(shape_err)?;
        Ok((
            att.into_pyarray(py),
            kv.into_pyarray(py),
            ffn.into_pyarray(py),
        ))
    }

    /// Writes the state to `path` as a `.rwkvstate` file (docs/state-format.md).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let (id, tokens) = (self.id, self.token_count());
        self.shared
            .run(py, move |eng| eng.save_state(id, tokens, &path))?;
        Ok(())
    }

    /// Loads a `.rwkvstate` file made by this model into a new state.
    #[staticmethod]
    fn load(py: Python<'_>, model: PyRef<'_, Model>, path: PathBuf) -> PyResult<State> {
        let shared = model.shared.clone();
        drop(model);
        let (id, header) = shared.run(py, move |eng| eng.load_state_with_header(&path))?;
        Ok(State::new(shared, id, header.tokens))
    }

    fn __repr__(&self) -> String {
        let c = &self.shared.info.config;
        format!(
            "<rwkv_studio.State: {} tokens, {} layers × [{} | {}×{}×{} | {}] f32>",
            self.token_count(),
            c.n_layer,
            c.n_embd,
            c.n_head,
            c.head_size,
            c.head_size,
            c.n_embd
        )
    }
}
