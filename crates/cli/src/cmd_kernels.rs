//! `rwkv kernels`: the kernel microbenchmark (each matrix kernel's distance to its limit).

use std::path::PathBuf;

use clap::Args;
use rwkv_engine::gpu::{AdapterChoice, GpuContext};
use rwkv_engine::kernel_bench::{self, KernelBenchOptions, KernelFigure};

#[derive(Args, Debug)]
pub struct KernelsArgs {
    /// GPU adapter: index or name substring (see `rwkv adapters`). Default: discrete first.
    #[arg(long)]
    pub adapter: Option<String>,
    /// Tokens of the prefill figures.
    #[arg(long, default_value_t = 512)]
    pub tokens: usize,
    /// Dispatches per timed pass.
    #[arg(long, default_value_t = 20)]
    pub chain: usize,
    /// Timed passes (median reported).
    #[arg(long, default_value_t = 5)]
    pub repeats: usize,
    /// Memory bandwidth the decode figures are compared with, GB/s (an H100's
    /// device-to-device copy measures ≈ 3,000).
    #[arg(long, default_value_t = 3000.0)]
    pub peak_gb_s: f64,
    /// Matrix rate the prefill figures are compared with, TFLOP/s (what WGSL
    /// cooperative-matrix kernels reached on an H100 in ../shared/anchor/wgpu-coopmat-probe).
    #[arg(long, default_value_t = 120.0)]
    pub peak_tflop_s: f64,
    /// Also time the decode kernel with these lanes per row (tuning), e.g. `8,16,32`.
    #[arg(long, value_delimiter = ',')]
    pub mv_lanes: Vec<u32>,
    /// Only these weight encodings (e.g. `Q4_K,F16`; default: F16, Q8_0, Q4_K, Q6_K).
    #[arg(long, value_delimiter = ',')]
    pub dtypes: Vec<String>,
    /// MiB of copies of a decode figure's matrix that its dispatches cycle through, so
    /// that none finds its weights in the GPU's L2 cache, as in a forward pass (0: one
    /// matrix for every dispatch; `matvec/hot` is that figure at T = 1 either way).
    #[arg(long, default_value_t = 512)]
    pub cold_mib: usize,
    /// Milliseconds of untimed passes before each figure's timed ones (the GPU's clock
    /// rises only under sustained work, and falls while the bench uploads matrices).
    #[arg(long, default_value_t = 300)]
    pub warm_ms: u64,
    /// Write the figures as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

pub fn run(a: KernelsArgs) -> anyhow::Result<()> {
    let choice = match &a.adapter {
        None => AdapterChoice::Auto,
        Some(s) => match s.parse::<usize>() {
            Ok(i) => AdapterChoice::Index(i),
            Err(_) => AdapterChoice::Name(s.clone()),
        },
    };
    let gpu = GpuContext::new(&choice)?;
    println!(
        "{} ({}), features: coopmat {} subgroups {}",
        gpu.summary.name, gpu.summary.backend, gpu.features.coopmat, gpu.features.subgroup
    );
    println!(
        "{:<12} {:<6} {:<11} {:>5} {:>10} {:>9} {:>7} {:>9} {:>7}",
        "kernel", "dtype", "shape", "T", "µs", "GB/s", "% BW", "TFLOP/s", "% MMA"
    );
    let mut opts = KernelBenchOptions {
        prefill_tokens: a.tokens,
        chain: a.chain,
        repeats: a.repeats,
        mv_lanes: a.mv_lanes.clone(),
        cold_bytes: a.cold_mib << 20,
        warm_ms: a.warm_ms,
        ..Default::default()
    };
    if !a.dtypes.is_empty() {
        let known = opts.dtypes.clone();
        opts.dtypes = a
            .dtypes
            .iter()
            .map(|name| {
                known
                    .iter()
                    .copied()
                    .find(|d| d.name().eq_ignore_ascii_case(name))
                    .ok_or_else(|| {
                        let names: Vec<&str> = known.iter().map(|d| d.name()).collect();
                        anyhow::anyhow!("--dtypes: {name} is not one of {}", names.join(", "))
                    })
            })
            .collect::<anyhow::Result<_>>()?;
    }
    let figures = kernel_bench::run(&gpu, &opts, &mut |f: &KernelFigure| {
        let pct = |v: Option<f64>, peak: f64| {
            v.map_or(String::new(), |v| format!("{:.0}", 100.0 * v / peak))
        };
        println!(
            "{:<12} {:<6} {:<11} {:>5} {:>10.1} {:>9} {:>7} {:>9} {:>7}",
            f.kernel,
            f.dtype.as_deref().unwrap_or("-"),
            f.shape,
            f.tokens,
            f.us,
            f.gb_s.map_or(String::new(), |v| format!("{v:.0}")),
            pct(f.gb_s, a.peak_gb_s),
            f.tflop_s.map_or(String::new(), |v| format!("{v:.1}")),
            pct(f.tflop_s, a.peak_tflop_s),
        );
    })?;
    if let Some(p) = &a.json {
        let doc = serde_json::json!({
            "adapter": gpu.summary.name,
            "backend": gpu.summary.backend,
            "coopmat": gpu.features.coopmat,
            "peak_gb_s": a.peak_gb_s,
            "peak_tflop_s": a.peak_tflop_s,
            "figures": figures,
        });
        std::fs::write(p, serde_json::to_string_pretty(&doc)?)?;
    }
    Ok(())
}
