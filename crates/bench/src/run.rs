//! The benchmark run itself.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use rwkv_engine::sampler::{Sampler, SamplerOptions};
use rwkv_engine::{
    CancelToken, Engine, InitState, LoadOptions, Result, Rows, SeqInput, StateId, Want,
};

use crate::quality;
use crate::report::{BenchReport, Figure, ModelFacts};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    pub title: String,
    pub change: String,
    /// Prompt lengths for prefill tok/s.
    pub prefill: Vec<usize>,
    /// Tokens generated for decode tok/s.
    pub gen: usize,
    pub repeat: usize,
    /// Fields of ≈16 tokens for the field-analysis figure.
    pub fields: usize,
    pub load: LoadOptions,
    /// Loads to time (each a full load; big models make this the slow part).
    pub load_repeat: usize,
    pub quality: bool,
    /// Where the quality reference is cached (default: per-user cache).
    pub reference: Option<std::path::PathBuf>,
    pub commit: String,
    pub command: String,
    /// LoRA adapters applied to every pass: file and scale (`None`: the file's
    /// alpha / rank, else 1).
    pub loras: Vec<(std::path::PathBuf, Option<f32>)>,
    /// A state-tuned initial state every measured sequence starts from.
    pub init_state: Option<std::path::PathBuf>,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            title: "default".into(),
            change: String::new(),
            prefill: vec![212, 512],
            gen: 128,
            repeat: 10,
            fields: 6,
            load: LoadOptions::default(),
            load_repeat: 3,
            quality: true,
            reference: None,
            commit: String::new(),
            command: String::new(),
            loras: Vec::new(),
            init_state: None,
        }
    }
}

/// Reads and applies the adapters of `opts` on `eng`: their descriptions
/// (`name ×scale (rank r)`), the initial state, and the time it took (read + upload +
/// activation), ms.
fn apply_adapters(
    eng: &mut Engine,
    opts: &BenchOptions,
) -> Result<(Vec<String>, Option<InitState>, f64)> {
    let t = Instant::now();
    let mut active = Vec::new();
    let mut names = Vec::new();
    for (path, scale) in &opts.loras {
        let a = eng.read_lora(path)?;
        let s = scale.unwrap_or_else(|| a.default_scale());
        names.push(format!("{} ×{s} (rank {})", a.name, a.rank()));
        active.push((eng.load_lora(&a)?, s));
    }
    eng.set_active_loras(&active)?;
    let init = opts.init_state.as_ref().map(InitState::open).transpose()?;
    // The GPU work of the upload and the copies is part of the adapter's load.
    eng.gpu().wait()?;
    Ok((names, init, ms(t)))
}

/// A new state: the initial state when there is one, else zeros.
fn fresh(eng: &mut Engine, init: Option<&InitState>) -> Result<StateId> {
    match init {
        Some(i) => eng.new_state_from(i),
        None => eng.new_state(),
    }
}

/// Progress of a run, for the CLI's and the app's progress bars.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BenchProgress {
    pub step: String,
    pub done: usize,
    pub total: usize,
}

/// Seeded pseudo-random token ids below `vocab` (a prompt whose content does not matter).
pub fn tokens(seed: u64, n: usize, vocab: usize) -> Vec<u32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % vocab as u64) as u32
        })
        .collect()
}

fn ms(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e3
}

/// Drops the file's pages from the page cache where the OS allows (Linux).
fn drop_page_cache(path: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        if let Ok(f) = std::fs::File::open(path) {
            // SAFETY: plain syscall on a valid fd.
            let r = unsafe { posix_fadvise(f.as_raw_fd(), 0, 0, 4) };
            return r == 0;
        }
        false
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = path;
        false
    }
}

#[cfg(target_os = "linux")]
extern "C" {
    fn posix_fadvise(fd: i32, offset: i64, len: i64, advice: i32) -> i32;
}

/// Runs the benchmark on `path`. `progress` sees each step.
pub fn run(
    path: &Path,
    opts: &BenchOptions,
    progress: &mut dyn FnMut(BenchProgress),
) -> Result<BenchReport> {
    let steps = 6 + opts.prefill.len();
    let mut step = 0;
    let mut say = |s: &str| {
        step += 1;
        progress(BenchProgress {
            step: s.to_string(),
            done: step,
            total: steps,
        });
    };
    let mut figures = BTreeMap::new();
    say("load");
    let (mut eng, load_cold_ms) = measure_load(path, opts, &mut figures)?;
    let (lora_names, init, lora_ms) = apply_adapters(&mut eng, opts)?;
    if !opts.loras.is_empty() {
        figures.insert("lora_load_ms".into(), Figure::of(&[lora_ms]));
    }
    let mut m = Measure {
        eng: &mut eng,
        init: init.as_ref(),
        repeat: opts.repeat,
        figures: &mut figures,
    };
    let mut prefill_tok_s = BTreeMap::new();
    for &len in &opts.prefill {
        say(&format!("prefill {len}"));
        prefill_tok_s.insert(len.to_string(), m.prefill(len)?);
    }
    say("decode");
    m.decode(opts.gen)?;
    say("doc state");
    let doc_state = m.doc_state()?;
    say("fields");
    m.fields(doc_state, opts.fields)?;
    say("tokenize");
    m.tokenize();
    say("quality");
    // Quality is the base model's (its reference is the base's): adapters off for it.
    let q = if opts.quality {
        let active = eng.active_loras().to_vec();
        eng.set_active_loras(&[])?;
        let reference = quality::reference_for(&eng, path, opts.reference.as_deref())?;
        let q = quality::check(&mut eng, &reference)?;
        eng.set_active_loras(&active)?;
        Some(q)
    } else {
        None
    };
    let measured = Measured {
        figures,
        prefill_tok_s,
        load_cold_ms,
        quality: q,
        lora: lora_names,
    };
    Ok(report(&eng, opts, measured))
}

/// Load times: warm (page cache, pipeline caches, the process's device open: what switching
/// models in the app costs; one untimed load first fills the caches) repeated, then one
/// after dropping the pages (the cold figure, returned). Opening the device, once per
/// process, is a figure of its own (`load_first_run_ms`, from a fresh process, has
/// everything), recorded when this run opens it (not in the app, which has it open
/// already). Returns the loaded engine.
fn measure_load(
    path: &Path,
    opts: &BenchOptions,
    figures: &mut BTreeMap<String, Figure>,
) -> Result<(Engine, Option<f64>)> {
    let device = &opts.load.adapter;
    let opening = !rwkv_engine::gpu::GpuContext::shared_is_open(device);
    let t = Instant::now();
    rwkv_engine::gpu::GpuContext::shared(device)?;
    if opening {
        figures.insert("device_open_ms".into(), Figure::of(&[ms(t)]));
    }
    let mut loads = Vec::new();
    let mut engine = Some(Engine::load(path, &opts.load)?);
    for _ in 0..opts.load_repeat.max(1) {
        drop(engine.take());
        let t = Instant::now();
        engine = Some(Engine::load(path, &opts.load)?);
        loads.push(ms(t));
    }
    let load_cold_ms = if drop_page_cache(path) {
        drop(engine.take());
        let t = Instant::now();
        engine = Some(Engine::load(path, &opts.load)?);
        Some(ms(t))
    } else {
        None
    };
    let eng = match engine {
        Some(e) => e,
        None => Engine::load(path, &opts.load)?,
    };
    figures.insert("load_ms".into(), Figure::of(&loads));
    // GPU memory of the model ready to chat (`gpu_mem_mib` is after the whole run, its
    // output rows and states grown by what the run asked).
    let ready_mib = eng.info().gpu_total_bytes as f64 / 1048576.0;
    figures.insert("gpu_mem_ready_mib".into(), Figure::of(&[ready_mib]));
    Ok((eng, load_cold_ms))
}

/// The engine under measurement, the initial state every measured sequence starts from,
/// and where the figures go (each phase: one warm-up, then `repeat` timed runs).
struct Measure<'a> {
    eng: &'a mut Engine,
    init: Option<&'a InitState>,
    repeat: usize,
    figures: &'a mut BTreeMap<String, Figure>,
}

impl Measure<'_> {
    /// Prefill tok/s of a `len`-token prompt (`prefill_{len}_tok_s`); returns the median.
    fn prefill(&mut self, len: usize) -> Result<f64> {
        let (eng, init) = (&mut *self.eng, self.init);
        let vocab = eng.config().vocab_size;
        let logits_only = Want {
            logits: true,
            embeddings: false,
        };
        let toks = tokens(len as u64, len, vocab);
        let (mut v, mut first) = (Vec::new(), None);
        for r in 0..=self.repeat {
            let st = fresh(eng, init)?;
            let t = Instant::now();
            eng.forward(
                &[SeqInput {
                    state: st,
                    tokens: &toks,
                    rows: Rows::Last,
                }],
                logits_only,
                None,
            )?;
            let dt = ms(t);
            eng.free_state(st)?;
            let tok_s = len as f64 / (dt / 1e3);
            match r {
                0 => first = Some(tok_s),
                _ => v.push(tok_s),
            }
        }
        let f = Figure::with_first(&v, first);
        let median = f.median;
        self.figures.insert(format!("prefill_{len}_tok_s"), f);
        Ok(median)
    }

    /// TTFT of a 212-token prompt and decode tok/s of `gen` greedy tokens after it
    /// (`ttft_ms`, `decode_tok_s`, `decode_record_us`, `decode_write_us`,
    /// `decode_submit_us` and `decode_read_us` a step — `GenerateStats`; as llama-bench's
    /// tg, the steps without the draws between them), and of `gen` tokens drawn by the
    /// chat's default sampler in wall time (`decode_chat_tok_s`: temperature 1, top-p 0.3,
    /// presence and frequency penalties, drawn as the app's chat draws them —
    /// `generate_sampled` — what a chat user waits for, the host's part of the draws
    /// included, which the GPU waits for; `decode_chat_draw_us`: that part a token;
    /// `decode_chat_gpu_draws_pct`: the share of draws the GPU's candidates decided).
    fn decode(&mut self, gen: usize) -> Result<()> {
        let (eng, init) = (&mut *self.eng, self.init);
        let vocab = eng.config().vocab_size;
        let cancel = CancelToken::new();
        let prompt = tokens(7, 212, vocab);
        let (mut ttft, mut decode, mut record) = (Vec::new(), Vec::new(), Vec::new());
        let (mut write, mut submit, mut read) = (Vec::new(), Vec::new(), Vec::new());
        let (mut chat, mut draw_us, mut gpu_share) = (Vec::new(), Vec::new(), Vec::new());
        let (mut first_ttft, mut first_decode) = (None, None);
        for r in 0..=self.repeat {
            let st = fresh(eng, init)?;
            let mut greedy = |l: &mut [f32]| -> Result<u32> {
                Ok(l.iter()
                    .enumerate()
                    .max_by(|a, b| a.1.total_cmp(b.1))
                    .map_or(0, |(i, _)| i as u32))
            };
            let s = eng.generate(st, &prompt, gen.max(2), &mut greedy, &cancel, &mut |_| true)?;
            eng.free_state(st)?;
            let st = fresh(eng, init)?;
            let opts = SamplerOptions {
                seed: Some(r as u64),
                ..SamplerOptions::default()
            };
            let mut sampler = Sampler::new(opts, vocab)?;
            let t = Instant::now();
            let c =
                eng.generate_sampled(st, &prompt, gen.max(2), &mut sampler, &cancel, &mut |_| {
                    true
                })?;
            // Wall time from the first token on: the steps and the draws between them
            // (`decode_ms` counts the steps only).
            let wall_ms = t.elapsed().as_secs_f64() * 1e3 - c.ttft_ms;
            eng.free_state(st)?;
            let steps = c.generated_tokens.saturating_sub(1).max(1) as f64;
            if r > 0 {
                chat.push(steps / (wall_ms / 1e3).max(1e-9));
                draw_us.push((wall_ms - c.decode_ms).max(0.0) * 1e3 / steps);
                gpu_share.push(100.0 * c.gpu_draws as f64 / steps);
            }
            if r == 0 {
                first_ttft = Some(s.ttft_ms);
                first_decode = Some(s.decode_tok_s);
            } else {
                ttft.push(s.ttft_ms);
                decode.push(s.decode_tok_s);
                let steps = s.generated_tokens.saturating_sub(1).max(1) as f64;
                record.push(s.decode_record_ms * 1e3 / steps);
                write.push(s.decode_write_ms * 1e3 / steps);
                submit.push(s.decode_submit_ms * 1e3 / steps);
                read.push(s.decode_read_ms * 1e3 / steps);
            }
        }
        self.figures
            .insert("decode_record_us".into(), Figure::of(&record));
        self.figures
            .insert("decode_write_us".into(), Figure::of(&write));
        self.figures
            .insert("decode_submit_us".into(), Figure::of(&submit));
        self.figures
            .insert("decode_read_us".into(), Figure::of(&read));
        let ttft = Figure::with_first(&ttft, first_ttft);
        self.figures.insert("ttft_ms".into(), ttft);
        let decode = Figure::with_first(&decode, first_decode);
        self.figures.insert("decode_tok_s".into(), decode);
        self.figures
            .insert("decode_chat_tok_s".into(), Figure::of(&chat));
        self.figures
            .insert("decode_chat_draw_us".into(), Figure::of(&draw_us));
        self.figures
            .insert("decode_chat_gpu_draws_pct".into(), Figure::of(&gpu_share));
        Ok(())
    }

    /// A 212-token document prefilled and its state read back (`doc_state_ms`); returns
    /// the last run's state.
    fn doc_state(&mut self) -> Result<Option<StateId>> {
        let (eng, init) = (&mut *self.eng, self.init);
        let vocab = eng.config().vocab_size;
        let doc = tokens(11, 212, vocab);
        let mut state_host = vec![0f32; eng.state_len()];
        let mut doc_ms = Vec::new();
        let mut doc_state = None;
        for r in 0..=self.repeat {
            let t = Instant::now();
            let st = fresh(eng, init)?;
            eng.forward(
                &[SeqInput {
                    state: st,
                    tokens: &doc,
                    rows: Rows::None,
                }],
                Want {
                    logits: false,
                    embeddings: false,
                },
                None,
            )?;
            eng.read_state(st, &mut state_host)?;
            if r > 0 {
                doc_ms.push(ms(t));
            }
            if let Some(old) = doc_state.replace(st) {
                eng.free_state(old)?;
            }
        }
        self.figures
            .insert("doc_state_ms".into(), Figure::of(&doc_ms));
        Ok(doc_state)
    }

    /// `n` fields of ≈16 tokens embedded after the document state, batched (`fields_ms`).
    fn fields(&mut self, doc_state: Option<StateId>, n: usize) -> Result<()> {
        let eng = &mut *self.eng;
        let vocab = eng.config().vocab_size;
        let mut field_ms = Vec::new();
        if let Some(doc_state) = doc_state {
            let field_tokens: Vec<Vec<u32>> = (0..n)
                .map(|i| tokens(100 + i as u64, 12 + i % 8, vocab))
                .collect();
            for r in 0..=self.repeat {
                let t = Instant::now();
                let mut states = Vec::new();
                for _ in &field_tokens {
                    states.push(eng.fork_state(doc_state)?);
                }
                let inputs: Vec<SeqInput> = field_tokens
                    .iter()
                    .zip(&states)
                    .map(|(f, &s)| SeqInput {
                        state: s,
                        tokens: f,
                        rows: Rows::Last,
                    })
                    .collect();
                eng.forward(
                    &inputs,
                    Want {
                        logits: false,
                        embeddings: true,
                    },
                    None,
                )?;
                if r > 0 {
                    field_ms.push(ms(t));
                }
                for s in states {
                    eng.free_state(s)?;
                }
            }
        }
        self.figures
            .insert("fields_ms".into(), Figure::of(&field_ms));
        Ok(())
    }

    /// Tokenizing a ≈212-token English document (`tokenize_us`).
    fn tokenize(&mut self) {
        let text =
            "It was a dark and stormy night, and the ship had been driven far from her course. "
                .repeat(12);
        let mut tk = Vec::new();
        for _ in 0..(self.repeat * 20).max(20) {
            let t = Instant::now();
            let ids = self.eng.tokenizer().encode(&text);
            tk.push(t.elapsed().as_secs_f64() * 1e6);
            std::hint::black_box(ids);
        }
        self.figures.insert("tokenize_us".into(), Figure::of(&tk));
    }
}

/// What a run measured, for [`report`].
struct Measured {
    figures: BTreeMap<String, Figure>,
    prefill_tok_s: BTreeMap<String, f64>,
    load_cold_ms: Option<f64>,
    quality: Option<quality::Quality>,
    lora: Vec<String>,
}

/// The report of a run on `eng`: the model's and device's facts with the figures.
fn report(eng: &Engine, opts: &BenchOptions, m: Measured) -> BenchReport {
    let Measured {
        figures,
        prefill_tok_s,
        load_cold_ms,
        quality: q,
        lora: lora_names,
    } = m;
    let info = eng.info().clone();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    BenchReport {
        title: opts.title.clone(),
        change: opts.change.clone(),
        date: format_date(now),
        model: ModelFacts {
            path: info.path.clone(),
            n_layer: info.config.n_layer,
            n_embd: info.config.n_embd,
            types: info
                .gpu_types
                .iter()
                .map(|(t, n)| format!("{n}×{t}"))
                .collect(),
            file_bytes: info.file_bytes,
            sha256: None,
        },
        adapter: info.adapter.name.clone(),
        backend: info.adapter.backend.clone(),
        driver: format!("{} {}", info.adapter.driver, info.adapter.driver_info)
            .trim()
            .to_string(),
        features: feature_list(&info.features),
        commit: opts.commit.clone(),
        command: opts.command.clone(),
        load_ms: figures.get("load_ms").map_or(0.0, |f| f.median),
        load_cold_ms,
        load_first_run_ms: None,
        ttft_ms: figures.get("ttft_ms").map_or(0.0, |f| f.median),
        prefill_tok_s,
        decode_tok_s: figures.get("decode_tok_s").map_or(0.0, |f| f.median),
        doc_state_ms: figures.get("doc_state_ms").map_or(0.0, |f| f.median),
        fields_ms: figures.get("fields_ms").map_or(0.0, |f| f.median),
        tokenize_us: figures.get("tokenize_us").map_or(0.0, |f| f.median),
        gpu_mem_mib: info.gpu_total_bytes as f64 / 1048576.0,
        quality: q,
        figures,
        peer: BTreeMap::new(),
        lora: lora_names,
        init_state: opts.init_state.as_ref().map(|p| p.display().to_string()),
    }
}

/// `YYYY-MM-DD` (UTC) from Unix seconds (civil-from-days, H. Hinnant).
pub fn format_date(secs: u64) -> String {
    let z = (secs / 86400) as i64 + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    format!("{:04}-{:02}-{:02}", if m <= 2 { y + 1 } else { y }, m, d)
}

/// The optional GPU features in use, as one line (`f16 subgroups(32) coopmat timestamps`).
fn feature_list(f: &rwkv_engine::gpu::GpuFeatures) -> String {
    let mut out = Vec::new();
    if f.shader_f16 {
        out.push("f16".to_string());
    }
    if f.subgroup {
        out.push(format!("subgroups(≥{})", f.subgroup_min_size));
    }
    if f.coopmat {
        out.push("coopmat".to_string());
    }
    if f.timestamp {
        out.push("timestamps".to_string());
    }
    out.join(" ")
}
