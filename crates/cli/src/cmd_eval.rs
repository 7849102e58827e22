//! `rwkv eval`: logits at every position, embeddings, final state and tokens as files —
//! the tool for diffing the engine against any peer.

use std::path::PathBuf;

use clap::Args;
use rwkv_engine::{npy, Rows, SeqInput, Want};

use crate::common::ModelArgs;

#[derive(Args, Debug)]
pub struct EvalArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Text to tokenize and evaluate.
    #[arg(long, conflicts_with = "tokens")]
    pub text: Option<String>,
    /// A JSON file holding an array of token ids (or an object with a `tokens` array).
    #[arg(long)]
    pub tokens: Option<PathBuf>,
    /// Output folder: logits.f32.npy [T, V], embeddings.f32.npy [T, C],
    /// state_att_x_prev.f32.npy [L, C], state_att_kv.f32.npy [L, H, N, N],
    /// state_ffn_x_prev.f32.npy [L, C], tokens.json.
    #[arg(long)]
    pub out: PathBuf,
}

pub fn run(a: EvalArgs) -> anyhow::Result<()> {
    let mut eng = a.model.load(true)?;
    let tokens: Vec<u32> = match (&a.text, &a.tokens) {
        (Some(t), None) => eng.tokenizer().encode(t),
        (None, Some(p)) => crate::cmd_perplexity::read_token_file(p)?,
        _ => anyhow::bail!("give --text or --tokens"),
    };
    let st = a.model.start_state(&mut eng)?;
    let out = eng.forward(
        &[SeqInput {
            state: st,
            tokens: &tokens,
            rows: Rows::All,
        }],
        Want {
            logits: true,
            embeddings: true,
        },
        None,
    )?;
    let cfg = *eng.config();
    let t = tokens.len();
    std::fs::create_dir_all(&a.out)?;
    npy::write_f32(
        a.out.join("logits.f32.npy"),
        &[t, cfg.vocab_size],
        &out.logits[0],
    )?;
    npy::write_f32(
        a.out.join("embeddings.f32.npy"),
        &[t, cfg.n_embd],
        &out.embeddings[0],
    )?;
    // The fixtures' three state arrays (state_att_x_prev, state_att_kv, state_ffn_x_prev).
    eng.export_state_npy(st, &a.out)?;
    std::fs::write(
        a.out.join("tokens.json"),
        serde_json::to_string(&serde_json::json!({ "tokens": tokens }))?,
    )?;
    eprintln!("wrote {} positions to {}", t, a.out.display());
    Ok(())
}
