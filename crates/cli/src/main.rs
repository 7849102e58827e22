//! `rwkv`: inspect, tokenize, generate, chat, eval, embed, bench and profile RWKV-7 models.
use clap::{Parser, Subcommand};

mod cmd_inspect;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Inspect(args) => cmd_inspect::run(args),
    }
}
