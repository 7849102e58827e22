//! RWKV-7 weights on the GPU, in their file encoding.
//!
//! One copy of the weights: bytes go from the file mapping into GPU memory with no
//! intermediate `Vec`; Q4_K stays Q4_K, Q8_0 stays Q8_0, F16 stays F16. Encodings the
//! kernels do not read (Q4_0, Q5_0, Q2_K, …) are decoded to F16 at load, and BlinkDL's
//! `[in, out]` low-rank matrices (tiny) are transposed to `[out, in]` f32. Per-layer
//! vectors are packed into one f32 buffer per layer ([`LayerVecs`] offsets).
//!
//! # Loading as a stream
//!
//! 1. **Plan** (this thread, milliseconds): walk the tensors in model order, check the
//!    memory budget and the binding limit, create every destination buffer (device memory,
//!    not mapped) and list what fills it: bytes of the file, rows of the file decoded to
//!    F16, or bytes built on the CPU (packed vectors, transposed LoRA matrices).
//! 2. **Fill** (`threads` workers; this thread coordinates): tensors are cut into pieces
//!    of at most [`UploadOptions::piece_bytes`], pieces packed into waves, one wave per
//!    reusable staging buffer (`MAP_WRITE | COPY_SRC`, [`UploadOptions::wave_bytes`]).
//!    Workers copy or decode their piece from the file mapping into the mapped staging
//!    buffer and drop the piece's file pages from the resident set (`release`). When a
//!    wave is full the coordinator unmaps it, records one `copy_buffer_to_buffer` per
//!    piece, submits, and asks for the buffer to be mapped again once the GPU has copied
//!    it. At most `in_flight_bytes / wave_bytes` staging buffers exist; the coordinator
//!    blocks on the GPU only when all of them are in flight, so the CPU fills wave N+1
//!    while the GPU copies wave N.
//!
//! Why reusable staging buffers, not a buffer `mapped_at_creation` per tensor (the
//! earlier scheme) or `Queue::write_buffer_with`: both of those allocate fresh
//! host-visible staging memory for every tensor (wgpu-core makes a staging buffer per
//! call), which the driver must allocate, pin and the kernel zero page by page on first
//! touch, and which is freed only after a blocking wait. For a 2 GB model that is 2 GB
//! of page faults and allocations on top of the copy. A ring of a few staging buffers is
//! faulted in once and reused, so each byte costs one memcpy (or decode) on the host,
//! spread over threads, plus the GPU's copy. Destination buffers are written whole (their
//! padding included) by the copies, so wgpu never needs to zero them first. A mapped range
//! ([`wgpu::BufferViewMut`]) holds its own handle to the buffer and is `Send`, so each
//! worker fills its own disjoint range of a staging buffer; no `unsafe`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use crate::error::{EngineError, Result};
use crate::format::DType;
use crate::gpu::pipeline::gpu_native;
use crate::gpu::{buffer, GpuContext};
use crate::model::config::Rwkv7Config;
use crate::model::weights::{Matrix, MatrixLayout, Rwkv7Weights, Vector};
use crate::ops::GpuMatrix;

/// Offsets (in units of C) of the vectors packed into a layer's `vecs` buffer.
pub struct LayerVecs;

impl LayerVecs {
    /// The six time-mix lerps r, w, k, v, a, g.
    pub const MIX: usize = 0;
    pub const W0: usize = 6;
    pub const A0: usize = 7;
    pub const V0: usize = 8;
    pub const K_K: usize = 9;
    pub const K_A: usize = 10;
    pub const R_K: usize = 11;
    /// ln1 weight, bias.
    pub const LN1: usize = 12;
    pub const LN2: usize = 14;
    pub const LN_X: usize = 16;
    pub const FFN_X_K: usize = 18;
    pub const LEN: usize = 19;
}

/// Offsets (units of C) in the global vectors buffer: ln0 weight/bias, ln_out weight/bias.
pub struct GlobalVecs;

impl GlobalVecs {
    pub const LN0: usize = 0;
    pub const LN_OUT: usize = 2;
    pub const LEN: usize = 4;
}

/// One block's matrices and vectors.
pub struct GpuLayer {
    pub vecs: wgpu::Buffer,
    pub receptance: GpuMatrix,
    pub key: GpuMatrix,
    pub value: GpuMatrix,
    pub output: GpuMatrix,
    pub w1: GpuMatrix,
    pub w2: GpuMatrix,
    pub a1: GpuMatrix,
    pub a2: GpuMatrix,
    pub v1: Option<GpuMatrix>,
    pub v2: Option<GpuMatrix>,
    pub g1: GpuMatrix,
    pub g2: GpuMatrix,
    pub ffn_key: GpuMatrix,
    pub ffn_value: GpuMatrix,
}

/// The whole model on the GPU.
pub struct GpuWeights {
    pub config: Rwkv7Config,
    /// Embedding rows in chunks that each fit one binding.
    pub emb: Vec<GpuMatrix>,
    pub head: Vec<GpuMatrix>,
    pub globals: wgpu::Buffer,
    pub layers: Vec<GpuLayer>,
    /// Bytes of GPU memory held by the weights.
    pub bytes: u64,
    /// Encodings as uploaded, with tensor counts.
    pub types: Vec<(DType, usize)>,
}

/// How the upload is cut up. The defaults suit any GPU; tests force tiny waves to run
/// every path of the pipeline on a small model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadOptions {
    /// Bytes of one staging buffer: a wave of pieces copied to the GPU by one submission.
    pub wave_bytes: u64,
    /// Most staging bytes alive at once (being filled, or waiting for the GPU to copy
    /// them): the host memory the load takes beyond the file's page cache.
    pub in_flight_bytes: u64,
    /// Largest piece of a tensor one worker fills at a time, bytes (load balance).
    pub piece_bytes: u64,
    /// Worker threads filling staging memory; 0: the machine's parallelism, at most 8.
    pub threads: usize,
}

impl Default for UploadOptions {
    fn default() -> Self {
        UploadOptions {
            wave_bytes: 32 << 20,
            in_flight_bytes: 128 << 20,
            piece_bytes: 4 << 20,
            threads: 0,
        }
    }
}

/// Upload progress: tensors and bytes written to staging memory so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UploadProgress {
    pub tensors_done: usize,
    pub tensors_total: usize,
    /// Bytes as laid out on the GPU (decoded tensors count their F16 size).
    pub bytes_done: u64,
    pub bytes_total: u64,
}

/// What fills a destination buffer.
enum Source<'a> {
    /// Bytes of the file mapping, copied as they are (and released after).
    File(&'a [u8]),
    /// Rows of `n_in` values of a non-native encoding in the file, decoded to F16.
    Decode {
        dtype: DType,
        src: &'a [u8],
        n_in: usize,
    },
    /// Bytes built while planning (packed vectors, transposed matrices).
    Owned(Vec<u8>),
}

/// One destination range and what fills it.
struct Job<'a> {
    name: String,
    buffer: wgpu::Buffer,
    /// Where the tensor starts in `buffer` (0, or its place in a group buffer).
    dst_off: u64,
    /// Bytes of the tensor; its range is this padded with zeros to `span` bytes.
    len: u64,
    span: u64,
    source: Source<'a>,
}

/// Bytes `[off, off + len)` of job `job`'s buffer; `len` and `off` are multiples of 4
/// (the copy alignment), and a decoded piece holds whole rows.
#[derive(Debug, Clone, Copy)]
struct Piece {
    job: usize,
    off: u64,
    len: u64,
}

/// Walks the model once: checks limits, creates the destination buffers, lists the jobs.
struct Planner<'a, 'g> {
    gpu: &'g GpuContext,
    /// Budget for the weights, bytes.
    limit: u64,
    bytes: u64,
    types: Vec<(DType, usize)>,
    jobs: Vec<Job<'a>>,
}

impl<'a> Planner<'a, '_> {
    fn count(&mut self, dtype: DType, bytes: usize) {
        self.bytes += bytes as u64;
        match self.types.iter_mut().find(|(d, _)| *d == dtype) {
            Some((_, n)) => *n += 1,
            None => self.types.push((dtype, 1)),
        }
    }

    fn check_binding(&self, name: &str, bytes: usize) -> Result<()> {
        if self.bytes + bytes as u64 > self.limit {
            return Err(EngineError::TooLarge {
                what: format!(
                    "the weights need more than {} bytes of GPU memory at tensor `{name}` ({bytes} bytes); \
                     the limit is {}",
                    self.bytes + bytes as u64,
                    self.limit
                ),
            });
        }
        if bytes as u64 > self.gpu.max_binding() {
            return Err(EngineError::TooLarge {
                what: format!(
                    "tensor `{name}` needs {bytes} bytes in one binding; the device allows {}",
                    self.gpu.max_binding()
                ),
            });
        }
        Ok(())
    }

    /// A destination buffer of `len` bytes (padded to 16) to be filled from `source`.
    fn buffer(&mut self, name: &str, len: usize, source: Source<'a>) -> wgpu::Buffer {
        let buffer = buffer::storage(self.gpu, name, len as u64);
        self.jobs.push(Job {
            name: name.to_string(),
            buffer: buffer.clone(),
            dst_off: 0,
            len: len as u64,
            span: buffer.size(),
            source,
        });
        buffer
    }

    /// Several matrices in one buffer, each at a multiple of the storage offset
    /// alignment, so that one dispatch can read them all (the decode kernel of the
    /// low-rank products, `matvec_group`); each is still bound on its own elsewhere.
    /// Matrices whose encoding on the GPU differs from the one most of them have (other
    /// than F16 beside F32) get their own buffers.
    fn group(&mut self, ms: &[&Matrix<'a>]) -> Result<Vec<GpuMatrix>> {
        let mut planned = Vec::with_capacity(ms.len());
        for m in ms {
            planned.push(self.matrix_source(m, 0, m.n_out)?);
        }
        let align = u64::from(self.gpu.limits.min_storage_buffer_offset_alignment).max(256);
        // The encoding most of them share (decay LoRA is often F32 beside F16 others);
        // F16 and F32 may share a buffer (the group kernel reads both).
        let dtype0 = planned
            .iter()
            .map(|p| p.1)
            .max_by_key(|d| planned.iter().filter(|p| p.1 == *d).count());
        let floats = |d: DType| matches!(d, DType::F16 | DType::F32);
        let joins = |d: DType| Some(d) == dtype0 || (floats(d) && dtype0.is_some_and(floats));
        let mut total = 0u64;
        for (_, dtype, len, _) in &planned {
            if joins(*dtype) {
                total = total.next_multiple_of(align) + (*len as u64).next_multiple_of(16);
            }
        }
        let label = ms
            .iter()
            .map(|m| m.name.to_string())
            .collect::<Vec<_>>()
            .join("+");
        let shared = buffer::storage(self.gpu, &label, total);
        let mut at = 0u64;
        let mut out = Vec::with_capacity(ms.len());
        for ((name, dtype, len, source), m) in planned.into_iter().zip(ms) {
            if !joins(dtype) {
                out.push(self.put(&name, dtype, source, 0, m.n_out, m.n_in)?);
                continue;
            }
            self.check_binding(&name, len)?;
            self.count(dtype, len);
            at = at.next_multiple_of(align);
            let span = (len as u64).next_multiple_of(16);
            self.jobs.push(Job {
                name: name.clone(),
                buffer: shared.clone(),
                dst_off: at,
                len: len as u64,
                span,
                source,
            });
            out.push(GpuMatrix {
                name,
                buffer: shared.clone(),
                offset: at,
                dtype,
                row0: 0,
                n_out: m.n_out,
                n_in: m.n_in,
                row_bytes: len / m.n_out.max(1),
            });
            at += span;
        }
        Ok(out)
    }

    /// Rows `[row0, row0 + n)` of `m` as one GPU matrix.
    fn rows(&mut self, m: &Matrix<'a>, row0: usize, n: usize) -> Result<GpuMatrix> {
        let (name, dtype, _, source) = self.matrix_source(m, row0, n)?;
        self.put(&name, dtype, source, row0, n, m.n_in)
    }

    /// Name, encoding on the GPU, byte length and source of rows `[row0, row0 + n)`.
    fn matrix_source(
        &self,
        m: &Matrix<'a>,
        row0: usize,
        n: usize,
    ) -> Result<(String, DType, usize, Source<'a>)> {
        let name = format!("{}[{row0}..{}]", m.name, row0 + n);
        if m.layout == MatrixLayout::InOut {
            if row0 != 0 || n != m.n_out {
                return Err(EngineError::Op {
                    op: "upload",
                    what: format!("`{}`: [in, out] matrices are not split", m.name),
                });
            }
            let t = m.to_f32_out_in()?;
            let bytes: Vec<u8> = bytemuck::cast_slice(&t).to_vec();
            let len = bytes.len();
            return Ok((name, DType::F32, len, Source::Owned(bytes)));
        }
        let row_bytes = m.dtype.bytes_for(m.n_in).ok_or_else(|| EngineError::Op {
            op: "upload",
            what: format!(
                "`{}`: rows of {} are not whole {} blocks",
                m.name, m.n_in, m.dtype
            ),
        })?;
        let src = m
            .bytes
            .get(row0 * row_bytes..(row0 + n) * row_bytes)
            .ok_or_else(|| EngineError::Op {
                op: "upload",
                what: format!("`{}`: rows past the tensor's end", m.name),
            })?;
        if gpu_native(m.dtype) {
            Ok((name, m.dtype, src.len(), Source::File(src)))
        } else {
            let source = Source::Decode {
                dtype: m.dtype,
                src,
                n_in: m.n_in,
            };
            // F16 out: 2 bytes a value.
            Ok((name, DType::F16, n * m.n_in * 2, source))
        }
    }

    fn put(
        &mut self,
        name: &str,
        dtype: DType,
        source: Source<'a>,
        row0: usize,
        n: usize,
        n_in: usize,
    ) -> Result<GpuMatrix> {
        let len = match &source {
            Source::File(b) => b.len(),
            Source::Owned(b) => b.len(),
            // F16 out: 2 bytes a value.
            Source::Decode { .. } => n * n_in * 2,
        };
        self.check_binding(name, len)?;
        let buffer = self.buffer(name, len, source);
        self.count(dtype, len);
        Ok(GpuMatrix {
            name: name.to_string(),
            buffer,
            offset: 0,
            dtype,
            row0,
            n_out: n,
            n_in,
            row_bytes: len / n.max(1),
        })
    }

    fn matrix(&mut self, m: &Matrix<'a>) -> Result<GpuMatrix> {
        self.rows(m, 0, m.n_out)
    }

    /// A `[vocab, C]` matrix in row chunks that each fit one binding.
    fn chunked(&mut self, m: &Matrix<'a>) -> Result<Vec<GpuMatrix>> {
        let out_dtype = if gpu_native(m.dtype) {
            m.dtype
        } else {
            DType::F16
        };
        let row_bytes = out_dtype.bytes_for(m.n_in).unwrap_or(m.n_in * 4).max(1);
        let per = ((self.gpu.max_binding() as usize) / row_bytes).clamp(1, m.n_out.max(1));
        let mut out = Vec::new();
        let mut r = 0;
        while r < m.n_out {
            let n = per.min(m.n_out - r);
            out.push(self.rows(m, r, n)?);
            r += n;
        }
        Ok(out)
    }
}

/// Cuts every job into pieces of at most `piece` bytes (a multiple of 16; decoded jobs
/// into whole rows, an even number of them when a row is not a multiple of 4 bytes).
fn pieces(jobs: &[Job], piece: u64) -> Vec<Piece> {
    let mut out = Vec::new();
    for (j, job) in jobs.iter().enumerate() {
        let step = match job.source {
            Source::Decode { n_in, .. } => {
                let row = (n_in as u64 * 2).max(1);
                let mut rows = (piece / row).max(1);
                if row % 4 != 0 && rows % 2 == 1 {
                    rows += 1;
                }
                rows * row
            }
            _ => (piece / 16 * 16).max(16),
        };
        let size = job.span;
        let mut off = 0;
        while off < size {
            let len = step.min(size - off);
            out.push(Piece { job: j, off, len });
            off += len;
        }
    }
    out
}

/// Writes piece `off..off + view.len()` of `job` into `view`: the source's bytes there,
/// zeros past the tensor's end. Releases the file pages it read.
fn fill(
    job: &Job,
    off: u64,
    view: &mut wgpu::BufferViewMut,
    release: &(dyn Fn(&[u8]) + Sync),
) -> Result<()> {
    let off = off as usize;
    let n = view.len();
    let (raw, from_file) = match &job.source {
        Source::File(b) => (Some(*b), true),
        Source::Owned(b) => (Some(b.as_slice()), false),
        Source::Decode { .. } => (None, false),
    };
    let written = match (&job.source, raw) {
        (_, Some(b)) => {
            let end = (off + n).min(b.len());
            let part = b.get(off.min(end)..end).unwrap_or(&[]);
            if !part.is_empty() {
                view.slice(..part.len()).copy_from_slice(part);
            }
            if from_file {
                release(part);
            }
            part.len()
        }
        (Source::Decode { dtype, src, n_in }, None) => {
            let row_out = n_in * 2;
            let rows_total = job.len as usize / row_out.max(1);
            let r0 = off / row_out.max(1);
            let r1 = ((off + n) / row_out.max(1)).min(rows_total);
            let row_src = dtype.bytes_for(*n_in).ok_or_else(|| EngineError::Op {
                op: "upload",
                what: format!(
                    "`{}`: rows of {n_in} are not whole {dtype} blocks",
                    job.name
                ),
            })?;
            let part =
                src.get(r0 * row_src..r1.max(r0) * row_src)
                    .ok_or_else(|| EngineError::Op {
                        op: "upload",
                        what: format!("`{}`: rows {r0}..{r1} past the tensor's end", job.name),
                    })?;
            let mut f = vec![0f32; r1.saturating_sub(r0) * n_in];
            crate::quant::dequantize(*dtype, part, &mut f)?;
            let h: Vec<half::f16> = f.iter().map(|&v| half::f16::from_f32(v)).collect();
            let bytes: &[u8] = bytemuck::cast_slice(&h);
            if !bytes.is_empty() {
                view.slice(..bytes.len()).copy_from_slice(bytes);
            }
            release(part);
            bytes.len()
        }
        (_, None) => 0,
    };
    if written < n {
        // Staging buffers are reused: the padding must be written, not assumed zero.
        view.slice(written..).fill(0);
    }
    Ok(())
}

/// A piece handed to a worker, with its mapped range of a staging buffer.
struct Work {
    wave: usize,
    piece: Piece,
    view: wgpu::BufferViewMut,
}

/// A worker's answer for one piece.
struct Done {
    wave: usize,
    piece: Piece,
    result: Result<()>,
}

/// A staging buffer's wave: the copies to record once every piece is filled.
struct Wave {
    staging: usize,
    /// (piece, offset in the staging buffer)
    copies: Vec<(Piece, u64)>,
    left: usize,
}

/// Time spent in the fill, for the load log.
#[derive(Default)]
struct FillStats {
    threads: usize,
    waves: usize,
    staging_buffers: usize,
    /// Time the coordinator spent blocked on the GPU for a free staging buffer.
    gpu_wait: std::time::Duration,
}

fn worker(
    jobs: &[Job],
    rx: &Mutex<mpsc::Receiver<Work>>,
    tx: mpsc::Sender<Done>,
    cancel: &AtomicBool,
    release: &(dyn Fn(&[u8]) + Sync),
) {
    loop {
        let next = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok(mut work) = next else { return };
        let result = match jobs.get(work.piece.job) {
            _ if cancel.load(Ordering::Relaxed) => Ok(()),
            Some(job) => fill(job, work.piece.off, &mut work.view, release),
            None => Err(EngineError::gpu("upload: piece of an unknown tensor")),
        };
        // The mapped range must be gone before the coordinator unmaps the wave.
        drop(work.view);
        let done = Done {
            wave: work.wave,
            piece: work.piece,
            result,
        };
        if tx.send(done).is_err() {
            return;
        }
    }
}

/// Fills every job's buffer through the staging ring (see the module doc). Returns once
/// the last copy is submitted (not completed).
fn stream(
    gpu: &GpuContext,
    jobs: &[Job],
    opts: &UploadOptions,
    release: &(dyn Fn(&[u8]) + Sync),
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<FillStats> {
    let wave_bytes = opts.wave_bytes.max(16).next_multiple_of(16);
    let ring = (opts.in_flight_bytes / wave_bytes).max(2) as usize;
    let piece_bytes = opts.piece_bytes.clamp(16, wave_bytes);
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(4, |n| n.get().min(8)),
        n => n,
    };
    let pieces = pieces(jobs, piece_bytes);
    // Staging bytes still to hand out: a small model gets a staging buffer its size.
    let mut unstaged: u64 = pieces.iter().map(|p| p.len.next_multiple_of(16)).sum();
    let mut left_per_job = vec![0usize; jobs.len()];
    for p in &pieces {
        left_per_job[p.job] += 1;
    }
    let mut prog = UploadProgress {
        tensors_done: 0,
        tensors_total: jobs.len(),
        bytes_done: 0,
        bytes_total: jobs.iter().map(|j| j.len).sum(),
    };
    let mut stats = FillStats {
        threads,
        ..Default::default()
    };
    let cancel = AtomicBool::new(false);
    // Workers take pieces from one queue (behind a mutex: `Receiver` is not `Sync`).
    let (work_tx, work_rx) = mpsc::channel::<Work>();
    let work_rx = Mutex::new(work_rx);
    let (done_tx, done_rx) = mpsc::channel::<Done>();
    std::thread::scope(|s| {
        for i in 0..threads {
            let (rx, tx, cancel) = (&work_rx, done_tx.clone(), &cancel);
            std::thread::Builder::new()
                .name(format!("rwkv-upload-{i}"))
                .spawn_scoped(s, move || worker(jobs, rx, tx, cancel, release))
                .map_err(|e| EngineError::gpu(format!("upload: cannot start a thread: {e}")))?;
        }
        drop(done_tx);

        let new_staging = |size: u64| {
            gpu.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("upload staging"),
                size,
                usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: true,
            })
        };
        let mut staging: Vec<wgpu::Buffer> = Vec::new();
        // Mapped staging buffers ready for a wave.
        let mut free: Vec<usize> = Vec::new();
        // Submitted staging buffers waiting to be mapped again, oldest first.
        let mut pending: VecDeque<(usize, wgpu::SubmissionIndex)> = VecDeque::new();
        let (mapped_tx, mapped_rx) =
            mpsc::channel::<(usize, std::result::Result<(), wgpu::BufferAsyncError>)>();
        let mut waves: Vec<Option<Wave>> = Vec::new();
        let mut active = 0usize;
        let mut next = pieces.into_iter().peekable();
        let result = (|| -> Result<()> {
            loop {
                if free.is_empty() && !pending.is_empty() {
                    gpu.device
                        .poll(wgpu::PollType::Poll)
                        .map_err(|e| EngineError::gpu(format!("upload: polling the GPU: {e}")))?;
                }
                while let Ok((id, r)) = mapped_rx.try_recv() {
                    r.map_err(|e| {
                        EngineError::gpu(format!("upload: mapping a staging buffer: {e}"))
                    })?;
                    pending.retain(|(i, _)| *i != id);
                    free.push(id);
                }
                // Start waves while there are pieces and staging buffers for them.
                while let Some(first) = next.peek() {
                    let need = first.len.next_multiple_of(16);
                    let id = if let Some(id) = free.pop() {
                        id
                    } else if staging.len() < ring {
                        staging.push(new_staging(wave_bytes.min(unstaged).max(need)));
                        staging.len() - 1
                    } else {
                        break;
                    };
                    if staging[id].size() < need {
                        // One piece larger than a wave (a decoded row, with tiny waves).
                        staging[id] = new_staging(need);
                    }
                    let cap = staging[id].size();
                    let wave = waves.len();
                    let mut w = Wave {
                        staging: id,
                        copies: Vec::new(),
                        left: 0,
                    };
                    let mut at = 0u64;
                    while let Some(p) = next.next_if(|p| at + p.len.next_multiple_of(16) <= cap) {
                        let view = staging[id]
                            .slice(at..at + p.len)
                            .get_mapped_range_mut()
                            .map_err(|e| {
                                EngineError::gpu(format!(
                                    "upload: staging range of `{}`: {e}",
                                    jobs[p.job].name
                                ))
                            })?;
                        work_tx
                            .send(Work {
                                wave,
                                piece: p,
                                view,
                            })
                            .map_err(|_| EngineError::gpu("upload: the worker threads stopped"))?;
                        w.copies.push((p, at));
                        w.left += 1;
                        at += p.len.next_multiple_of(16);
                        unstaged -= p.len.next_multiple_of(16);
                    }
                    waves.push(Some(w));
                    active += 1;
                    stats.waves += 1;
                }
                if active > 0 {
                    let d = done_rx
                        .recv()
                        .map_err(|_| EngineError::gpu("upload: the worker threads stopped"))?;
                    d.result?;
                    prog.bytes_done += d
                        .piece
                        .len
                        .min(jobs[d.piece.job].len.saturating_sub(d.piece.off));
                    left_per_job[d.piece.job] -= 1;
                    if left_per_job[d.piece.job] == 0 {
                        prog.tensors_done += 1;
                        progress(prog);
                    }
                    let Some(w) = waves.get_mut(d.wave).and_then(|w| w.as_mut()) else {
                        return Err(EngineError::gpu("upload: piece of an unknown wave"));
                    };
                    w.left -= 1;
                    if w.left == 0 {
                        let Some(w) = waves[d.wave].take() else {
                            return Err(EngineError::gpu("upload: wave finished twice"));
                        };
                        active -= 1;
                        let buf = &staging[w.staging];
                        buf.unmap();
                        let mut enc =
                            gpu.device
                                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                                    label: Some("upload"),
                                });
                        for (p, at) in &w.copies {
                            let job = &jobs[p.job];
                            enc.copy_buffer_to_buffer(
                                buf,
                                *at,
                                &job.buffer,
                                job.dst_off + p.off,
                                p.len,
                            );
                        }
                        let index = gpu.queue.submit([enc.finish()]);
                        if next.peek().is_some() {
                            let tx = mapped_tx.clone();
                            let id = w.staging;
                            buf.map_async(wgpu::MapMode::Write, .., move |r| {
                                let _ = tx.send((id, r));
                            });
                            pending.push_back((id, index));
                        }
                    }
                } else if next.peek().is_some() {
                    // Every staging buffer is on its way through the GPU: wait for the
                    // oldest (its map callback runs inside the poll).
                    let Some((_, index)) = pending.front().cloned() else {
                        return Err(EngineError::gpu("upload: no staging buffer to wait for"));
                    };
                    let t = Instant::now();
                    gpu.device
                        .poll(wgpu::PollType::Wait {
                            submission_index: Some(index),
                            timeout: None,
                        })
                        .map_err(|e| {
                            EngineError::gpu(format!("upload: waiting for the GPU: {e}"))
                        })?;
                    stats.gpu_wait += t.elapsed();
                } else {
                    return Ok(());
                }
            }
        })();
        if result.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        stats.staging_buffers = staging.len();
        // Dropping `work_tx` (end of scope) stops the workers; the scope joins them.
        drop(work_tx);
        result
    })?;
    Ok(stats)
}

fn put_vec(dst: &mut [f32], c: usize, slot: usize, v: &Vector) -> Result<()> {
    let f = v.to_f32()?;
    let d = dst
        .get_mut(slot * c..slot * c + f.len())
        .ok_or_else(|| EngineError::Op {
            op: "upload",
            what: format!(
                "vector `{}` of {} values does not fit its slot",
                v.name,
                f.len()
            ),
        })?;
    d.copy_from_slice(&f);
    Ok(())
}

/// Destination buffers created but not yet filled: what [`GpuWeights::plan`] leaves for
/// [`PendingUpload::stream`].
pub struct PendingUpload<'a> {
    jobs: Vec<Job<'a>>,
}

impl PendingUpload<'_> {
    /// Fills every buffer of the planned weights (see the module doc). `progress` is
    /// called on this thread each time a tensor is in staging memory. Returns once the
    /// last copy is submitted: later GPU work is ordered after the copies.
    ///
    /// Errors: [`EngineError::Op`] for a tensor whose bytes do not match its shape,
    /// [`EngineError::Gpu`] when mapping, a thread or the device fails.
    pub fn stream(
        self,
        gpu: &GpuContext,
        opts: &UploadOptions,
        release: &(dyn Fn(&[u8]) + Sync),
        progress: &mut dyn FnMut(UploadProgress),
    ) -> Result<()> {
        let t0 = Instant::now();
        let stats = stream(gpu, &self.jobs, opts, release, progress)?;
        let t = t0.elapsed().as_secs_f64();
        let total: u64 = self.jobs.iter().map(|j| j.len).sum();
        log::debug!(
            "upload: fill {:.1} ms for {} buffers, {:.1} MiB ({:.2} GB/s; {} threads, {} waves \
             through {} staging buffers; {:.1} ms blocked on the GPU)",
            t * 1e3,
            self.jobs.len(),
            total as f64 / (1 << 20) as f64,
            total as f64 / t.max(1e-9) / 1e9,
            stats.threads,
            stats.waves,
            stats.staging_buffers,
            stats.gpu_wait.as_secs_f64() * 1e3,
        );
        gpu.check_lost()
    }
}

impl GpuWeights {
    /// Uploads every tensor of `w`: [`GpuWeights::plan`], then [`PendingUpload::stream`].
    ///
    /// Errors: those of both.
    pub fn upload(
        gpu: &GpuContext,
        w: &Rwkv7Weights,
        limit: Option<u64>,
        opts: &UploadOptions,
        release: &(dyn Fn(&[u8]) + Sync),
        progress: &mut dyn FnMut(UploadProgress),
    ) -> Result<Self> {
        let (weights, pending) = Self::plan(gpu, w, limit)?;
        pending.stream(gpu, opts, release, progress)?;
        Ok(weights)
    }

    /// Checks limits and creates every weight buffer, unfilled; what fills them is
    /// returned for [`PendingUpload::stream`]. The buffers may be bound (a graph built)
    /// before they are filled, as long as no GPU work using them is submitted first.
    /// Converts only what cannot be streamed (packed vectors, `[in, out]` matrices).
    ///
    /// Errors: [`EngineError::TooLarge`] naming the tensor when the weights exceed
    /// `limit` bytes or a tensor the device's binding limit (nothing is copied yet);
    /// [`EngineError::Op`] for a tensor whose bytes do not match its shape.
    pub fn plan<'a>(
        gpu: &GpuContext,
        w: &Rwkv7Weights<'a>,
        limit: Option<u64>,
    ) -> Result<(Self, PendingUpload<'a>)> {
        let t0 = Instant::now();
        let cfg = w.config;
        let c = cfg.n_embd;
        let mut up = Planner {
            gpu,
            limit: limit.unwrap_or(u64::MAX),
            bytes: 0,
            types: Vec::new(),
            jobs: Vec::new(),
        };
        let emb = up.chunked(&w.emb)?;
        let head = up.chunked(&w.head)?;
        let mut g = vec![0f32; GlobalVecs::LEN * c];
        put_vec(&mut g, c, GlobalVecs::LN0, &w.ln0.weight)?;
        put_vec(&mut g, c, GlobalVecs::LN0 + 1, &w.ln0.bias)?;
        put_vec(&mut g, c, GlobalVecs::LN_OUT, &w.ln_out.weight)?;
        put_vec(&mut g, c, GlobalVecs::LN_OUT + 1, &w.ln_out.bias)?;
        let g: Vec<u8> = bytemuck::cast_slice(&g).to_vec();
        let globals = up.buffer("globals", g.len(), Source::Owned(g));
        let mut layers = Vec::with_capacity(cfg.n_layer);
        for (l, b) in w.blocks.iter().enumerate() {
            let a = &b.att;
            let mut v = vec![0f32; LayerVecs::LEN * c];
            for (i, m) in [&a.x_r, &a.x_w, &a.x_k, &a.x_v, &a.x_a, &a.x_g]
                .into_iter()
                .enumerate()
            {
                put_vec(&mut v, c, LayerVecs::MIX + i, m)?;
            }
            put_vec(&mut v, c, LayerVecs::W0, &a.w0)?;
            put_vec(&mut v, c, LayerVecs::A0, &a.a0)?;
            if let Some(v0) = &a.v0 {
                put_vec(&mut v, c, LayerVecs::V0, v0)?;
            }
            put_vec(&mut v, c, LayerVecs::K_K, &a.k_k)?;
            put_vec(&mut v, c, LayerVecs::K_A, &a.k_a)?;
            put_vec(&mut v, c, LayerVecs::R_K, &a.r_k)?;
            put_vec(&mut v, c, LayerVecs::LN1, &b.ln1.weight)?;
            put_vec(&mut v, c, LayerVecs::LN1 + 1, &b.ln1.bias)?;
            put_vec(&mut v, c, LayerVecs::LN2, &b.ln2.weight)?;
            put_vec(&mut v, c, LayerVecs::LN2 + 1, &b.ln2.bias)?;
            put_vec(&mut v, c, LayerVecs::LN_X, &a.ln_x.weight)?;
            put_vec(&mut v, c, LayerVecs::LN_X + 1, &a.ln_x.bias)?;
            put_vec(&mut v, c, LayerVecs::FFN_X_K, &b.ffn.x_k)?;
            let v: Vec<u8> = bytemuck::cast_slice(&v).to_vec();
            up.bytes += v.len() as u64;
            let vecs = up.buffer(&format!("blk.{l}.vecs"), v.len(), Source::Owned(v));
            // The low-rank chains' first and second products, each set in one buffer.
            let mut firsts = vec![&a.w1, &a.a1, &a.g1];
            let mut seconds = vec![&a.w2, &a.a2, &a.g2];
            if let (Some(v1), Some(v2)) = (&a.v1, &a.v2) {
                firsts.push(v1);
                seconds.push(v2);
            }
            let mut firsts = up.group(&firsts)?.into_iter();
            let mut seconds = up.group(&seconds)?.into_iter();
            let missing = || EngineError::Op {
                op: "upload",
                what: format!("block {l}: a matrix went missing while grouping"),
            };
            // r, k, v read by one decode dispatch: one buffer.
            let mut rkv = up.group(&[&a.receptance, &a.key, &a.value])?.into_iter();
            let layer = GpuLayer {
                vecs,
                receptance: rkv.next().ok_or_else(missing)?,
                key: rkv.next().ok_or_else(missing)?,
                value: rkv.next().ok_or_else(missing)?,
                output: up.matrix(&a.output)?,
                w1: firsts.next().ok_or_else(missing)?,
                a1: firsts.next().ok_or_else(missing)?,
                g1: firsts.next().ok_or_else(missing)?,
                v1: firsts.next(),
                w2: seconds.next().ok_or_else(missing)?,
                a2: seconds.next().ok_or_else(missing)?,
                g2: seconds.next().ok_or_else(missing)?,
                v2: seconds.next(),
                ffn_key: up.matrix(&b.ffn.key)?,
                ffn_value: up.matrix(&b.ffn.value)?,
            };
            layers.push(layer);
        }
        log::debug!(
            "upload: plan {:.1} ms ({} buffers)",
            t0.elapsed().as_secs_f64() * 1e3,
            up.jobs.len()
        );
        let weights = GpuWeights {
            config: cfg,
            emb,
            head,
            globals,
            layers,
            bytes: up.bytes,
            types: up.types,
        };
        Ok((weights, PendingUpload { jobs: up.jobs }))
    }
}
