//! Compute pipelines compiled in parallel, off the graph builder's thread.
//!
//! A pipeline's bind group layout is read from its WGSL source (the `@binding(n) var<…>`
//! declarations, which every engine shader keeps in use), so the graph builder can create
//! bind groups at once while the driver compiles the shaders on up to
//! `RWKV_COMPILE_THREADS` ([`Tuning::compile_threads`]; default: the CPU count, at most
//! 16) worker threads. Compiling dominates a first run (NVIDIA's shader cache empty:
//! ≈ 2.9 s for a 2.9B model's variants on one thread); the graph waits for every compile it needs ([`PipelineCache::finish`])
//! before the model counts as ready. Variants only some passes use (the matrix × vector
//! kernels for 2–8 tokens, beside the one-token ones a chat's decode takes) are *late*
//! ([`PipelineCache::get_late`]): compiled after the others, not waited for at load; a
//! pass that needs one first waits for its compile. The cache is keyed by the kernels'
//! specs ([`KernelSpec`]), which hold everything that makes their source; it lives in
//! memory, one per model graph (shader binaries are cached on disk by the driver).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use super::{AnySpec, KernelSpec, SpecKey};
use crate::error::{EngineError, Result};
use crate::gpu::{GpuContext, Tuning};

/// A compute pipeline whose compilation may still be under way.
pub struct Pipeline {
    layout: wgpu::BindGroupLayout,
    label: String,
    /// Waited for by [`PipelineCache::finish`] (every pipeline asked by `get`).
    required: std::sync::atomic::AtomicBool,
    state: Mutex<Option<std::result::Result<wgpu::ComputePipeline, String>>>,
    done: Condvar,
}

impl Pipeline {
    /// The bind group layout (group 0), available before the compile ends.
    pub fn bind_group_layout(&self) -> &wgpu::BindGroupLayout {
        &self.layout
    }

    /// Whether the load did not wait for it ([`PipelineCache::get_late`]): a pass checks
    /// its compile before taking it.
    pub fn late(&self) -> bool {
        !self.required.load(Ordering::SeqCst)
    }

    /// Waits for the compile; the pipeline, or the compiler's message.
    pub fn wait(&self) -> std::result::Result<wgpu::ComputePipeline, String> {
        let mut st = match self.state.lock() {
            Ok(s) => s,
            Err(_) => return Err(format!("{}: compile state poisoned", self.label)),
        };
        loop {
            if let Some(r) = st.as_ref() {
                return r.clone();
            }
            st = match self.done.wait(st) {
                Ok(s) => s,
                Err(_) => return Err(format!("{}: compile state poisoned", self.label)),
            };
        }
    }

    fn set(&self, r: std::result::Result<wgpu::ComputePipeline, String>) {
        if let Ok(mut st) = self.state.lock() {
            *st = Some(r);
        }
        self.done.notify_all();
    }
}

struct Job {
    pipeline: Arc<Pipeline>,
    device: wgpu::Device,
    layout: wgpu::PipelineLayout,
    src: String,
    unchecked: bool,
}

/// Pipelines by spec (of any kernel family); compiled once, on worker threads, shared
/// afterwards.
#[derive(Default)]
pub struct PipelineCache {
    map: Mutex<HashMap<SpecKey, Arc<Pipeline>>>,
    /// Compiles to do: `.0` first, then the late ones, `.1`.
    jobs: Arc<Mutex<(VecDeque<Job>, VecDeque<Job>)>>,
    workers: Arc<AtomicUsize>,
}

impl Drop for PipelineCache {
    /// The queued compiles go with the cache: a model unloaded (or replaced) right after
    /// its load does not keep the workers compiling its late variants on every core under
    /// the next model's load and first passes. Their pipelines answer [`Pipeline::wait`]
    /// with an error instead of waiting for a compile that will not come. The compiles
    /// under way (one a worker) end before the drop returns: a worker left inside the
    /// driver while the process exits (a test binary after its last test, the app
    /// closing) can take the process down with it — the likely cause of a SIGSEGV and a
    /// SIGABRT seen on NVIDIA's Vulkan driver after every op test had passed (not
    /// reproduced since: benchmarks.md). Bounded at 60 s all the same.
    fn drop(&mut self) {
        let dropped: Vec<Job> = match self.jobs.lock() {
            Ok(mut q) => {
                let (first, late) = &mut *q;
                first.drain(..).chain(late.drain(..)).collect()
            }
            Err(_) => Vec::new(),
        };
        for job in dropped {
            let what = format!(
                "{}: not compiled (its pipeline cache was dropped)",
                job.pipeline.label
            );
            job.pipeline.set(Err(what));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while self.workers.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }
}

/// Worker threads for compiling: `RWKV_COMPILE_THREADS` ([`Tuning::compile_threads`]),
/// else the CPU count (≤ 16). H100 machine of 16 CPUs, 2.9B Q4_K, first run: pipelines
/// 620–690 ms on 16 threads against 750–795 on 8 (ready in 843–1003 against 995–1039 ms).
fn max_workers(tuning: &Tuning) -> usize {
    tuning.compile_threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .min(16)
    })
}

/// The group-0 bindings a WGSL source declares: (binding, storage access) where access
/// is `None` for a uniform, `Some(read_only)` for a storage buffer.
pub fn declared_bindings(src: &str) -> Vec<(u32, Option<bool>)> {
    let mut out = Vec::new();
    for line in src.lines() {
        let l = line.trim_start();
        let Some(rest) = l.strip_prefix("@group(0) @binding(") else {
            continue;
        };
        let Some((num, rest)) = rest.split_once(')') else {
            continue;
        };
        let Ok(b) = num.trim().parse::<u32>() else {
            continue;
        };
        let rest = rest.trim_start();
        let kind = if rest.starts_with("var<uniform>") {
            None
        } else if rest.starts_with("var<storage, read_write>") {
            Some(false)
        } else if rest.starts_with("var<storage, read>") || rest.starts_with("var<storage>") {
            Some(true)
        } else {
            continue;
        };
        out.push((b, kind));
    }
    out.sort_by_key(|e| e.0);
    out
}

impl PipelineCache {
    /// The pipeline for `spec`: its bind group layout at once, its compile queued on a
    /// worker thread (or already done). Equal specs share one pipeline.
    ///
    /// Errors: [`EngineError::Op`] for a spec without a shader.
    pub fn get<S: KernelSpec>(&self, ctx: &GpuContext, spec: &S) -> Result<Arc<Pipeline>> {
        self.get_as(ctx, spec, false)
    }

    /// [`PipelineCache::get`] for a variant the load need not wait for: compiled after
    /// every other queued one, outside [`PipelineCache::finish`] (unless `get` asks for the
    /// same spec too).
    ///
    /// Errors: as [`PipelineCache::get`].
    pub fn get_late<S: KernelSpec>(&self, ctx: &GpuContext, spec: &S) -> Result<Arc<Pipeline>> {
        self.get_as(ctx, spec, true)
    }

    /// How many pipelines the cache holds (compiled or not).
    pub fn len(&self) -> usize {
        self.map.lock().map_or(0, |m| m.len())
    }

    /// Whether the cache holds no pipeline.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn get_as<S: KernelSpec>(
        &self,
        ctx: &GpuContext,
        spec: &S,
        late: bool,
    ) -> Result<Arc<Pipeline>> {
        let key: &dyn AnySpec = spec;
        if let Ok(map) = self.map.lock() {
            if let Some(p) = map.get(key) {
                if !late {
                    p.required.store(true, Ordering::SeqCst);
                }
                return Ok(p.clone());
            }
        }
        let src = spec.source()?;
        let label = spec.label();
        let entries: Vec<wgpu::BindGroupLayoutEntry> = declared_bindings(&src)
            .into_iter()
            .map(|(binding, access)| wgpu::BindGroupLayoutEntry {
                binding,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: match access {
                        None => wgpu::BufferBindingType::Uniform,
                        Some(read_only) => wgpu::BufferBindingType::Storage { read_only },
                    },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            })
            .collect();
        let layout = ctx
            .device
            .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
                label: Some(&label),
                entries: &entries,
            });
        let pipeline_layout = ctx
            .device
            .create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
                label: Some(&label),
                bind_group_layouts: &[Some(&layout)],
                immediate_size: 0,
            });
        let p = Arc::new(Pipeline {
            layout,
            label,
            required: std::sync::atomic::AtomicBool::new(!late),
            state: Mutex::new(None),
            done: Condvar::new(),
        });
        if let Ok(mut map) = self.map.lock() {
            // Another thread may have queued the same spec meanwhile: keep the first.
            if let Some(existing) = map.get(key) {
                if !late {
                    existing.required.store(true, Ordering::SeqCst);
                }
                return Ok(existing.clone());
            }
            map.insert(SpecKey::new(spec), p.clone());
        }
        let job = Job {
            pipeline: p.clone(),
            device: ctx.device.clone(),
            layout: pipeline_layout,
            src,
            unchecked: super::unchecked_ok(ctx),
        };
        if let Ok(mut q) = self.jobs.lock() {
            if late {
                q.1.push_back(job);
            } else {
                q.0.push_back(job);
            }
        }
        self.spawn_worker(max_workers(&ctx.tuning));
        Ok(p)
    }

    /// Starts a worker if fewer than `max` are running.
    fn spawn_worker(&self, max: usize) {
        let running = self.workers.load(Ordering::SeqCst);
        if running >= max
            || self
                .workers
                .compare_exchange(running, running + 1, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return;
        }
        let jobs = self.jobs.clone();
        let workers = self.workers.clone();
        let spawned = std::thread::Builder::new()
            .name("rwkv-compile".into())
            .spawn(move || loop {
                let job = match jobs.lock() {
                    Ok(mut q) => match q.0.pop_front().or_else(|| q.1.pop_front()) {
                        Some(j) => j,
                        None => {
                            // Decided under the queue lock, so a job queued after this
                            // check finds the count already lowered and spawns a worker.
                            workers.fetch_sub(1, Ordering::SeqCst);
                            return;
                        }
                    },
                    Err(_) => {
                        workers.fetch_sub(1, Ordering::SeqCst);
                        return;
                    }
                };
                let r = compile(&job);
                job.pipeline.set(r);
            });
        if spawned.is_err() {
            // No thread: compile here, in order.
            self.workers.fetch_sub(1, Ordering::SeqCst);
            let job = self
                .jobs
                .lock()
                .ok()
                .and_then(|mut q| q.0.pop_front().or_else(|| q.1.pop_front()));
            if let Some(job) = job {
                let r = compile(&job);
                job.pipeline.set(r);
            }
        }
    }

    /// Waits for every queued compile but the late ones.
    ///
    /// Errors: [`EngineError::Op`] with the first shader compiler message.
    pub fn finish(&self) -> Result<()> {
        let all: Vec<Arc<Pipeline>> = match self.map.lock() {
            Ok(m) => m
                .values()
                .filter(|p| p.required.load(Ordering::SeqCst))
                .cloned()
                .collect(),
            Err(_) => return Err(EngineError::gpu("pipeline cache poisoned")),
        };
        for p in all {
            if let Err(what) = p.wait() {
                return Err(EngineError::Op {
                    op: "pipeline",
                    what,
                });
            }
        }
        Ok(())
    }
}

/// Compiles one pipeline inside a validation error scope (error scopes are per thread).
fn compile(job: &Job) -> std::result::Result<wgpu::ComputePipeline, String> {
    let label = job.pipeline.label.as_str();
    let scope = job.device.push_error_scope(wgpu::ErrorFilter::Validation);
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(job.src.as_str().into()),
    };
    let module = if job.unchecked {
        // SAFETY: see `pipeline::unchecked_ok`: on Vulkan the driver's robustBufferAccess
        // keeps every access inside its binding; the engine's shaders index only within
        // the regions their ops check on the host, and every loop is bounded.
        unsafe {
            job.device
                .create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked())
        }
    } else {
        job.device.create_shader_module(desc)
    };
    let pipeline = job
        .device
        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: Some(&job.layout),
            module: &module,
            entry_point: Some("main"),
            compilation_options: wgpu::PipelineCompilationOptions {
                constants: &[],
                zero_initialize_workgroup_memory: false,
            },
            cache: None,
        });
    match pollster::block_on(scope.pop()) {
        Some(err) => Err(format!("shader `{label}` failed to compile: {err}")),
        None => Ok(pipeline),
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::gpu::AdapterChoice;

    /// A trivial kernel whose source differs by its number (one pipeline each).
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    struct Fill(u32);

    impl KernelSpec for Fill {
        fn label(&self) -> String {
            format!("fill[{}]", self.0)
        }
        fn source(&self) -> Result<String> {
            Ok(format!(
                "@group(0) @binding(0) var<storage, read_write> out: array<u32>;\n\
                 @compute @workgroup_size(64)\n\
                 fn main(@builtin(global_invocation_id) id: vec3<u32>) {{\n\
                 if (id.x < arrayLength(&out)) {{ out[id.x] = {}u + id.x; }}\n}}\n",
                self.0
            ))
        }
    }

    fn two_compile_threads() -> GpuContext {
        let tuning = Tuning {
            compile_threads: Some(2),
            ..Tuning::from_env()
        };
        GpuContext::with_tuning(&AdapterChoice::Auto, tuning).expect("a GPU adapter (lavapipe)")
    }

    fn compiled(p: &Pipeline) -> bool {
        p.state.lock().map(|s| s.is_some()).unwrap_or(false)
    }

    #[test]
    fn a_dropped_cache_stops_compiling() {
        let ctx = two_compile_threads();
        let cache = PipelineCache::default();
        let late: Vec<_> = (200..260)
            .map(|i| cache.get_late(&ctx, &Fill(i)).unwrap())
            .collect();
        let workers = cache.workers.clone();
        let t0 = Instant::now();
        drop(cache);
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the drop took a minute"
        );
        // The drop returns once the compiles under way have ended, no worker left.
        assert_eq!(workers.load(Ordering::SeqCst), 0, "workers still running");
        // Every pipeline has its answer: compiled before the drop, or an error (a wait
        // on it returns instead of blocking for good).
        assert!(
            late.iter().all(|p| compiled(p)),
            "a pipeline left without an answer"
        );
        let done = late.iter().filter(|p| p.wait().is_ok()).count();
        let dropped = late
            .iter()
            .filter(|p| p.wait().is_err_and(|e| e.contains("cache was dropped")))
            .count();
        assert_eq!(done + dropped, late.len());
        assert!(dropped > 0, "all {done} queued compiles ran after the drop");
    }
}
