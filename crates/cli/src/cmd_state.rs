//! `rwkv state save|load|inspect|export`: document states as `.rwkvstate` files
//! (format: `docs/state-format.md`).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use rwkv_engine::format::{read_state_header, StateHeader};
use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::{CancelToken, GenerateOptions};

use crate::cmd_generate::SamplingArgs;
use crate::common::{generate_to_stdout, ModelArgs};

#[derive(Args, Debug)]
pub struct StateArgs {
    #[command(subcommand)]
    pub command: StateCommand,
}

#[derive(Subcommand, Debug)]
pub enum StateCommand {
    /// Prefill a text into a state and save it.
    Save(SaveArgs),
    /// Load a state (checking it belongs to the model), optionally continue from it.
    Load(LoadArgs),
    /// Print a state file's header (no model, no GPU).
    Inspect(InspectArgs),
    /// Write a state as the fixtures' three .npy arrays.
    Export(ExportArgs),
}

#[derive(Args, Debug)]
pub struct SaveArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text to prefill.
    #[arg(long, conflicts_with = "file", required_unless_present = "file")]
    pub text: Option<String>,
    /// A UTF-8 file whose text to prefill.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Where to write the state (`.rwkvstate`).
    #[arg(long)]
    pub out: PathBuf,
}

#[derive(Args, Debug)]
pub struct LoadArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The `.rwkvstate` file.
    pub state: PathBuf,
    /// Text to feed after the state, then generate from.
    #[arg(long = "continue")]
    pub continue_text: Option<String>,
    /// Tokens to generate after `--continue`.
    #[arg(short = 'n', long, default_value_t = 64, requires = "continue_text")]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The `.rwkvstate` file.
    pub state: PathBuf,
    /// Print the header as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The `.rwkvstate` file.
    pub state: PathBuf,
    /// Output folder: state_att_x_prev.f32.npy [L, C], state_att_kv.f32.npy [L, H, N, N],
    /// state_ffn_x_prev.f32.npy [L, C].
    #[arg(long)]
    pub npy: PathBuf,
}

pub fn run(a: StateArgs) -> anyhow::Result<()> {
    match a.command {
        StateCommand::Save(a) => save(a),
        StateCommand::Load(a) => load(a),
        StateCommand::Inspect(a) => inspect(a),
        StateCommand::Export(a) => export(a),
    }
}

fn describe(h: &StateHeader) -> String {
    let l = &h.layout;
    format!(
        "RWKV state v{}: model {}\n  layout {}: {} layers × [att_shift {c} | wkv {}×{n}×{n} | ffn_shift {c}] f32\n  {} tokens, {} values ({:.2} MiB), data sha256 {}",
        h.version,
        h.fingerprint,
        l.id,
        l.n_layer,
        l.n_head,
        h.tokens,
        h.values,
        h.values as f64 * 4.0 / 1048576.0,
        h.data_sha256,
        c = l.n_embd,
        n = l.head_size,
    )
}

fn save(a: SaveArgs) -> anyhow::Result<()> {
    let text = match (&a.text, &a.file) {
        (Some(t), None) => t.clone(),
        (None, Some(p)) => {
            std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?
        }
        _ => anyhow::bail!("give --text or --file"),
    };
    let mut eng = a.model.load(false)?;
    let tokens = eng.tokenizer().encode(&text);
    if tokens.is_empty() {
        anyhow::bail!("the text is empty");
    }
    let t0 = std::time::Instant::now();
    let st = a.model.start_state(&mut eng)?;
    eng.feed(st, &tokens)?;
    let ms = t0.elapsed().as_secs_f64() * 1e3;
    let h = eng.save_state(st, tokens.len() as u64, &a.out)?;
    eprintln!(
        "prefilled {} tokens in {ms:.0} ms ({:.0} tok/s)",
        tokens.len(),
        tokens.len() as f64 / (ms / 1e3).max(1e-9)
    );
    println!("wrote {}\n{}", a.out.display(), describe(&h));
    Ok(())
}

fn load(a: LoadArgs) -> anyhow::Result<()> {
    let mut eng = a.model.load(false)?;
    let (st, h) = eng.load_state_with_header(&a.state)?;
    eprintln!("loaded {}\n{}", a.state.display(), describe(&h));
    let Some(text) = a.continue_text else {
        return Ok(());
    };
    let s = &a.sampling;
    let opts = GenerateOptions {
        max_tokens: a.max_tokens,
        sampler: SamplerOptions {
            temperature: s.temp,
            top_p: s.top_p,
            top_k: s.top_k,
            presence_penalty: s.presence_penalty,
            frequency_penalty: s.frequency_penalty,
            seed: s.seed,
            stop_strings: s.stop.clone(),
            ..Default::default()
        },
        constraint: None,
    };
    let res = generate_to_stdout(&mut eng, st, &text, &text, &opts, &CancelToken::new())?;
    eprintln!(
        "{} + {} tokens: prefill {:.0} tok/s, decode {:.1} tok/s ({:?})",
        res.stats.prompt_tokens,
        res.stats.generated_tokens,
        res.stats.prefill_tok_s,
        res.stats.decode_tok_s,
        res.stats.stop
    );
    Ok(())
}

fn inspect(a: InspectArgs) -> anyhow::Result<()> {
    let h = read_state_header(&a.state)?;
    if a.json {
        crate::cmd_embed::print_out(&serde_json::to_string_pretty(&h)?)?;
    } else {
        println!("{}\n{}", a.state.display(), describe(&h));
    }
    Ok(())
}

fn export(a: ExportArgs) -> anyhow::Result<()> {
    let mut eng = a.model.load(true)?;
    let st = eng.load_state(&a.state)?;
    for p in eng.export_state_npy(st, &a.npy)? {
        println!("{}", p.display());
    }
    Ok(())
}
