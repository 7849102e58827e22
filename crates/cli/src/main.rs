//! `rwkv`: inspect, tokenize, generate, chat, eval, embed, bench and profile RWKV-7 models.
use clap::{Parser, Subcommand};

mod cmd_inspect;
mod cmd_synth;

#[derive(Parser)]
#[command(
    name = "rwkv",
    version,
    about = "RWKV-7 on any GPU: the RWKV Studio engine from the command line"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show what a model file holds: format, config, tokenizer, tensors, totals.
    Inspect(cmd_inspect::Args),
    /// Write a random RWKV-7 model of any shape (GGUF in llama.cpp's layout, or SafeTensors).
    Synth(cmd_synth::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Inspect(args) => cmd_inspect::run(args),
        Command::Synth(args) => cmd_synth::run(args),
    }
}
