//! `rwkv_studio._native`: the Python shell over `rwkv-engine` (PyO3). Thin by design, like
//! the CLI and the Tauri commands: each method parses its arguments, calls the engine API
//! with the GIL released and maps the error; arrays leave as owned `Vec`s handed to numpy
//! (no copy). The typed, documented surface is `rwkv_studio/__init__.pyi`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

mod constraint;
mod errors;
mod fields;
mod generate;
mod model;
mod shared;
mod state;

/// Every GPU adapter wgpu sees (respecting `WGPU_BACKEND`), as dicts: `index`, `name`,
/// `backend`, `device_type`, `driver`, `driver_info`.
#[pyfunction]
fn adapters(py: Python<'_>) -> PyResult<Vec<Bound<'_, PyDict>>> {
    let list = py.detach(rwkv_engine::gpu::GpuContext::list_adapters);
    list.into_iter()
        .map(|a| {
            let d = PyDict::new(py);
            d.set_item("index", a.index)?;
            d.set_item("name", a.name)?;
            d.set_item("backend", a.backend)?;
            d.set_item("device_type", a.device_type)?;
            d.set_item("driver", a.driver)?;
            d.set_item("driver_info", a.driver_info)?;
            Ok(d)
        })
        .collect()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", rwkv_buildinfo::VERSION)?;
    m.add("__commit__", rwkv_buildinfo::COMMIT)?;
    m.add_function(wrap_pyfunction!(adapters, m)?)?;
    m.add_class::<model::Model>()?;
    m.add_class::<state::State>()?;
    m.add_class::<generate::TextStream>()?;
    m.add_class::<fields::FieldAnalysis>()?;
    Ok(())
}
