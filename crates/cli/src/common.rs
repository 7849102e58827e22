//! Options shared by the subcommands that load a model.

use std::io::Write;
use std::time::Instant;

use clap::Args;
use rwkv_engine::gpu::AdapterChoice;
use rwkv_engine::{
    CancelToken, Engine, GenerateOptions, LoadOptions, LoadProgress, StateId, TextEvent, TextOutput,
};

#[derive(Args, Debug, Clone)]
pub struct ModelArgs {
    /// Model file: GGUF, SafeTensors or PyTorch .pth (RWKV-7).
    #[arg(long, short)]
    pub model: std::path::PathBuf,
    /// GPU adapter: index or name substring (see `rwkv adapters`). Default: discrete first.
    #[arg(long)]
    pub adapter: Option<String>,
    /// Most tokens per forward pass (prefill chunk).
    #[arg(long, default_value_t = 256)]
    pub chunk: usize,
    /// GPU memory budget for the weights, MiB (default: what the device offers). A model
    /// over it is refused at load with the sizes.
    #[arg(long)]
    pub max_gpu_mb: Option<u64>,
}

impl ModelArgs {
    pub fn load_options(&self) -> LoadOptions {
        let adapter = match &self.adapter {
            None => AdapterChoice::Auto,
            Some(a) => match a.parse::<usize>() {
                Ok(i) => AdapterChoice::Index(i),
                Err(_) => AdapterChoice::Name(a.clone()),
            },
        };
        LoadOptions {
            adapter,
            max_chunk: self.chunk,
            max_gpu_bytes: self.max_gpu_mb.map(|m| m << 20),
            ..Default::default()
        }
    }

    /// Loads the model, logging the adapter and time-to-ready to stderr.
    pub fn load(&self, quiet: bool) -> anyhow::Result<Engine> {
        let t = Instant::now();
        let fault = crate::fault::fault()?;
        let eng = match fault {
            crate::fault::Fault::DataLimitMb(mb) => {
                if !quiet {
                    eprintln!(
                        "loading {} (fault injection: data limit + {mb} MiB) …",
                        self.model.display()
                    );
                }
                crate::fault::load_under_data_limit(&self.model, &self.load_options(), mb)?
            }
            _ => Engine::load_with_progress(&self.model, &self.load_options(), &mut |p| {
                if !quiet {
                    if let LoadProgress::Device = p {
                        eprintln!("loading {} …", self.model.display());
                    }
                }
            })?,
        };
        // Fault injection for the reliability tests (docs/reliability.md): the device is
        // destroyed right after the load, as a driver reset or an unplugged GPU would.
        if fault == crate::fault::Fault::LoseDevice {
            eng.gpu().device.destroy();
        }
        if !quiet {
            let i = eng.info();
            eprintln!(
                "ready in {:.0} ms on {} ({}): {} layers × {}, GPU weights {:.1} MiB ({})",
                t.elapsed().as_secs_f64() * 1e3,
                i.adapter.name,
                i.adapter.backend,
                i.config.n_layer,
                i.config.n_embd,
                i.gpu_weight_bytes as f64 / 1048576.0,
                i.gpu_types
                    .iter()
                    .map(|(t, n)| format!("{n}×{t}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
        Ok(eng)
    }
}

/// Prints `lead`, then generates from `prompt` into `state` with `opts`, streaming the
/// text to stdout as it comes, and ends the line.
pub fn generate_to_stdout(
    eng: &mut Engine,
    state: StateId,
    lead: &str,
    prompt: &str,
    opts: &GenerateOptions,
    cancel: &CancelToken,
) -> anyhow::Result<TextOutput> {
    let mut out = std::io::stdout().lock();
    write!(out, "{lead}")?;
    let res = eng.generate_text(state, prompt, opts, cancel, &mut |ev| {
        let TextEvent::Text { text, .. } = ev;
        let _ = write!(out, "{text}");
        let _ = out.flush();
        true
    })?;
    writeln!(out)?;
    Ok(res)
}
