//! `rwkv`: inspect, tokenize, generate, chat, eval, embed, bench and profile RWKV-7 models.
use clap::{Parser, Subcommand};

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
enum Command {}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {}
}
