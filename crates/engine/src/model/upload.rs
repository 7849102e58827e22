//! Streaming the planned weights to the GPU (the plan: [`super::gpu_weights`]).
//!
//! 1. **Plan** (this thread, milliseconds): walk the tensors in model order, check the
//!    memory budget and the binding limit, create every destination buffer (device memory,
//!    not mapped) and list what fills it: bytes of the file, rows of the file decoded to
//!    F16, or bytes built on the CPU (packed vectors, transposed LoRA matrices).
//! 2. **Fill** (`threads` workers; this thread coordinates): tensors are cut into pieces
//!    of at most [`UploadOptions::piece_bytes`], pieces packed into waves, one wave per
//!    reusable staging buffer (`MAP_WRITE | COPY_SRC`, [`UploadOptions::wave_bytes`]).
//!    Workers copy or decode their piece from the file mapping into the mapped staging
//!    buffer (read from the file with `pread`, not the mapping: `FileBytes`) and drop the
//!    piece's file pages from the resident set (`release`). When a
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

mod staging;

use std::sync::Arc;
use std::time::Instant;

use super::host_embedding::HostEmbedding;
use crate::error::{EngineError, Result};
use crate::format::{DType, FileBytes};
use crate::gpu::GpuContext;

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
    /// Worker threads filling staging memory; 0: `RWKV_UPLOAD_THREADS` (tuning runs:
    /// `Tuning::upload_threads`) or the machine's parallelism, at most 8.
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
pub(crate) enum Source<'a> {
    /// Bytes of the file mapping, read from the file as they are (and released after).
    File(&'a [u8]),
    /// Rows of `n_in` values of a non-native encoding in the file, decoded to F16.
    Decode {
        dtype: DType,
        src: &'a [u8],
        n_in: usize,
    },
    /// Bytes built while planning (packed vectors, transposed matrices).
    Owned(Vec<u8>),
    /// Rows of `n_in` values of an encoding the kernels read whose blocks lie otherwise
    /// on the GPU than in the file (Q6_K, Q8_0: [`crate::ops::gpu_layout`]), laid out as
    /// they are copied.
    Spread {
        dtype: DType,
        src: &'a [u8],
        n_in: usize,
    },
}

impl Source<'_> {
    /// Bytes the source fills on the GPU, given `n` rows of `n_in` values (`Decode`'s
    /// F16 rows).
    pub(crate) fn gpu_len(&self, n: usize, n_in: usize) -> usize {
        match self {
            Source::File(b) => b.len(),
            Source::Owned(b) => b.len(),
            // F16 out: 2 bytes a value.
            Source::Decode { .. } => n * n_in * 2,
            Source::Spread { dtype, src, n_in } => {
                let (file, gpu) = spread_rows(*dtype, *n_in);
                src.len() / file * gpu
            }
        }
    }
}

/// Bytes of a row of `n_in` values of `dtype` in the file and on the GPU
/// ([`crate::ops::gpu_layout::relaid_rows`]; the planner makes `Spread` sources only of
/// such rows, (1, 1) keeps the arithmetic defined otherwise).
fn spread_rows(dtype: DType, n_in: usize) -> (usize, usize) {
    crate::ops::gpu_layout::relaid_rows(dtype, n_in).unwrap_or((1, 1))
}

/// One destination range and what fills it.
pub(crate) struct Job<'a> {
    pub(crate) name: String,
    pub(crate) buffer: wgpu::Buffer,
    /// Where the tensor starts in `buffer` (0, or its place in a group buffer).
    pub(crate) dst_off: u64,
    /// Bytes of the tensor; its range is this padded with zeros to `span` bytes.
    pub(crate) len: u64,
    pub(crate) span: u64,
    pub(crate) source: Source<'a>,
}

/// Bytes `[off, off + len)` of job `job`'s buffer; `len` and `off` are multiples of 4
/// (the copy alignment), and a decoded piece holds whole rows.
#[derive(Debug, Clone, Copy)]
struct Piece {
    job: usize,
    off: u64,
    len: u64,
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
            // Whole rows (a multiple of 4 bytes on the GPU).
            Source::Spread { dtype, n_in, .. } => {
                let row = spread_rows(dtype, n_in).1 as u64;
                (piece / row).max(1) * row
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
    bytes: &(dyn FileBytes + Sync),
) -> Result<()> {
    let off = off as usize;
    let n = view.len();
    let (raw, from_file) = match &job.source {
        Source::File(b) => (Some(*b), true),
        Source::Owned(b) => (Some(b.as_slice()), false),
        Source::Decode { .. } | Source::Spread { .. } => (None, false),
    };
    let written = match (&job.source, raw) {
        (_, Some(b)) => {
            let end = (off + n).min(b.len());
            let part = b.get(off.min(end)..end).unwrap_or(&[]);
            if !part.is_empty() {
                if from_file {
                    // Read from the file, not its mapping: a file cut short meanwhile is an
                    // error here, not a SIGBUS (`ModelFile::read_into`).
                    let mut dst = view.slice(..part.len());
                    let len = dst.len();
                    let ptr = dst.as_raw_element_ptr().as_ptr();
                    // SAFETY: `ptr`/`len` are this worker's exclusive, live mapped range of a
                    // staging buffer (wgpu zero-fills it, so every byte is initialised); the
                    // slice lives only for the read, which writes it and never reads it.
                    let dst = unsafe { std::slice::from_raw_parts_mut(ptr, len) };
                    bytes.read(part, dst)?;
                    bytes.release(part);
                } else {
                    view.slice(..part.len()).copy_from_slice(part);
                }
            }
            part.len()
        }
        (Source::Decode { dtype, src, n_in }, None) => {
            let row_out = n_in * 2;
            let rows_total = job.len as usize / row_out.max(1);
            let r0 = off / row_out.max(1);
            let r1 = ((off + n) / row_out.max(1)).min(rows_total);
            let mut out = vec![0u8; r1.saturating_sub(r0) * row_out];
            decode_rows(&job.name, *dtype, src, *n_in, r0, &mut out, bytes)?;
            if !out.is_empty() {
                view.slice(..out.len()).copy_from_slice(&out);
            }
            out.len()
        }
        (Source::Spread { dtype, src, n_in }, None) => {
            let (file, gpu) = spread_rows(*dtype, *n_in);
            let r0 = (off / gpu).min(src.len() / file);
            let r1 = ((off + n) / gpu).min(src.len() / file);
            // Laid out in host memory, then copied in one sequential run: the staging view
            // is write-combined memory, where the layout's scattered and repeated writes
            // (zeroed gaps, Q8_0's scales apart from their runs) would each cost a bus write.
            let mut out = vec![0u8; (r1 - r0) * gpu];
            spread_rows_into(*dtype, src, *n_in, r0, &mut out, bytes)?;
            if !out.is_empty() {
                view.slice(..out.len()).copy_from_slice(&out);
            }
            out.len()
        }
        (_, None) => 0,
    };
    if written < n {
        // Staging buffers are reused: the padding must be written, not assumed zero.
        view.slice(written..).fill(0);
    }
    Ok(())
}

/// Rows `r0..` of a [`Source::Decode`] (as many as `dst` holds, `n_in` F16 values each)
/// decoded from the file into `dst`. Releases the file pages it read.
fn decode_rows(
    name: &str,
    dtype: DType,
    src: &[u8],
    n_in: usize,
    r0: usize,
    dst: &mut [u8],
    bytes: &(dyn FileBytes + Sync),
) -> Result<()> {
    let r1 = r0 + dst.len() / (n_in * 2).max(1);
    let row_src = dtype.bytes_for(n_in).ok_or_else(|| EngineError::Op {
        op: "upload",
        what: format!("`{name}`: rows of {n_in} are not whole {dtype} blocks"),
    })?;
    let part = src
        .get(r0 * row_src..r1 * row_src)
        .ok_or_else(|| EngineError::Op {
            op: "upload",
            what: format!("`{name}`: rows {r0}..{r1} past the tensor's end"),
        })?;
    let mut raw = vec![0u8; part.len()];
    bytes.read(part, &mut raw)?;
    let mut f = vec![0f32; (r1 - r0) * n_in];
    crate::quant::dequantize(dtype, &raw, &mut f)?;
    for (d, v) in dst.chunks_exact_mut(2).zip(&f) {
        d.copy_from_slice(&half::f16::from_f32(*v).to_le_bytes());
    }
    bytes.release(part);
    Ok(())
}

/// Rows `r0..` of a [`Source::Spread`] (as many as `dst` holds) laid out from the file
/// into `dst` ([`crate::ops::gpu_layout::fill_gpu_layout`]). Releases the pages it read.
fn spread_rows_into(
    dtype: DType,
    src: &[u8],
    n_in: usize,
    r0: usize,
    dst: &mut [u8],
    bytes: &(dyn FileBytes + Sync),
) -> Result<()> {
    let (file, gpu) = spread_rows(dtype, n_in);
    let r1 = r0 + dst.len() / gpu;
    let part = &src[(r0 * file).min(src.len())..(r1 * file).min(src.len())];
    let mut raw = vec![0u8; part.len()];
    bytes.read(part, &mut raw)?;
    crate::ops::gpu_layout::fill_gpu_layout(dtype, n_in, &raw, dst);
    bytes.release(part);
    Ok(())
}

/// Rows `r0..` of `source` (`n_rows` rows of `n_in` values; as many as `dst` holds, rows
/// of `gpu_row` bytes) as the GPU lays them out, into `dst`: what the staging copy of
/// those rows would hold, for a matrix kept in host memory.
fn host_rows(
    name: &str,
    source: &Source,
    (n_rows, n_in, gpu_row): (usize, usize, usize),
    r0: usize,
    dst: &mut [u8],
    bytes: &(dyn FileBytes + Sync),
) -> Result<()> {
    let r1 = r0 + dst.len() / gpu_row.max(1);
    match source {
        Source::File(b) => {
            let row = b.len() / n_rows.max(1);
            let part = &b[r0 * row..r1 * row];
            bytes.read(part, dst)?;
            bytes.release(part);
        }
        Source::Owned(b) => dst.copy_from_slice(&b[r0 * gpu_row..r1 * gpu_row]),
        Source::Decode { dtype, src, .. } => decode_rows(name, *dtype, src, n_in, r0, dst, bytes)?,
        Source::Spread { dtype, src, .. } => spread_rows_into(*dtype, src, n_in, r0, dst, bytes)?,
    }
    Ok(())
}

/// A matrix kept in host memory (the embedding: [`HostEmbedding`]) and what fills it.
pub(crate) struct HostJob<'a> {
    pub(crate) target: Arc<HostEmbedding>,
    pub(crate) source: Source<'a>,
}

impl HostJob<'_> {
    /// Reads and lays out every row (on up to 4 threads), then stores them in the target.
    fn run(&self, bytes: &(dyn FileBytes + Sync)) -> Result<()> {
        let t = &self.target;
        let len = self.source.gpu_len(t.n_rows, t.n_in);
        let gpu_row = len / t.n_rows.max(1);
        let mut out = vec![0u8; len];
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(4);
        let per = t.n_rows.div_ceil(threads).max(1);
        let shape = (t.n_rows, t.n_in, gpu_row);
        std::thread::scope(|s| {
            let parts: Vec<_> = out
                .chunks_mut((per * gpu_row).max(1))
                .enumerate()
                .map(|(i, dst)| {
                    s.spawn(move || host_rows(&t.name, &self.source, shape, i * per, dst, bytes))
                })
                .collect();
            parts.into_iter().try_for_each(|p| {
                p.join()
                    .map_err(|_| EngineError::gpu("filling the host embedding panicked"))?
            })
        })?;
        t.set(out, gpu_row)
    }
}

/// Destination buffers created but not yet filled: what [`super::gpu_weights::GpuWeights::plan`] leaves for
/// [`PendingUpload::stream`].
pub struct PendingUpload<'a> {
    pub(crate) jobs: Vec<Job<'a>>,
    /// Matrices kept in host memory, filled beside the copies.
    pub(crate) host: Vec<HostJob<'a>>,
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
        bytes: &(dyn FileBytes + Sync),
        progress: &mut dyn FnMut(UploadProgress),
    ) -> Result<()> {
        let t0 = Instant::now();
        let (stats, host) = std::thread::scope(|s| {
            let host = std::thread::Builder::new()
                .name("rwkv-host-rows".into())
                .spawn_scoped(s, || self.host.iter().try_for_each(|h| h.run(bytes)))
                .map_err(|e| EngineError::gpu(format!("cannot start a load thread: {e}")))?;
            let stats = staging::stream(gpu, &self.jobs, opts, bytes, progress);
            let host = host
                .join()
                .map_err(|_| EngineError::gpu("filling the host embedding panicked"))?;
            Ok::<_, EngineError>((stats, host))
        })?;
        let stats = stats?;
        host?;
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
