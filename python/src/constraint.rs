//! `generate(json_schema=…, grammar=…, regex=…)` → the engine's [`ConstraintSpec`].

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use rwkv_engine::{Constraint, ConstraintCompiler, ConstraintSpec};

use crate::errors::to_py;
use crate::shared::Shared;

/// The constraint the keywords ask for: `json_schema` as a dict (any JSON-serialisable
/// object, through Python's `json`) or JSON text; `grammar` GBNF when it holds `::=`,
/// else Lark.
///
/// Errors: ValueError for more than one keyword, or a schema that is not JSON.
pub fn spec(
    py: Python<'_>,
    json_schema: Option<Bound<'_, PyAny>>,
    grammar: Option<String>,
    regex: Option<String>,
) -> PyResult<Option<ConstraintSpec>> {
    let given = [json_schema.is_some(), grammar.is_some(), regex.is_some()];
    if given.iter().filter(|&&g| g).count() > 1 {
        return Err(PyValueError::new_err(
            "give at most one of json_schema, grammar, regex",
        ));
    }
    if let Some(s) = json_schema {
        let text: String = if s.is_instance_of::<PyString>() {
            s.extract()?
        } else {
            py.import("json")?.call_method1("dumps", (s,))?.extract()?
        };
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| PyValueError::new_err(format!("json_schema: not JSON: {e}")))?;
        return Ok(Some(ConstraintSpec::JsonSchema(v)));
    }
    if let Some(g) = grammar {
        return Ok(Some(if g.contains("::=") {
            ConstraintSpec::Gbnf(g)
        } else {
            ConstraintSpec::Lark(g)
        }));
    }
    Ok(regex.map(ConstraintSpec::Regex))
}

/// Compiles `spec` for this model (and drops it), so that a bad one raises at the call.
///
/// Errors: ValueError naming the construct.
pub fn check(shared: &Shared, spec: &ConstraintSpec) -> PyResult<()> {
    let comp = ConstraintCompiler::shared(&shared.tokenizer, shared.info.config.vocab_size)
        .map_err(to_py)?;
    Constraint::compile(&comp, spec).map_err(to_py)?;
    Ok(())
}
