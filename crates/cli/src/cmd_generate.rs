//! `rwkv generate` and `rwkv chat`: streaming text generation.

use std::io::BufRead;

use clap::Args;
use rwkv_engine::sampler::SamplerOptions;
use rwkv_engine::GenerateOptions;

use crate::common::{generate_to_stdout, ModelArgs};
use crate::constraint_args::ConstraintArgs;
use crate::interrupt::{self, Armed, Interrupted};

#[derive(Args, Debug, Clone)]
pub struct SamplingArgs {
    /// Temperature (0 = greedy).
    #[arg(long, default_value_t = 1.0)]
    pub temp: f32,
    #[arg(long, default_value_t = 0.3)]
    pub top_p: f32,
    /// 0 = off.
    #[arg(long, default_value_t = 0)]
    pub top_k: usize,
    #[arg(long, default_value_t = 0.5)]
    pub presence_penalty: f32,
    #[arg(long, default_value_t = 0.5)]
    pub frequency_penalty: f32,
    #[arg(long)]
    pub seed: Option<u64>,
    /// Stop strings (repeatable).
    #[arg(long = "stop")]
    pub stop: Vec<String>,
}

impl SamplingArgs {
    fn options(&self, default_stops: &[&str]) -> SamplerOptions {
        let mut stops: Vec<String> = default_stops.iter().map(|s| s.to_string()).collect();
        stops.extend(self.stop.iter().cloned());
        SamplerOptions {
            temperature: self.temp,
            top_p: self.top_p,
            top_k: self.top_k,
            presence_penalty: self.presence_penalty,
            frequency_penalty: self.frequency_penalty,
            seed: self.seed,
            stop_strings: stops,
            ..Default::default()
        }
    }
}

#[derive(Args, Debug)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// The text to continue.
    #[arg(long, short)]
    pub prompt: String,
    /// Tokens to generate.
    #[arg(short = 'n', long, default_value_t = 128)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
    /// Print the generated token ids as JSON at the end (for scripts and tests).
    #[arg(long)]
    pub print_ids: bool,
    /// Pure greedy decoding: argmax, no penalties, no stop strings (for references).
    #[arg(long)]
    pub greedy: bool,
    #[command(flatten)]
    pub constraint: ConstraintArgs,
}

pub fn generate(a: GenerateArgs) -> anyhow::Result<()> {
    // A bad schema or grammar file fails before the model loads.
    let constraint = a.constraint.spec()?;
    let mut eng = a.model.load(false)?;
    let st = a.model.start_state(&mut eng)?;
    let sampler = if a.greedy {
        SamplerOptions {
            stop_tokens: Vec::new(),
            stop_strings: Vec::new(),
            ..SamplerOptions::greedy()
        }
    } else {
        a.sampling.options(&[])
    };
    let opts = GenerateOptions {
        max_tokens: a.max_tokens,
        sampler,
        constraint,
    };
    // Ctrl-C stops the generation at the next token; the stats still print (stop:
    // Cancelled) and the exit status is 130.
    interrupt::install()?;
    let armed = Armed::new();
    let res = generate_to_stdout(&mut eng, st, &a.prompt, &a.prompt, &opts, armed.token())?;
    let s = &res.stats;
    eprintln!(
        "prompt {} tokens: {:.1} ms ({:.0} tok/s); generated {} tokens: {:.0} tok/s; first token {:.1} ms; stop: {:?}",
        s.prompt_tokens, s.prefill_ms, s.prefill_tok_s, s.generated_tokens, s.decode_tok_s, s.ttft_ms, s.stop
    );
    if a.print_ids {
        println!("{}", serde_json::to_string(&res.tokens)?);
    }
    if armed.interrupted() {
        return Err(Interrupted.into());
    }
    if res.complete == Some(false) {
        // Scripts must not take a cut structure for a valid one.
        anyhow::bail!(
            "the output does not complete the constraint (stop: {:?}; raise --max-tokens)",
            s.stop
        );
    }
    Ok(())
}

#[derive(Args, Debug)]
pub struct ChatArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Most tokens per reply.
    #[arg(short = 'n', long, default_value_t = 500)]
    pub max_tokens: usize,
    #[command(flatten)]
    pub sampling: SamplingArgs,
}

/// RWKV chat template: `User: …\n\nAssistant:`, replies end at `\n\n`.
pub fn chat(a: ChatArgs) -> anyhow::Result<()> {
    let mut eng = a.model.load(false)?;
    let st = a.model.start_state(&mut eng)?;
    let opts = GenerateOptions {
        max_tokens: a.max_tokens,
        sampler: a.sampling.options(&["\n\n"]),
        constraint: None,
    };
    interrupt::install()?;
    eprintln!(
        "chat: type a message and press Enter; Ctrl-C stops a reply; an empty line, Ctrl-D or \
         Ctrl-C at the prompt quits."
    );
    let stdin = std::io::stdin();
    let mut first = true;
    loop {
        eprint!("User: ");
        let mut line = String::new();
        if stdin.lock().read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        // After a reply the state lacks its final "\n\n" (stop strings are not fed).
        let sep = if first { "" } else { "\n\n" };
        first = false;
        let prompt = format!("{sep}User: {}\n\nAssistant:", line.trim());
        // Armed for this reply only: a Ctrl-C at the prompt exits.
        let armed = Armed::new();
        let res = generate_to_stdout(&mut eng, st, "Assistant:", &prompt, &opts, armed.token())?;
        eprintln!(
            "[{} tokens, {:.0} tok/s{}]",
            res.stats.generated_tokens,
            res.stats.decode_tok_s,
            if armed.interrupted() { ", stopped" } else { "" }
        );
    }
    Ok(())
}
