//! `rwkv kernels`' figures on tiny runs (lavapipe in CI): every figure named, timed, and
//! the cold copies counted.

use super::*;

/// Every figure of a tiny run comes out, the tuning variants (lanes given, WKV
/// threads × rows) under their own names, each with a time.
#[test]
fn a_tiny_run_gives_every_figure() {
    let gpu = crate::ops::testing::gpu();
    if !gpu.features.timestamp {
        // No timestamps on this adapter: the bench says so instead of timing.
        assert!(run(&gpu, &KernelBenchOptions::default(), &mut |_| {}).is_err());
        return;
    }
    let opts = KernelBenchOptions {
        dtypes: vec![DType::F16],
        shapes: vec![(64, 256)],
        prefill_tokens: 16,
        chain: 2,
        repeats: 1,
        mv_lanes: vec![8],
        cold_bytes: 1 << 20,
        warm_ms: 0,
    };
    let figs = run(&gpu, &opts, &mut |_| {}).unwrap();
    let names: Vec<&str> = figs.iter().map(|f| f.kernel.as_str()).collect();
    for want in [
        "floor",
        "matvec/hot",
        "matvec/L8",
        "wkv",
        "wkv/T1R8",
        "wkv/T4R64",
    ] {
        assert!(names.contains(&want), "{want} missing from {names:?}");
    }
    // floor, the product at T = 1, 8 and 16, hot, lanes 8; per heads: wkv + 6 variants.
    assert_eq!(figs.len(), 6 + 2 * 7, "{names:?}");
    assert!(
        figs.iter().any(|f| f.kernel == "matvec" && f.tokens == 8),
        "{names:?}"
    );
    assert!(figs.iter().all(|f| f.us.is_finite() && f.us >= 0.0));
}

/// Q4_K also gets the value's kernel with its x handed over as 8-bit x (`matvec/x8`),
/// one token, with its bandwidth.
#[test]
fn q4k_gets_the_handed_over_x_figure() {
    let gpu = crate::ops::testing::gpu();
    if !gpu.features.timestamp {
        return; // the bench refuses (a_tiny_run_gives_every_figure checks it)
    }
    let opts = KernelBenchOptions {
        dtypes: vec![DType::Q4_K],
        shapes: vec![(64, 512)],
        prefill_tokens: 16,
        chain: 2,
        repeats: 1,
        mv_lanes: vec![],
        cold_bytes: 1 << 20,
        warm_ms: 0,
    };
    let figs = run(&gpu, &opts, &mut |_| {}).unwrap();
    let x8: Vec<&KernelFigure> = figs.iter().filter(|f| f.kernel == "matvec/x8").collect();
    assert_eq!(x8.len(), 1, "{figs:?}");
    assert_eq!((x8[0].tokens, x8[0].shape.as_str()), (1, "64x512"));
    assert!(x8[0].gb_s.is_some_and(|g| g.is_finite() && g > 0.0));
}

/// The decode figures' copies fill the cold budget, within 1–64.
#[test]
fn cold_copies_outgrow_the_budget() {
    assert_eq!(cold_copies(13 << 20, 512 << 20), 40); // F16 2560 × 2560
    assert_eq!(cold_copies(3_686_400, 512 << 20), 64); // Q4_K 2560 × 2560: capped
    assert_eq!(cold_copies(335 << 20, 512 << 20), 2); // F16 head
    assert_eq!(cold_copies(600 << 20, 512 << 20), 1);
    assert_eq!(cold_copies(1 << 20, 0), 1);
}
