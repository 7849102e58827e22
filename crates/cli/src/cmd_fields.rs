//! `rwkv fields`: embed labelled fields (optionally in the context of a document) in
//! one batched pass and compare them.

use std::path::PathBuf;

use clap::Args;
use rwkv_engine::analysis::{Field, FieldOptions, Pooling};

use crate::cmd_embed::{preview, print_matrix, print_out};
use crate::common::ModelArgs;

#[derive(Args, Debug)]
pub struct FieldsArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// A UTF-8 document: each field is embedded after it (its state is forked).
    #[arg(long)]
    pub doc: Option<PathBuf>,
    /// A field as `Label=text` (repeatable).
    #[arg(long = "field", required = true)]
    pub fields: Vec<String>,
    /// Mean over each field's tokens instead of the last token's hidden state.
    #[arg(long)]
    pub mean: bool,
    /// Print the whole analysis as JSON (vectors, norms, similarity matrix, timing).
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: FieldsArgs) -> anyhow::Result<()> {
    let fields = a
        .fields
        .iter()
        .map(|s| Field::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut eng = a.model.load(a.json)?;
    // Fields are embedded after the document, which starts from the initial state; with
    // no document, after the initial state itself.
    let init = match &a.model.init_state {
        Some(_) => Some(a.model.start_state(&mut eng)?),
        None => None,
    };
    let doc = match &a.doc {
        None => init,
        Some(p) => {
            let text =
                std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
            let tokens = eng.tokenizer().encode(&text);
            if tokens.is_empty() {
                anyhow::bail!("{}: the document is empty", p.display());
            }
            let t0 = std::time::Instant::now();
            let st = match init {
                Some(st) => {
                    eng.feed(st, &tokens)?;
                    st
                }
                None => eng.prefill(&tokens)?,
            };
            if !a.json {
                eprintln!(
                    "document {}: {} tokens prefilled in {:.0} ms",
                    p.display(),
                    tokens.len(),
                    t0.elapsed().as_secs_f64() * 1e3
                );
            }
            Some(st)
        }
    };
    let opts = FieldOptions {
        pooling: if a.mean { Pooling::Mean } else { Pooling::Last },
    };
    let fa = eng.analyze_fields(&fields, doc, &opts, None)?;
    if a.json {
        return print_out(&serde_json::to_string(&fa)?);
    }
    println!(
        "{} fields, dim {}, {:?} pooling{}: {:.1} ms (forward {:.1} ms)",
        fa.fields.len(),
        fa.dim,
        fa.pooling,
        if fa.with_document {
            ", in the document's context"
        } else {
            ""
        },
        fa.timing.total_ms,
        fa.timing.forward_ms
    );
    for (f, input) in fa.fields.iter().zip(&fields) {
        println!(
            "  {:<16} {:>4} tokens  norm {:>8.4}  {:>5.1} % ({:.1} ms)  {}",
            preview(&f.label, 16),
            f.tokens,
            f.norm,
            f.time_share * 100.0,
            f.time_ms,
            preview(&input.text, 40)
        );
    }
    let labels: Vec<String> = fa.fields.iter().map(|f| f.label.clone()).collect();
    print_matrix(&labels, &fa.similarity);
    Ok(())
}
