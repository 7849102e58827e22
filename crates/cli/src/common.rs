//! Options shared by the subcommands that load a model.

use std::io::Write;
use std::time::Instant;

use clap::Args;
use rwkv_engine::gpu::AdapterChoice;
use rwkv_engine::{
    CancelToken, Engine, GenerateOptions, InitState, LoadOptions, LoadProgress, StateId, TextEvent,
    TextOutput,
};

/// A `--lora FILE[:SCALE]` argument.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraSpec {
    pub path: std::path::PathBuf,
    pub scale: Option<f32>,
}

/// `FILE[:SCALE]`: the text after the last `:` is the scale when it parses as a finite
/// number (so `C:\\x.gguf` and `a:b.pth` stay paths).
pub fn parse_lora(s: &str) -> Result<LoraSpec, String> {
    if let Some((path, scale)) = s.rsplit_once(':') {
        if let Ok(v) = scale.parse::<f32>() {
            if !v.is_finite() {
                return Err(format!("scale {scale} is not a finite number"));
            }
            if path.is_empty() {
                return Err("no file before the scale".into());
            }
            return Ok(LoraSpec {
                path: path.into(),
                scale: Some(v),
            });
        }
    }
    if s.is_empty() {
        return Err("empty file name".into());
    }
    Ok(LoraSpec {
        path: s.into(),
        scale: None,
    })
}

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
    /// LoRA adapter applied to every pass, repeatable: RWKV-PEFT .pth / .safetensors or a
    /// llama.cpp GGUF adapter. The delta of each adapted matrix is SCALE · B·A; SCALE
    /// defaults to alpha / rank when the file holds alpha (GGUF `adapter.lora.alpha`,
    /// SafeTensors `lora_alpha`), else 1 (RWKV-PEFT .pth files hold none).
    #[arg(long = "lora", value_name = "FILE[:SCALE]", value_parser = parse_lora)]
    pub lora: Vec<LoraSpec>,
    /// State-tuned initial state (RWKV-PEFT `blocks.N.att.time_state`, .pth /
    /// .safetensors): every sequence starts from it instead of zeros.
    #[arg(long, value_name = "FILE")]
    pub init_state: Option<std::path::PathBuf>,
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
        self.load_with(&self.load_options(), quiet)
    }

    /// [`Self::load`] with these load options (a command's own batch or kernel choice).
    pub fn load_with(&self, opts: &LoadOptions, quiet: bool) -> anyhow::Result<Engine> {
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
                crate::fault::load_under_data_limit(&self.model, opts, mb)?
            }
            _ => Engine::load_with_progress(&self.model, opts, &mut |p| {
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
        let mut eng = eng;
        self.apply_loras(&mut eng, quiet)?;
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

    /// Reads, uploads and activates the `--lora` adapters.
    pub fn apply_loras(&self, eng: &mut Engine, quiet: bool) -> anyhow::Result<()> {
        let mut active = Vec::new();
        for l in &self.lora {
            // Checked against the model before its factors are decoded.
            let a = eng.read_lora(&l.path)?;
            let s = l.scale.unwrap_or_else(|| a.default_scale());
            if !quiet {
                eprintln!(
                    "LoRA {}: rank {}, {} matrices, scale {s}",
                    a.name,
                    a.rank(),
                    a.matrices.len()
                );
            }
            active.push((eng.load_lora(&a)?, s));
        }
        eng.set_active_loras(&active)?;
        Ok(())
    }

    /// The `--init-state` file, read and checked against `eng`'s model.
    pub fn init_state(&self, eng: &Engine) -> anyhow::Result<Option<InitState>> {
        let Some(p) = &self.init_state else {
            return Ok(None);
        };
        let s = InitState::open(p)?;
        s.check(eng.config())?;
        Ok(Some(s))
    }

    /// A new state for a sequence: the `--init-state` when given, else zeros.
    pub fn start_state(&self, eng: &mut Engine) -> anyhow::Result<StateId> {
        Ok(match self.init_state(eng)? {
            Some(s) => eng.new_state_from(&s)?,
            None => eng.new_state()?,
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lora_arguments_split_file_and_scale() {
        let l = parse_lora("a/b.gguf:0.5").unwrap();
        assert_eq!((l.path.to_str(), l.scale), (Some("a/b.gguf"), Some(0.5)));
        let l = parse_lora("a/b.pth").unwrap();
        assert_eq!((l.path.to_str(), l.scale), (Some("a/b.pth"), None));
        // A colon in the path that is not followed by a number stays in the path.
        let l = parse_lora("C:\\lora\\x.safetensors").unwrap();
        assert_eq!(l.path.to_str(), Some("C:\\lora\\x.safetensors"));
        let l = parse_lora("dir:x/a.pth").unwrap();
        assert_eq!((l.path.to_str(), l.scale), (Some("dir:x/a.pth"), None));
        let l = parse_lora("C:\\a.pth:2").unwrap();
        assert_eq!((l.path.to_str(), l.scale), (Some("C:\\a.pth"), Some(2.0)));
        assert_eq!(parse_lora("x.pth:-2").unwrap().scale, Some(-2.0));
        assert!(parse_lora("x.pth:inf").is_err());
        assert!(parse_lora(":1").is_err());
        assert!(parse_lora("").is_err());
    }
}
