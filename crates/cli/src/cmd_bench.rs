//! `rwkv bench` and `rwkv profile`: numbers anyone can reproduce.

use std::path::PathBuf;

use clap::Args;
use rwkv_bench::{charts, BenchOptions, BenchReport};

use crate::common::ModelArgs;

#[derive(Args, Debug)]
pub struct BenchArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Groups runs in benchmarks.md (same title = one before/after table).
    #[arg(long, default_value = "default")]
    pub title: String,
    /// What changed since the last run of this title.
    #[arg(long, default_value = "")]
    pub change: String,
    /// Prompt lengths for prefill tok/s.
    #[arg(long, value_delimiter = ',', default_value = "212,512")]
    pub prefill: Vec<usize>,
    /// Tokens generated for decode tok/s.
    #[arg(long, default_value_t = 128)]
    pub gen: usize,
    /// Timed runs of each figure after one warm-up run (the warm-up is the first
    /// sample after the load, printed beside the median as `first`).
    #[arg(long, default_value_t = 10)]
    pub repeat: usize,
    /// Full loads timed onto the open device (after one untimed load: page cache and
    /// pipeline caches warm), before one cold load (page cache dropped).
    #[arg(long, default_value_t = 3)]
    pub load_repeat: usize,
    /// Fields (≈16 tokens each) of the field-analysis figure.
    #[arg(long, default_value_t = 6)]
    pub fields: usize,
    /// Skip the quality check (logits vs the CPU reference, greedy hash).
    #[arg(long)]
    pub no_quality: bool,
    /// Quality reference file (computed and written there when absent).
    #[arg(long)]
    pub reference: Option<PathBuf>,
    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Append a row to this markdown file.
    #[arg(long)]
    pub md: Option<PathBuf>,
    /// Keep the run as one JSON file in this folder (benchmarks/runs).
    #[arg(long)]
    pub runs_dir: Option<PathBuf>,
    /// JSON with a peer's figures from the same command (`{"web-rwkv": {...}}`).
    #[arg(long)]
    pub peer: Option<PathBuf>,
    /// Also write the charts (history of this title from runs_dir, prefill curve) here.
    #[arg(long)]
    pub svg_dir: Option<PathBuf>,
    /// Commit to record (default: `git rev-parse --short HEAD`).
    #[arg(long)]
    pub commit: Option<String>,
    /// Also time a first run: `rwkv generate` in a fresh process with empty pipeline
    /// caches (the NVIDIA driver's shader cache and Mesa's pointed at a new empty folder),
    /// recorded as `load_first_run_ms`.
    #[arg(long)]
    pub first_run: bool,
    /// The model file's SHA-256 prefix to record (the same file the peers ran on).
    #[arg(long)]
    pub file_sha256: Option<String>,
}

/// Call → ready of `rwkv generate` in a child process whose shader caches start empty,
/// ms (read from its "ready in N ms" line).
fn first_run_load_ms(model: &crate::common::ModelArgs) -> anyhow::Result<f64> {
    let dir = std::env::temp_dir().join(format!("rwkv-first-run-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut cmd = std::process::Command::new(std::env::current_exe()?);
    cmd.args(["generate", "--prompt", "The", "-n", "1", "--model"])
        .arg(&model.model)
        .env("__GL_SHADER_DISK_CACHE_PATH", &dir)
        .env("MESA_SHADER_CACHE_DIR", &dir)
        .env("RWKV_PIPELINE_CACHE", &dir)
        .env("XDG_CACHE_HOME", &dir);
    if let Some(a) = &model.adapter {
        cmd.args(["--adapter", a]);
    }
    let out = cmd.output()?;
    let _ = std::fs::remove_dir_all(&dir);
    let err = String::from_utf8_lossy(&out.stderr);
    err.lines()
        .find_map(|l| {
            let rest = l.strip_prefix("ready in ")?;
            rest.split_whitespace().next()?.parse::<f64>().ok()
        })
        .ok_or_else(|| {
            anyhow::anyhow!("first-run load: no \"ready in\" line from rwkv generate: {err}")
        })
}

fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

pub fn bench(a: BenchArgs) -> anyhow::Result<()> {
    let opts = BenchOptions {
        title: a.title.clone(),
        change: a.change.clone(),
        prefill: a.prefill.clone(),
        gen: a.gen,
        repeat: a.repeat,
        fields: a.fields,
        load: a.model.load_options(),
        load_repeat: a.load_repeat,
        quality: !a.no_quality,
        reference: a.reference.clone(),
        commit: a.commit.clone().unwrap_or_else(git_commit),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        loras: a
            .model
            .lora
            .iter()
            .map(|l| (l.path.clone(), l.scale))
            .collect(),
        init_state: a.model.init_state.clone(),
    };
    let mut report = rwkv_bench::run(&a.model.model, &opts, &mut |p| {
        eprintln!("[{}/{}] {}", p.done, p.total, p.step)
    })?;
    if let Some(p) = &a.peer {
        let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p)?)?;
        if let Some(obj) = v.as_object() {
            for (k, v) in obj {
                report.peer.insert(k.clone(), v.clone());
            }
        }
    }
    if a.first_run {
        report.load_first_run_ms = Some(first_run_load_ms(&a.model)?);
    }
    report.model.sha256 = a.file_sha256.clone();
    print_report(&report);
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &a.json {
        std::fs::write(p, &json)?;
    }
    if let Some(dir) = &a.runs_dir {
        std::fs::create_dir_all(dir)?;
        let stem = a
            .model
            .model
            .file_stem()
            .map_or("model".into(), |s| s.to_string_lossy().to_string());
        let name = format!(
            "{}-{}-{}-{}.json",
            report.date,
            slug(&report.title),
            stem,
            report.commit
        );
        std::fs::write(dir.join(name), &json)?;
    }
    if let Some(md) = &a.md {
        report.append_markdown(md)?;
    }
    if let Some(dir) = &a.svg_dir {
        std::fs::create_dir_all(dir)?;
        let mut history = load_runs(a.runs_dir.as_deref(), &report.title);
        if history.is_empty() {
            history.push(report.clone());
        }
        std::fs::write(
            dir.join(format!("history-{}.svg", slug(&report.title))),
            charts::history_svg(&history),
        )?;
        std::fs::write(dir.join("prefill.svg"), charts::prefill_svg(&report))?;
    }
    if report.quality.as_ref().is_some_and(|q| !q.pass) {
        anyhow::bail!("quality check FAILED: the engine's outputs moved beyond tolerance");
    }
    Ok(())
}

fn slug(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .collect()
}

/// Runs of `title` kept in `dir`, oldest first.
pub fn load_runs(dir: Option<&std::path::Path>, title: &str) -> Vec<BenchReport> {
    let Some(dir) = dir else { return Vec::new() };
    let mut runs: Vec<(String, BenchReport)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let text = std::fs::read_to_string(e.path()).ok()?;
            let r: BenchReport = serde_json::from_str(&text).ok()?;
            (r.title == title).then(|| (e.file_name().to_string_lossy().to_string(), r))
        })
        .collect();
    runs.sort_by(|a, b| a.0.cmp(&b.0));
    runs.into_iter().map(|r| r.1).collect()
}

fn print_report(r: &BenchReport) {
    println!(
        "model     {} ({} layers × {}, {})",
        r.model.path,
        r.model.n_layer,
        r.model.n_embd,
        r.model.types.join(" ")
    );
    println!("adapter   {} ({}, {})", r.adapter, r.backend, r.driver);
    println!("features  {}", r.features);
    let f = |k: &str| r.figures.get(k).map_or(String::new(), |f| f.spread());
    println!(
        "load      {:.1} ms{} onto the open device (cold page cache: {})",
        r.load_ms,
        f("load_ms"),
        r.load_cold_ms
            .map_or("n/a".into(), |v| format!("{v:.1} ms"))
    );
    if let Some(d) = r.figures.get("device_open_ms") {
        println!("device    {:.1} ms to open (once per process)", d.median);
    }
    if let Some(v) = r.load_first_run_ms {
        println!("load      {v:.1} ms on a first run (fresh process, empty shader caches)");
    }
    println!("TTFT      {:.1} ms{}", r.ttft_ms, f("ttft_ms"));
    for (k, v) in &r.prefill_tok_s {
        println!(
            "prefill   {k:>5} tokens: {v:.0} tok/s{}",
            f(&format!("prefill_{k}_tok_s"))
        );
    }
    println!("decode    {:.1} tok/s{}", r.decode_tok_s, f("decode_tok_s"));
    if let Some(c) = r.figures.get("decode_chat_tok_s") {
        let fig = |k: &str| r.figures.get(k).map_or(0.0, |d| d.median);
        println!(
            "          {:.1} tok/s with the chat sampler, in wall time{} (the host's part of its \
             draws {:.0} µs a token; {:.0} % drawn from the GPU's candidates)",
            c.median,
            f("decode_chat_tok_s"),
            fig("decode_chat_draw_us"),
            fig("decode_chat_gpu_draws_pct")
        );
    }
    if let Some(rec) = r.figures.get("decode_record_us") {
        let fig = |k: &str| r.figures.get(k).map_or(0.0, |d| d.median);
        println!(
            "          a step: CPU recording {:.0} µs (overlapped with the GPU), writing {:.0} \
             µs, submitting {:.0} µs, waiting and reading back {:.0} µs",
            rec.median,
            fig("decode_write_us"),
            fig("decode_submit_us"),
            fig("decode_read_us")
        );
    }
    println!("doc state {:.1} ms{}", r.doc_state_ms, f("doc_state_ms"));
    println!("fields    {:.1} ms{}", r.fields_ms, f("fields_ms"));
    println!("tokenize  {:.1} µs", r.tokenize_us);
    match r.figures.get("gpu_mem_ready_mib") {
        Some(ready) => println!(
            "GPU mem   {:.1} MiB ready, {:.1} MiB after the run (file {:.1} MiB)",
            ready.median,
            r.gpu_mem_mib,
            r.model.file_bytes as f64 / 1048576.0
        ),
        None => println!("GPU mem   {:.1} MiB", r.gpu_mem_mib),
    }
    match &r.quality {
        Some(q) => println!(
            "quality   {} (top-1 {}, max |Δ| {:.2e}, greedy {})",
            if q.pass { "PASS" } else { "FAIL" },
            if q.top1 { "same" } else { "DIFFERENT" },
            q.max_abs,
            q.greedy_hash
        ),
        None => println!("quality   not checked"),
    }
}

#[derive(Args, Debug)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Tokens in the profiled pass (1 = one decode step; 512 = a prefill chunk).
    #[arg(long, default_value_t = 1)]
    pub tokens: usize,
    #[arg(long)]
    pub json: Option<PathBuf>,
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Rows of the per-dispatch table (0 = none).
    #[arg(long, default_value_t = 0)]
    pub top_dispatches: usize,
    /// Profile the first pass after the load (no warm-up pass before it): what a user's
    /// first prompt pays, beside the steady pass of a second run.
    #[arg(long)]
    pub first: bool,
    /// Instead of the GPU profile: what each op's dispatches cost a decode token in wall
    /// time — greedy decode with that op left out of every step against the whole step
    /// (launch, barrier and drain included; the tokens picked meanwhile are not the
    /// model's). `--json` writes the table.
    #[arg(long)]
    pub wall: bool,
    /// Tokens of each `--wall` run.
    #[arg(long, default_value_t = 64)]
    pub gen: usize,
    /// `--wall` runs of each op (their median; one untimed run before).
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
}

pub fn profile(a: ProfileArgs) -> anyhow::Result<()> {
    let mut m = a.model.clone();
    m.chunk = m.chunk.max(a.tokens);
    let mut eng = m.load(false)?;
    let vocab = eng.config().vocab_size;
    if a.wall {
        let prompt = rwkv_bench::run::tokens(3, 16, vocab);
        let w = eng.decode_wall_costs(&prompt, a.gen, a.repeat)?;
        print_wall_costs(&w);
        if let Some(j) = &a.json {
            std::fs::write(j, serde_json::to_string_pretty(&w)?)?;
        }
        return Ok(());
    }
    let toks = rwkv_bench::run::tokens(3, a.tokens, vocab);
    // Warm-up pass (pipelines, caches), then the profiled one.
    if !a.first {
        let st = eng.new_state()?;
        eng.profile(st, &toks)?;
    }
    let st2 = eng.new_state()?;
    let p = eng.profile(st2, &toks)?;
    print_profile(&p);
    if a.top_dispatches > 0 {
        let mut d = p.dispatches.clone();
        d.sort_by(|x, y| y.ns.total_cmp(&x.ns));
        println!();
        for x in d.iter().take(a.top_dispatches) {
            println!("{:<28} {:>10.1} µs", x.label, x.ns / 1e3);
        }
    }
    if let Some(j) = &a.json {
        std::fs::write(j, serde_json::to_string_pretty(&p)?)?;
    }
    if let Some(s) = &a.svg {
        std::fs::write(s, charts::profile_svg(&p))?;
    }
    Ok(())
}

/// The table of `rwkv profile --wall`.
fn print_wall_costs(w: &rwkv_engine::wall_costs::WallCosts) {
    println!(
        "decode token: {:.1} µs wall ({} tokens × {} runs; {})",
        w.token_us, w.gen, w.repeats, w.method
    );
    println!(
        "host's part: {:.1} µs a token with every dispatch left out (readback, draw, submission)",
        w.host_us
    );
    println!(
        "{:<20} {:>6} {:>12} {:>12} {:>7}",
        "op", "count", "µs a token", "µs each", "%"
    );
    for o in &w.ops {
        println!(
            "{:<20} {:>6} {:>12.1} {:>12.2} {:>6.1}%",
            o.op, o.dispatches, o.us_per_token, o.us_per_dispatch, o.percent
        );
    }
}

/// The header, per-op and per-layer tables of a GPU profile (`rwkv profile`, `rwkv batch
/// --profile`).
pub fn print_profile(p: &rwkv_engine::profile::ProfileReport) {
    println!(
        "GPU profile: {} token(s), {} dispatches, {:.1} µs GPU ({})",
        p.tokens,
        p.dispatches.len(),
        p.gpu_ns / 1e3,
        p.method
    );
    println!(
        "CPU: encode {:.2} ms, submit {:.2} ms, wait {:.2} ms",
        p.encode_ms, p.submit_ms, p.wait_ms
    );
    println!("{:<20} {:>10} {:>7} {:>6}", "op", "µs", "%", "count");
    for t in &p.by_op {
        println!(
            "{:<20} {:>10.1} {:>6.1}% {:>6}",
            t.name,
            t.ns / 1e3,
            t.percent,
            t.dispatches
        );
    }
    if p.by_layer.is_empty() {
        return;
    }
    println!();
    println!("{:<20} {:>10} {:>7}", "layer", "µs", "%");
    for t in &p.by_layer {
        println!("{:<20} {:>10.1} {:>6.1}%", t.name, t.ns / 1e3, t.percent);
    }
}
