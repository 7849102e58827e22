//! `rwkv`: inspect, tokenize, generate, chat, serve, eval, embed, bench and profile RWKV-7 models.
use clap::{Parser, Subcommand};

mod cmd_adapter;
mod cmd_batch;
mod cmd_bench;
mod cmd_bench_constraint;
mod cmd_embed;
mod cmd_eval;
mod cmd_fields;
mod cmd_generate;
mod cmd_inspect;
mod cmd_kernels;
mod cmd_perplexity;
mod cmd_pull;
mod cmd_pybench;
mod cmd_serve;
mod cmd_state;
mod cmd_synth;
mod cmd_tokenize;
mod common;
mod constraint_args;
mod fault;
mod interrupt;

#[derive(Parser)]
#[command(
    name = "rwkv",
    version = rwkv_buildinfo::LONG_VERSION,
    about = "RWKV-7 on any GPU: the RWKV Studio engine from the command line"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Continue a prompt, streaming the text; prints prefill and decode speed.
    Generate(cmd_generate::GenerateArgs),
    /// Chat in the terminal with the RWKV template (`User: …\n\nAssistant:`).
    Chat(cmd_generate::ChatArgs),
    /// Serve the model over an OpenAI-compatible HTTP API (continuous batching,
    /// conversation state cache); see docs/server.md.
    Serve(cmd_serve::ServeArgs),
    /// Write logits, embeddings and the final state of a text as .npy files.
    Eval(cmd_eval::EvalArgs),
    /// Perplexity of a text, and with a base file the KL divergence, top-1 agreement and
    /// Δp against another model (as llama-perplexity measures them; files interchangeable).
    Perplexity(cmd_perplexity::PerplexityArgs),
    /// Measure load, prefill, decode, document state, fields, tokenizer, quality.
    Bench(cmd_bench::BenchArgs),
    /// Constrained decoding's cost: schema / grammar compile ms, mask µs per token, decode
    /// tok/s with and without a JSON Schema (docs/structured-output.md).
    BenchConstraint(cmd_bench_constraint::BenchConstraintArgs),
    /// Batched decode on the engine alone: B sequences × 1 token a pass, ms a step.
    Batch(cmd_batch::BatchArgs),
    /// GPU time of every dispatch of one forward pass.
    Profile(cmd_bench::ProfileArgs),
    /// Kernel microbenchmark: GB/s of the decode and TFLOP/s of the prefill matrix kernels
    /// per encoding and shape, the per-dispatch floor, the WKV scan.
    Kernels(cmd_kernels::KernelsArgs),
    /// Embed texts (hidden state after ln_out, no head) in one batched pass.
    Embed(cmd_embed::EmbedArgs),
    /// Save, load, inspect and export document states (.rwkvstate).
    State(cmd_state::StateArgs),
    /// Embed labelled fields, optionally after a document, and compare them.
    Fields(cmd_fields::FieldsArgs),
    /// List the GPU adapters wgpu sees.
    Adapters,
    /// Show what a model file holds: format, config, tokenizer, tensors, totals; on a LoRA
    /// adapter or state-tuning file: format, rank, alpha, default scale, targets, base shape.
    Inspect(cmd_inspect::Args),
    /// Merge LoRA adapters into a base model: a standalone SafeTensors model (W + SCALE·B·A);
    /// with no adapter, the base converted to SafeTensors with BlinkDL's names.
    Merge(cmd_adapter::MergeArgs),
    /// Turn text into World token ids (the model's vocabulary with --model).
    Tokenize(cmd_tokenize::tokenize::Args),
    /// Turn World token ids back into text.
    Detokenize(cmd_tokenize::detokenize::Args),
    /// Write a random RWKV-7 model of any shape (GGUF in llama.cpp's layout, or SafeTensors).
    Synth(cmd_synth::Args),
    /// Write a random LoRA adapter (RWKV-PEFT keys) for a model, for benchmarks.
    SynthLora(cmd_synth::LoraArgs),
    /// Download a model from the catalog (or a URL) into the library, resuming and
    /// verifying its SHA-256; prints the file's path (docs/models.md).
    Pull(cmd_pull::PullArgs),
    /// The Rust side of python/bench/bench.py: time embed and logits through the Rust API (JSON).
    Pybench(cmd_pybench::PyBenchArgs),
}

/// Engine log lines (`log` crate) to stderr at the level `RUST_LOG` names
/// (`error` … `trace`; unset: warnings and errors), e.g. `RUST_LOG=debug` for the load
/// phase timings. Only this process's crates: wgpu's own debug output is noise here.
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::max_level()
            && (m.level() <= log::Level::Warn || m.target().starts_with("rwkv"))
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

fn init_log() {
    let level = std::env::var("RUST_LOG")
        .ok()
        .and_then(|v| v.parse::<log::LevelFilter>().ok())
        .unwrap_or(log::LevelFilter::Warn);
    if log::set_logger(&StderrLog).is_ok() {
        log::set_max_level(level);
    }
}

/// Errors end the command with status 1 and their message and causes on stderr (never a
/// backtrace: they are for the person at the terminal).
fn main() -> std::process::ExitCode {
    init_log();
    match run(Cli::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) if e.is::<interrupt::Interrupted>() => {
            std::process::ExitCode::from(interrupt::EXIT_INTERRUPTED)
        }
        Err(e) => {
            eprintln!("Error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Generate(a) => cmd_generate::generate(a),
        Command::Chat(a) => cmd_generate::chat(a),
        Command::Serve(a) => cmd_serve::serve(a),
        Command::Batch(a) => cmd_batch::batch(a),
        Command::Eval(a) => cmd_eval::run(a),
        Command::Bench(a) => cmd_bench::bench(a),
        Command::Perplexity(a) => cmd_perplexity::run(a),
        Command::BenchConstraint(a) => cmd_bench_constraint::run(a),
        Command::Profile(a) => cmd_bench::profile(a),
        Command::Kernels(a) => cmd_kernels::run(a),
        Command::Embed(a) => cmd_embed::run(a),
        Command::State(a) => cmd_state::run(a),
        Command::Fields(a) => cmd_fields::run(a),
        Command::Adapters => {
            for a in rwkv_engine::gpu::GpuContext::list_adapters() {
                println!(
                    "{}: {} ({}, {}, {} {})",
                    a.index, a.name, a.backend, a.device_type, a.driver, a.driver_info
                );
            }
            Ok(())
        }
        Command::Inspect(args) => match cmd_adapter::inspect(&args)? {
            true => Ok(()),
            false => cmd_inspect::run(args),
        },
        Command::Merge(a) => cmd_adapter::merge(a),
        Command::Tokenize(args) => cmd_tokenize::tokenize::run(args),
        Command::Detokenize(args) => cmd_tokenize::detokenize::run(args),
        Command::Synth(args) => cmd_synth::run(args),
        Command::SynthLora(args) => cmd_synth::run_lora(args),
        Command::Pybench(args) => cmd_pybench::run(args),
        Command::Pull(args) => cmd_pull::run(args),
    }
}
