//! `rwkv serve`: the local OpenAI-compatible server (`rwkv-server`) on one model, until
//! Ctrl-C or SIGTERM. See docs/server.md.

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use rwkv_server::{Server, ServerConfig};

use crate::common::ModelArgs;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Address to listen on. Anything but loopback needs --api-key (or --insecure-no-key).
    #[arg(long, default_value = "127.0.0.1")]
    pub host: IpAddr,
    /// Port (0: any free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Clients must send `Authorization: Bearer KEY`. Default: the RWKV_API_KEY
    /// environment variable when set, else no key (loopback only).
    #[arg(long, env = "RWKV_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// Serve a non-loopback address without a key.
    #[arg(long)]
    pub insecure_no_key: bool,
    /// The model id clients name (default: the file's stem).
    #[arg(long)]
    pub model_id: Option<String>,
    /// Most sequences generating at once (the running batch).
    #[arg(long, default_value_t = 16)]
    pub parallel: usize,
    /// Most requests waiting for a place in the batch (more get 429).
    #[arg(long, default_value_t = 256)]
    pub max_queue: usize,
    /// Conversation state cache budget, MiB (GPU and host memory together). Default:
    /// 2048, or twice the GPU share when that is larger.
    #[arg(long)]
    pub ctx_cache_mib: Option<u64>,
    /// Of the cache, MiB that may stay on the GPU (the rest spills to host memory).
    /// Default: 512, or one state per --parallel sequence when that is more.
    #[arg(long)]
    pub ctx_cache_gpu_mib: Option<u64>,
    /// Prompt tokens prefilled per step beside the running streams.
    #[arg(long, default_value_t = 256)]
    pub prefill_chunk: usize,
    /// Longest prompt, tokens.
    #[arg(long, default_value_t = 65_536)]
    pub max_prompt_tokens: usize,
    /// Largest max_tokens a request may ask.
    #[arg(long, default_value_t = 16_384)]
    pub max_tokens_cap: usize,
    /// Largest request body, bytes.
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// Allow browser pages from this origin (`*`: any) to call the API.
    #[arg(long, value_name = "ORIGIN")]
    pub cors: Option<String>,
    /// Batch-invariant kernels: a request's greedy output is bit-identical alone and in a
    /// batch (slower at 1–8 sequences; see docs/server.md).
    #[arg(long)]
    pub batch_invariant: bool,
    /// Default temperature when a request gives none.
    #[arg(long)]
    pub temperature: Option<f32>,
    /// Default top_p when a request gives none.
    #[arg(long)]
    pub top_p: Option<f32>,
    /// Default presence penalty when a request gives none.
    #[arg(long)]
    pub presence_penalty: Option<f32>,
    /// Default frequency penalty when a request gives none.
    #[arg(long)]
    pub frequency_penalty: Option<f32>,
    /// Default penalty decay when a request gives none.
    #[arg(long)]
    pub penalty_decay: Option<f32>,
}

pub fn serve(a: ServeArgs) -> anyhow::Result<()> {
    let mut cfg = ServerConfig {
        host: a.host,
        port: a.port,
        api_key: a.api_key.clone(),
        insecure_no_key: a.insecure_no_key,
        model_id: a.model_id.clone().unwrap_or_else(|| {
            a.model
                .model
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| "rwkv".into())
        }),
        parallel: a.parallel,
        max_queue: a.max_queue,
        ctx_cache_bytes: a.ctx_cache_mib.map(|m| m << 20),
        ctx_cache_gpu_bytes: a.ctx_cache_gpu_mib.map(|m| m << 20),
        prefill_chunk: a.prefill_chunk,
        max_body_bytes: a.max_body_bytes,
        max_prompt_tokens: a.max_prompt_tokens,
        max_tokens_cap: a.max_tokens_cap,
        cors_origin: a.cors.clone(),
        ..Default::default()
    };
    cfg.default_max_tokens = cfg.default_max_tokens.min(cfg.max_tokens_cap);
    let s = &mut cfg.sampling;
    s.temperature = a.temperature.unwrap_or(s.temperature);
    s.top_p = a.top_p.unwrap_or(s.top_p);
    s.presence_penalty = a.presence_penalty.unwrap_or(s.presence_penalty);
    s.frequency_penalty = a.frequency_penalty.unwrap_or(s.frequency_penalty);
    s.penalty_decay = a.penalty_decay.unwrap_or(s.penalty_decay);
    // Refuse unsafe settings before the model takes minutes to load.
    cfg.validate().map_err(anyhow::Error::msg)?;
    let mut model = a.model.clone();
    // A pass takes the whole batch plus a prefill chunk.
    model.chunk = model.chunk.max(a.prefill_chunk + a.parallel);
    let mut opts_eng = model.load_options();
    // Every running sequence (decoding or prefilling) may share one pass.
    opts_eng.max_batch = a.parallel;
    opts_eng.batch_invariant = a.batch_invariant;
    opts_eng.tuning = Some(rwkv_server::serving_tuning());
    let eng = model.load_with(&opts_eng, false)?;
    cfg.init_state = model.init_state(&eng)?.map(Arc::new);
    let server = Server::start(eng, cfg).context("starting the server")?;
    eprintln!(
        "serving on {} (OpenAI-compatible; Ctrl-C stops)",
        server.base_url()
    );
    let (tx, rx) = std::sync::mpsc::channel();
    ctrlc::set_handler(move || {
        let _ = tx.send(());
    })
    .context("installing the Ctrl-C handler")?;
    let _ = rx.recv();
    eprintln!("stopping …");
    server.stop();
    Ok(())
}
