//! `rwkv`: inspect, tokenize, generate, chat, eval, embed, bench and profile RWKV-7 models.
use clap::{Parser, Subcommand};

mod cmd_tokenize;

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
    /// Turn text into World token ids (the model's vocabulary with --model).
    Tokenize(cmd_tokenize::tokenize::Args),
    /// Turn World token ids back into text.
    Detokenize(cmd_tokenize::detokenize::Args),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Tokenize(args) => cmd_tokenize::tokenize::run(args),
        Command::Detokenize(args) => cmd_tokenize::detokenize::run(args),
    }
}
