//! `--json-schema FILE | --grammar FILE | --regex R | --json`: what the generated text
//! must match (constrained decoding), shared by `rwkv generate` and `rwkv bench-constraint`.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::Args;
use rwkv_engine::constraint::MAX_SPEC_BYTES;
use rwkv_engine::ConstraintSpec;

#[derive(Args, Debug, Clone, Default)]
pub struct ConstraintArgs {
    /// The output is one JSON value valid against this JSON Schema file.
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub json_schema: Option<PathBuf>,
    /// The output matches this grammar file: llama.cpp GBNF (`.gbnf`, or text with
    /// `::=`) or llguidance Lark (`.lark`, else).
    #[arg(long, value_name = "FILE", group = "constraint")]
    pub grammar: Option<PathBuf>,
    /// The whole output matches this regular expression (Rust `regex` syntax).
    #[arg(long, value_name = "REGEX", group = "constraint")]
    pub regex: Option<String>,
    /// The output is one JSON object (any keys).
    #[arg(long, group = "constraint")]
    pub json: bool,
}

impl ConstraintArgs {
    /// The constraint asked for, read from its file; `None` when none was.
    ///
    /// Errors: an unreadable or oversized file, a schema file that is not JSON.
    pub fn spec(&self) -> anyhow::Result<Option<ConstraintSpec>> {
        if let Some(p) = &self.json_schema {
            let text = read(p)?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{}: not JSON", p.display()))?;
            return Ok(Some(ConstraintSpec::JsonSchema(v)));
        }
        if let Some(p) = &self.grammar {
            let text = read(p)?;
            return Ok(Some(grammar_spec(p, text)));
        }
        if let Some(r) = &self.regex {
            return Ok(Some(ConstraintSpec::Regex(r.clone())));
        }
        Ok(self.json.then_some(ConstraintSpec::JsonObject))
    }
}

/// GBNF or Lark, by extension, else by content (`::=` is GBNF's rule arrow).
pub fn grammar_spec(path: &Path, text: String) -> ConstraintSpec {
    match path.extension().and_then(|e| e.to_str()) {
        Some("gbnf") => ConstraintSpec::Gbnf(text),
        Some("lark") => ConstraintSpec::Lark(text),
        _ if text.contains("::=") => ConstraintSpec::Gbnf(text),
        _ => ConstraintSpec::Lark(text),
    }
}

fn read(p: &Path) -> anyhow::Result<String> {
    let len = std::fs::metadata(p)
        .with_context(|| format!("{}", p.display()))?
        .len();
    if len > MAX_SPEC_BYTES as u64 {
        anyhow::bail!("{}: {len} bytes, at most {MAX_SPEC_BYTES}", p.display());
    }
    std::fs::read_to_string(p).with_context(|| format!("{}", p.display()))
}
