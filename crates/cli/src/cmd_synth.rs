//! `rwkv synth`: write a random RWKV-7 model of any real shape, as GGUF in llama.cpp's
//! exact layout (F16, Q8_0, Q4_K_M) or as SafeTensors with BlinkDL's names (f16).

use std::path::PathBuf;

use anyhow::{bail, Context};
use rwkv_engine::LoraRanks;
use rwkv_synth::{self as synth, SynthOptions, SynthType};

/// Arguments of `rwkv synth`.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of layers (blocks).
    #[arg(long)]
    pub layers: usize,
    /// Embedding width C (a multiple of 64).
    #[arg(long)]
    pub embd: usize,
    /// Channel-mix width (default 4·C).
    #[arg(long)]
    pub ffn: Option<usize>,
    /// Vocabulary size (the World vocabulary is 65536).
    #[arg(long, default_value_t = 65536)]
    pub vocab: usize,
    /// LoRA ranks `w,a,v,g` (default: RWKV-LM's formulas of C).
    #[arg(long)]
    pub lora: Option<String>,
    /// Encoding of the big matrices in a GGUF: F16, Q8_0 or Q4_K (= llama.cpp's Q4_K_M:
    /// head Q6_K). Ignored for .safetensors (always f16).
    #[arg(long = "type", default_value = "F16")]
    pub dtype: String,
    /// Output file: `.gguf` or `.safetensors`.
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the random weights.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// `general.name` in the GGUF (default `rwkv7-synth-L{layers}-C{embd}`).
    #[arg(long)]
    pub name: Option<String>,
    /// Worker threads (default: all cores).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Q4_K / Q6_K with llama.cpp's full reference search (~10× slower) instead of
    /// round-to-nearest.
    #[arg(long)]
    pub ref_quant: bool,
}

fn parse_lora(s: &str) -> anyhow::Result<LoraRanks> {
    let v: Vec<usize> = s
        .split(',')
        .map(|x| x.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .with_context(|| format!("--lora {s:?}: expected four integers w,a,v,g"))?;
    match v.as_slice() {
        &[decay_w, iclr_a, value_v, gate_g] => Ok(LoraRanks {
            decay_w,
            iclr_a,
            value_v,
            gate_g,
        }),
        _ => bail!("--lora {s:?}: expected four integers w,a,v,g"),
    }
}

/// Runs `rwkv synth`: writes the file and prints its shape, size and write time.
pub fn run(args: Args) -> anyhow::Result<()> {
    let Some(dtype) = SynthType::parse(&args.dtype) else {
        bail!("--type {}: expected F16, Q8_0 or Q4_K", args.dtype);
    };
    let opts = SynthOptions {
        n_layer: args.layers,
        n_embd: args.embd,
        ffn: args.ffn,
        vocab: args.vocab,
        lora: args.lora.as_deref().map(parse_lora).transpose()?,
        dtype,
        seed: args.seed,
        name: args.name,
        threads: args.threads,
        reference_quant: args.ref_quant,
    };
    let rep = synth::write(&opts, &args.out)
        .with_context(|| format!("writing {}", args.out.display()))?;
    let c = rep.config;
    println!(
        "{}: L={} C={} F={} lora={}/{}/{}/{} vocab={} {} tensors, {} params, {} bytes ({:.3} GiB) in {:.2} s ({:.2} GB/s)",
        args.out.display(),
        c.n_layer,
        c.n_embd,
        c.ffn_dim,
        c.lora.decay_w,
        c.lora.iclr_a,
        c.lora.value_v,
        c.lora.gate_g,
        c.vocab_size,
        rep.tensors,
        rep.params,
        rep.bytes,
        rep.bytes as f64 / (1u64 << 30) as f64,
        rep.seconds,
        rep.bytes as f64 / 1e9 / rep.seconds.max(1e-9),
    );
    Ok(())
}

/// Arguments of `rwkv synth-lora`.
#[derive(clap::Args, Debug)]
pub struct LoraArgs {
    /// The model the adapter is for (its shape is read from it).
    #[arg(long, short)]
    pub model: PathBuf,
    /// Rank of every adapted matrix.
    #[arg(long, default_value_t = 64)]
    pub rank: usize,
    /// Output `.safetensors` (RWKV-PEFT keys, f16, lora_alpha = rank).
    #[arg(long)]
    pub out: PathBuf,
    /// Seed of the random A and B.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Writes a seeded LoRA adapter on every attention and channel-mix matrix of a model.
pub fn run_lora(a: LoraArgs) -> anyhow::Result<()> {
    let file = rwkv_engine::ModelFile::open(&a.model)?;
    let cfg = rwkv_engine::Rwkv7Weights::from_file(&file)?.config;
    let t = std::time::Instant::now();
    let bytes = synth::write_lora(&cfg, a.rank, a.seed, &a.out)?;
    eprintln!(
        "wrote {} ({:.1} MiB, rank {} on 6 × {} matrices) in {:.1} s",
        a.out.display(),
        bytes as f64 / 1048576.0,
        a.rank,
        cfg.n_layer,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
