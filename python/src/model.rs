//! `Model`: a loaded RWKV-7 model and the engine calls on it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray2};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use rwkv_engine::analysis::{EmbedInput, Field, FieldOptions};
use rwkv_engine::gpu::AdapterChoice;
use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::{Engine, EngineError, GenerateOptions, InitState, LoadOptions, Pooling, StateId};

use crate::fields::FieldAnalysis;
use crate::generate::{Target, TextStream};
use crate::shared::{shape_err, Shared};
use crate::state::State;

#[derive(FromPyObject)]
enum AdapterArg {
    Index(usize),
    Name(String),
}

fn pooling(s: &str) -> PyResult<Pooling> {
    match s {
        "last" => Ok(Pooling::Last),
        "mean" => Ok(Pooling::Mean),
        _ => Err(PyValueError::new_err(format!(
            "pooling = {s:?}: expected \"last\" or \"mean\""
        ))),
    }
}

/// A `State` argument's slot and token counter, after checking it belongs to `shared`.
/// (Not a second `State`: that would free the slot when dropped.)
fn state_of(
    shared: &Arc<Shared>,
    s: Option<&PyRef<'_, State>>,
) -> PyResult<Option<(StateId, Arc<AtomicU64>)>> {
    match s {
        None => Ok(None),
        Some(s) => {
            shared.same(&s.shared)?;
            Ok(Some((s.id, s.tokens.clone())))
        }
    }
}

/// `lora=`: a path, a `(path, scale)` pair, or a list of them.
fn lora_specs(lora: Option<Bound<'_, PyAny>>) -> PyResult<Vec<(PathBuf, Option<f32>)>> {
    let Some(l) = lora else {
        return Ok(Vec::new());
    };
    let one = |x: &Bound<'_, PyAny>| -> PyResult<(PathBuf, Option<f32>)> {
        if let Ok((p, s)) = x.extract::<(PathBuf, f32)>() {
            if !s.is_finite() {
                return Err(PyValueError::new_err(format!(
                    "lora: scale {s} is not finite"
                )));
            }
            return Ok((p, Some(s)));
        }
        x.extract::<PathBuf>().map(|p| (p, None)).map_err(|_| {
            PyValueError::new_err("lora: expected a path, a (path, scale) pair, or a list of them")
        })
    };
    if let Ok(single) = one(&l) {
        return Ok(vec![single]);
    }
    l.try_iter()
        .map_err(|_| {
            PyValueError::new_err("lora: expected a path, a (path, scale) pair, or a list of them")
        })?
        .map(|x| one(&x?))
        .collect()
}

/// An RWKV-7 model (GGUF, SafeTensors or `.pth`) loaded onto a GPU:
/// `Model(path, *, adapter=None, chunk=256, lora=None, init_state=None)`.
/// Shapes, dtypes and exceptions of every method: `rwkv_studio/__init__.pyi`.
#[pyclass(frozen, module = "rwkv_studio")]
pub struct Model {
    pub shared: Arc<Shared>,
}

#[pymethods]
impl Model {
    #[new]
    #[pyo3(signature = (path, *, adapter=None, chunk=256, lora=None, init_state=None))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        adapter: Option<AdapterArg>,
        chunk: usize,
        lora: Option<Bound<'_, PyAny>>,
        init_state: Option<Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let loras = lora_specs(lora)?;
        let init_path: Option<PathBuf> = init_state.map(|p| p.extract()).transpose()?;
        if chunk == 0 {
            return Err(PyValueError::new_err(
                "chunk = 0: expected at least 1 token",
            ));
        }
        let opts = LoadOptions {
            adapter: match adapter {
                None => AdapterChoice::Auto,
                Some(AdapterArg::Index(i)) => AdapterChoice::Index(i),
                Some(AdapterArg::Name(n)) => AdapterChoice::Name(n),
            },
            max_chunk: chunk,
            ..Default::default()
        };
        let (engine, init) = py
            .detach(|| {
                let mut engine = Engine::load(&path, &opts)?;
                let mut active = Vec::new();
                for (p, scale) in &loras {
                    let a = engine.read_lora(p)?;
                    let s = scale.unwrap_or_else(|| a.default_scale());
                    active.push((engine.load_lora(&a)?, s));
                }
                engine.set_active_loras(&active)?;
                let init = match &init_path {
                    Some(p) => Some(engine.new_state_from(&InitState::open(p)?)?),
                    None => None,
                };
                Ok::<_, rwkv_engine::EngineError>((engine, init))
            })
            .map_err(crate::errors::to_py)?;
        Ok(Model {
            shared: Shared::new(engine, init),
        })
    }

    /// `path`, `format`, `layers`, `embd`, `heads`, `head_size`, `ffn`, `vocab`,
    /// `encodings` ({name: tensor count}), `adapter`, `backend`, `gpu_weight_bytes`,
    /// `load_ms`, `fingerprint`.
    #[getter]
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let i = &self.shared.info;
        let d = PyDict::new(py);
        d.set_item("path", &i.path)?;
        d.set_item("format", &i.format)?;
        d.set_item("layers", i.config.n_layer)?;
        d.set_item("embd", i.config.n_embd)?;
        d.set_item("heads", i.config.n_head)?;
        d.set_item("head_size", i.config.head_size)?;
        d.set_item("ffn", i.config.ffn_dim)?;
        d.set_item("vocab", i.config.vocab_size)?;
        let enc = PyDict::new(py);
        for (name, n) in &i.gpu_types {
            enc.set_item(name, n)?;
        }
        d.set_item("encodings", enc)?;
        d.set_item("adapter", &i.adapter.name)?;
        d.set_item("backend", &i.adapter.backend)?;
        d.set_item("gpu_weight_bytes", i.gpu_weight_bytes)?;
        d.set_item("load_ms", i.load_ms)?;
        d.set_item("fingerprint", i.fingerprint.to_hex())?;
        Ok(d)
    }

    /// World token ids of `text` (`list[int]`).
    fn tokenize(&self, text: &str) -> Vec<u32> {
        self.shared.tokenizer.encode(text)
    }

    /// The text of `ids` (bytes that are not valid UTF-8 become U+FFFD).
    fn detokenize(&self, ids: Vec<u32>) -> PyResult<String> {
        let bytes = self
            .shared
            .tokenizer
            .decode(&ids)
            .map_err(crate::errors::to_py)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Continues `prompt` with up to `max_tokens` sampled tokens: the text (`str`), or a
    /// `TextStream` of pieces with `stream=True`. With `state`, continues it and advances
    /// it in place. Ctrl-C cancels (the state keeps what was fed) and raises
    /// KeyboardInterrupt. ValueError: empty prompt, sampler option out of range.
    ///
    /// Constrained decoding (at most one of): `json_schema` (a dict or JSON text; the
    /// output is one JSON value valid against it), `grammar` (llama.cpp GBNF when it
    /// holds `::=`, else llguidance Lark), `regex` (the whole output matches). The
    /// stream's `stats["complete"]` says whether the output completes the constraint
    /// (`False` when `max_tokens` cut it). ValueError: a schema or grammar the engine
    /// cannot use (the message names the construct), raised before any token.
    #[pyo3(signature = (prompt, max_tokens=128, *, temperature=1.0, top_p=0.3, top_k=0,
        presence_penalty=0.5, frequency_penalty=0.5, stop=None, seed=None, stream=false,
        state=None, json_schema=None, grammar=None, regex=None))]
    #[allow(clippy::too_many_arguments)] // Python keywords
    fn generate(
        &self,
        py: Python<'_>,
        prompt: String,
        max_tokens: usize,
        temperature: f32,
        top_p: f32,
        top_k: usize,
        presence_penalty: f32,
        frequency_penalty: f32,
        stop: Option<Vec<String>>,
        seed: Option<u64>,
        stream: bool,
        state: Option<PyRef<'_, State>>,
        json_schema: Option<Bound<'_, PyAny>>,
        grammar: Option<String>,
        regex: Option<String>,
    ) -> PyResult<Py<PyAny>> {
        let constraint = crate::constraint::spec(py, json_schema, grammar, regex)?;
        if let Some(spec) = &constraint {
            // Compiled here too (and dropped) so that a bad schema raises at the call.
            crate::constraint::check(&self.shared, spec)?;
        }
        let sampler = SamplerOptions {
            temperature,
            top_p,
            top_k,
            presence_penalty,
            frequency_penalty,
            seed,
            stop_strings: stop.unwrap_or_default(),
            ..Default::default()
        };
        // Checked here, not in the worker, so that a stream raises at the call.
        sampler.validate().map_err(crate::errors::to_py)?;
        if self.shared.tokenizer.encode(&prompt).is_empty() {
            return Err(crate::errors::to_py(EngineError::InvalidInput {
                what: "the prompt is empty".into(),
            }));
        }
        let target = Target {
            state: state_of(&self.shared, state.as_ref())?,
            // The worker shares the slot with the Python `State`, which may die first.
            slot: state.as_ref().map(|s| s.slot.clone()),
        };
        drop(state);
        let opts = GenerateOptions {
            max_tokens,
            sampler,
            constraint,
        };
        let job = TextStream::start(self.shared.clone(), target, prompt, opts)?;
        if stream {
            Ok(Py::new(py, job)?.into_any())
        } else {
            Ok(PyString::new(py, &job.collect(py)?).into_any().unbind())
        }
    }

    /// Stops every generation running on this model at its next token, from any thread
    /// (a GUI's stop button, a watchdog): a blocking `generate` returns the text so far,
    /// a stream ends with `stats["stop"] == "cancelled"`; states keep what was fed.
    /// Returns how many generations were running (`int`).
    fn cancel(&self) -> usize {
        self.shared.cancel_all()
    }

    /// `[T, V]` float32 next-token logits after each of `ids` (from the zero state or a
    /// fork of `state`). ValueError: empty `ids`, an id >= vocab, a foreign state.
    /// MemoryError: more than 2 GiB of logits in one call (refused before any work).
    #[pyo3(signature = (ids, *, state=None))]
    fn logits<'py>(
        &self,
        py: Python<'py>,
        ids: Vec<u32>,
        state: Option<PyRef<'py, State>>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let from = state_of(&self.shared, state.as_ref())?.map(|s| s.0);
        let (t, vocab) = (ids.len(), self.shared.info.config.vocab_size);
        let v = self
            .shared
            .run(py, |eng| eng.logits_all(&ids, from.or(self.shared.init)))?;
        Ok(Array2::from_shape_vec((t, vocab), v)
            .map_err(shape_err)?
            .into_pyarray(py))
    }

    /// `[N, C]` float32 embeddings of `texts` (hidden state after `ln_out`, batched, no
    /// head); `pooling` "last" or "mean"; after a fork of `state` if given. ValueError: a
    /// text with no tokens (named by index), an unknown pooling.
    #[pyo3(signature = (texts, *, pooling="last", state=None))]
    fn embed<'py>(
        &self,
        py: Python<'py>,
        texts: Vec<String>,
        pooling: &str,
        state: Option<PyRef<'py, State>>,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let p = self::pooling(pooling)?;
        let from = state_of(&self.shared, state.as_ref())?
            .map(|s| s.0)
            .or(self.shared.init);
        let tok = &self.shared.tokenizer;
        let e = self.shared.run(py, |eng| match from {
            None => {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                eng.embed_texts(&refs, p)
            }
            Some(st) => {
                let ids: Vec<Vec<u32>> = texts.iter().map(|t| tok.encode(t)).collect();
                let inputs: Vec<EmbedInput> =
                    ids.iter().map(|t| EmbedInput::after(t, st)).collect();
                eng.embed(&inputs, p)
            }
        })?;
        let n = texts.len();
        Ok(Array2::from_shape_vec((n, e.dim), e.data)
            .map_err(shape_err)?
            .into_pyarray(py))
    }

    /// Embeds labelled fields (after `doc`: a text or a `State`, or from the zero state
    /// when `None`) and compares them.
    #[pyo3(signature = (doc, fields, *, pooling="last"))]
    fn fields(
        &self,
        py: Python<'_>,
        doc: Option<Bound<'_, PyAny>>,
        fields: Bound<'_, PyAny>,
        pooling: &str,
    ) -> PyResult<FieldAnalysis> {
        let opts = FieldOptions {
            pooling: self::pooling(pooling)?,
        };
        let list: Vec<Field> = match fields.cast::<PyDict>() {
            Ok(d) => d
                .iter()
                .map(|(k, v)| Ok(Field::new(k.extract::<String>()?, v.extract::<String>()?)))
                .collect::<PyResult<_>>()?,
            Err(_) => fields
                .extract::<Vec<(String, String)>>()?
                .into_iter()
                .map(|(l, t)| Field::new(l, t))
                .collect(),
        };
        enum Doc {
            None,
            Text(Vec<u32>),
            State(StateId),
        }
        let doc = match doc {
            None => Doc::None,
            Some(d) => match d.extract::<PyRef<'_, State>>() {
                Ok(s) => {
                    self.shared.same(&s.shared)?;
                    Doc::State(s.id)
                }
                Err(_) => {
                    let text: String = d.extract()?;
                    let ids = self.shared.tokenizer.encode(&text);
                    if ids.is_empty() {
                        return Err(PyValueError::new_err("doc: the document is empty"));
                    }
                    Doc::Text(ids)
                }
            },
        };
        let a = self.shared.run(py, |eng| match doc {
            Doc::None => eng.analyze_fields(&list, self.shared.init, &opts, None),
            Doc::State(st) => eng.analyze_fields(&list, Some(st), &opts, None),
            Doc::Text(ids) => {
                let st = match self.shared.init {
                    Some(i) => eng.prefill_from(i, &ids)?,
                    None => eng.prefill(&ids)?,
                };
                let r = eng.analyze_fields(&list, Some(st), &opts, None);
                let _ = eng.free_state(st);
                r
            }
        })?;
        FieldAnalysis::from_engine(py, a)
    }

    /// A new state holding `text` fed after `state` (a fork of it; `state` untouched),
    /// or after the zero state.
    #[pyo3(signature = (text, state=None))]
    fn prefill(
        &self,
        py: Python<'_>,
        text: &str,
        state: Option<PyRef<'_, State>>,
    ) -> PyResult<State> {
        let parent = state_of(&self.shared, state.as_ref())?;
        let ids = self.shared.tokenizer.encode(text);
        let (from, before) = match &parent {
            Some((id, n)) => (Some(*id), n.load(Ordering::Relaxed)),
            None => (None, 0),
        };
        let id = self.shared.run(py, |eng| match from.or(self.shared.init) {
            Some(p) => eng.prefill_from(p, &ids),
            None => eng.prefill(&ids),
        })?;
        Ok(State::new(
            self.shared.clone(),
            id,
            before + ids.len() as u64,
        ))
    }

    fn __repr__(&self) -> String {
        let i = &self.shared.info;
        format!(
            "<rwkv_studio.Model {}: {} layers × {}, vocab {}, on {}>",
            i.path, i.config.n_layer, i.config.n_embd, i.config.vocab_size, i.adapter.name
        )
    }
}
