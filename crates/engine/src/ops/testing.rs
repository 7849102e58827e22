//! Test harness for single ops: a real device (lavapipe in CI), one act buffer, one pass.

use std::sync::{Arc, OnceLock};

use crate::gpu::pipeline::PipelineCache;
use crate::gpu::{buffer, AdapterChoice, GpuContext};
use crate::ops::{Ctx, Dims, Node};

/// The shared test device. Fails loudly (with install instructions) when there is none.
pub fn gpu() -> Arc<GpuContext> {
    static CTX: OnceLock<Arc<GpuContext>> = OnceLock::new();
    CTX.get_or_init(|| match GpuContext::new(&AdapterChoice::Auto) {
        Ok(mut c) => {
            // The op tests cover the subgroup kernels wherever the device has subgroups,
            // also where models run without them by default (llvmpipe: see
            // `gpu::context::subgroups_wanted`); each test that has a plain variant
            // turns them off for it. `RWKV_NO_SUBGROUPS=1` or `RWKV_SUBGROUPS=0` still
            // keep them off.
            if c.device.features().contains(wgpu::Features::SUBGROUP)
                && c.tuning.subgroups != Some(false)
            {
                c.features.subgroup = true;
            }
            // Likewise the lanes a row that the matrix × vector kernels take by the
            // product's shape (`ops::matmul::mv_lanes`), also on llvmpipe, where models
            // take 4 (`gpu::context::LLVMPIPE_MV_LANES`: the model tests cover those);
            // `RWKV_MV_LANES` still decides where set.
            c.tuning.mv_lanes = crate::gpu::Tuning::from_env().mv_lanes;
            Arc::new(c)
        }
        Err(e) => panic!(
            "GPU tests need an adapter: {e}. Install Mesa's lavapipe (`apt-get install \
             mesa-vulkan-drivers`) and run with WGPU_BACKEND=vulkan"
        ),
    })
    .clone()
}

pub struct Harness {
    pub gpu: Arc<GpuContext>,
    pub pipelines: PipelineCache,
    pub dims_buf: wgpu::Buffer,
    pub dims: Dims,
}

impl Harness {
    pub fn new(dims: Dims) -> Self {
        Self::with_gpu(dims, gpu())
    }

    /// A harness on a given context (e.g. the test device with a feature turned off).
    pub fn with_gpu(dims: Dims, gpu: Arc<GpuContext>) -> Self {
        let dims_buf = buffer::uniform(&gpu, "dims", &dims);
        Harness {
            gpu,
            pipelines: PipelineCache::default(),
            dims_buf,
            dims,
        }
    }

    pub fn ctx(&self) -> Ctx<'_> {
        Ctx {
            gpu: &self.gpu,
            pipelines: &self.pipelines,
            dims: &self.dims_buf,
            lora: None,
        }
    }

    pub fn f32_buf(&self, data: &[f32]) -> wgpu::Buffer {
        buffer::storage_init(&self.gpu, "test", bytemuck::cast_slice(data)).unwrap()
    }

    pub fn u32_buf(&self, data: &[u32]) -> wgpu::Buffer {
        buffer::storage_init(&self.gpu, "test", bytemuck::cast_slice(data)).unwrap()
    }

    pub fn run(&self, nodes: &[Node]) {
        let mut enc = self.gpu.device.create_command_encoder(&Default::default());
        {
            let mut pass = enc.begin_compute_pass(&Default::default());
            crate::ops::encode(&mut pass, nodes, &self.dims);
        }
        self.gpu.queue.submit([enc.finish()]);
        self.gpu.wait().unwrap();
    }

    pub fn read(&self, buf: &wgpu::Buffer, off: usize, n: usize) -> Vec<f32> {
        buffer::read_f32(&self.gpu, buf, off, n).unwrap()
    }
}

/// Seeded uniform values in [-scale, scale).
pub fn rand_vec(seed: u64, n: usize, scale: f32) -> Vec<f32> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..n).map(|_| rng.gen_range(-scale..scale)).collect()
}

/// Largest absolute difference.
pub fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// Path of a file in `../shared/fixtures`.
pub fn fixture(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/fixtures")
        .join(name)
}

/// The f32 values of a `.npy` fixture ([`crate::npy::read_f32`]; its shape is not needed
/// by the op tests).
pub fn npy_f32(path: &std::path::Path) -> Vec<f32> {
    match crate::npy::read_f32(path) {
        Ok((_, v)) => v,
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

/// x as the 8-bit kernels quantize it (`shaders/matvec/q4_k_q8_x.wgsl`): per run of 32,
/// the scale d = max|x| / 127 and the values q = round(x / max|x| · 127), ties to even as
/// WGSL's `pack4x8snorm`.
pub fn q8_form(x: &[f32]) -> Vec<(f32, Vec<i8>)> {
    x.chunks(32)
        .map(|c| {
            let amax = c.iter().fold(0f32, |m, v| m.max(v.abs()));
            let inv = if amax > 0.0 { 1.0 / amax } else { 0.0 };
            let q = c
                .iter()
                .map(|v| ((v * inv).clamp(-1.0, 1.0) * 127.0).round_ties_even() as i8)
                .collect();
            (amax / 127.0, q)
        })
        .collect()
}

/// x as the 8-bit kernels see it: each value d · q of [`q8_form`].
pub fn q8_rounded(x: &[f32]) -> Vec<f32> {
    q8_form(x)
        .into_iter()
        .flat_map(|(d, q)| q.into_iter().map(move |v| d * f32::from(v)))
        .collect()
}
