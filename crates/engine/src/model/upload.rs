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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

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
        Source::Decode { .. } => (None, false),
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
            let mut raw = vec![0u8; part.len()];
            bytes.read(part, &mut raw)?;
            let mut f = vec![0f32; r1.saturating_sub(r0) * n_in];
            crate::quant::dequantize(*dtype, &raw, &mut f)?;
            let h: Vec<half::f16> = f.iter().map(|&v| half::f16::from_f32(v)).collect();
            let out: &[u8] = bytemuck::cast_slice(&h);
            if !out.is_empty() {
                view.slice(..out.len()).copy_from_slice(out);
            }
            bytes.release(part);
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
    bytes: &(dyn FileBytes + Sync),
) {
    loop {
        let next = match rx.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        let Ok(mut work) = next else { return };
        let result = match jobs.get(work.piece.job) {
            _ if cancel.load(Ordering::Relaxed) => Ok(()),
            Some(job) => fill(job, work.piece.off, &mut work.view, bytes),
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
    bytes: &(dyn FileBytes + Sync),
    progress: &mut dyn FnMut(UploadProgress),
) -> Result<FillStats> {
    let wave_bytes = opts.wave_bytes.max(16).next_multiple_of(16);
    let piece_bytes = opts.piece_bytes.clamp(16, wave_bytes);
    let threads = match opts.threads {
        0 => gpu
            .tuning
            .upload_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(4, |n| n.get().min(8))),
        n => n,
    };
    let pieces = pieces(jobs, piece_bytes);
    let mut st = Staging::new(gpu, jobs, opts, &pieces, threads);
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
                .spawn_scoped(s, move || worker(jobs, rx, tx, cancel, bytes))
                .map_err(|e| EngineError::gpu(format!("upload: cannot start a thread: {e}")))?;
        }
        drop(done_tx);
        let mut next = pieces.into_iter().peekable();
        let result = (|| -> Result<()> {
            loop {
                st.reclaim()?;
                st.start_waves(&mut next, &work_tx)?;
                if st.active > 0 {
                    let d = done_rx
                        .recv()
                        .map_err(|_| EngineError::gpu("upload: the worker threads stopped"))?;
                    st.piece_done(d, next.peek().is_some(), progress)?;
                } else if next.peek().is_some() {
                    st.wait_oldest()?;
                } else {
                    return Ok(());
                }
            }
        })();
        if result.is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        st.stats.staging_buffers = st.buffers.len();
        // Dropping `work_tx` (end of scope) stops the workers; the scope joins them.
        drop(work_tx);
        result
    })?;
    Ok(st.stats)
}

/// The coordinator's side of an upload: a ring of at most `ring` mapped staging buffers of
/// up to `wave_bytes`, each filled by the workers a wave at a time, then copied on the GPU
/// and mapped again; the progress of the jobs; the figures for the log.
struct Staging<'a> {
    gpu: &'a GpuContext,
    jobs: &'a [Job<'a>],
    wave_bytes: u64,
    ring: usize,
    /// Staging bytes still to hand out: a small model gets a staging buffer its size.
    unstaged: u64,
    buffers: Vec<wgpu::Buffer>,
    /// Mapped staging buffers ready for a wave.
    free: Vec<usize>,
    /// Submitted staging buffers waiting to be mapped again, oldest first.
    pending: VecDeque<(usize, wgpu::SubmissionIndex)>,
    mapped_tx: mpsc::Sender<(usize, std::result::Result<(), wgpu::BufferAsyncError>)>,
    mapped_rx: mpsc::Receiver<(usize, std::result::Result<(), wgpu::BufferAsyncError>)>,
    waves: Vec<Option<Wave>>,
    /// Waves handed to the workers and not yet copied.
    active: usize,
    /// Pieces of each job not yet filled.
    left_per_job: Vec<usize>,
    prog: UploadProgress,
    stats: FillStats,
}

impl<'a> Staging<'a> {
    fn new(
        gpu: &'a GpuContext,
        jobs: &'a [Job<'a>],
        opts: &UploadOptions,
        pieces: &[Piece],
        threads: usize,
    ) -> Self {
        let wave_bytes = opts.wave_bytes.max(16).next_multiple_of(16);
        let mut left_per_job = vec![0usize; jobs.len()];
        for p in pieces {
            left_per_job[p.job] += 1;
        }
        let (mapped_tx, mapped_rx) = mpsc::channel();
        Staging {
            gpu,
            jobs,
            wave_bytes,
            ring: (opts.in_flight_bytes / wave_bytes).max(2) as usize,
            unstaged: pieces.iter().map(|p| p.len.next_multiple_of(16)).sum(),
            buffers: Vec::new(),
            free: Vec::new(),
            pending: VecDeque::new(),
            mapped_tx,
            mapped_rx,
            waves: Vec::new(),
            active: 0,
            left_per_job,
            prog: UploadProgress {
                tensors_done: 0,
                tensors_total: jobs.len(),
                bytes_done: 0,
                bytes_total: jobs.iter().map(|j| j.len).sum(),
            },
            stats: FillStats {
                threads,
                ..Default::default()
            },
        }
    }

    fn new_buffer(&self, size: u64) -> wgpu::Buffer {
        self.gpu.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("upload staging"),
            size,
            usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: true,
        })
    }

    /// Takes back the staging buffers mapped again since the last call (polling the GPU
    /// when none is free).
    fn reclaim(&mut self) -> Result<()> {
        if self.free.is_empty() && !self.pending.is_empty() {
            self.gpu
                .device
                .poll(wgpu::PollType::Poll)
                .map_err(|e| EngineError::gpu(format!("upload: polling the GPU: {e}")))?;
        }
        while let Ok((id, r)) = self.mapped_rx.try_recv() {
            r.map_err(|e| EngineError::gpu(format!("upload: mapping a staging buffer: {e}")))?;
            self.pending.retain(|(i, _)| *i != id);
            self.free.push(id);
        }
        Ok(())
    }

    /// Starts waves while there are pieces and staging buffers for them: each takes the
    /// next pieces that fit one buffer, and hands them to the workers.
    fn start_waves(
        &mut self,
        next: &mut std::iter::Peekable<std::vec::IntoIter<Piece>>,
        work_tx: &mpsc::Sender<Work>,
    ) -> Result<()> {
        while let Some(first) = next.peek() {
            let need = first.len.next_multiple_of(16);
            let id = if let Some(id) = self.free.pop() {
                id
            } else if self.buffers.len() < self.ring {
                let b = self.new_buffer(self.wave_bytes.min(self.unstaged).max(need));
                self.buffers.push(b);
                self.buffers.len() - 1
            } else {
                break;
            };
            if self.buffers[id].size() < need {
                // One piece larger than a wave (a decoded row, with tiny waves).
                self.buffers[id] = self.new_buffer(need);
            }
            let cap = self.buffers[id].size();
            let wave = self.waves.len();
            let mut w = Wave {
                staging: id,
                copies: Vec::new(),
                left: 0,
            };
            let mut at = 0u64;
            while let Some(p) = next.next_if(|p| at + p.len.next_multiple_of(16) <= cap) {
                let view = self.buffers[id]
                    .slice(at..at + p.len)
                    .get_mapped_range_mut()
                    .map_err(|e| {
                        EngineError::gpu(format!(
                            "upload: staging range of `{}`: {e}",
                            self.jobs[p.job].name
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
                self.unstaged -= p.len.next_multiple_of(16);
            }
            self.waves.push(Some(w));
            self.active += 1;
            self.stats.waves += 1;
        }
        Ok(())
    }

    /// A worker filled `d`'s piece: the progress, and — its wave's last piece — the wave's
    /// copies (`more`: pieces remain, so the buffer is mapped again for another wave).
    fn piece_done(
        &mut self,
        d: Done,
        more: bool,
        progress: &mut dyn FnMut(UploadProgress),
    ) -> Result<()> {
        d.result?;
        let job = &self.jobs[d.piece.job];
        self.prog.bytes_done += d.piece.len.min(job.len.saturating_sub(d.piece.off));
        self.left_per_job[d.piece.job] -= 1;
        if self.left_per_job[d.piece.job] == 0 {
            self.prog.tensors_done += 1;
            progress(self.prog);
        }
        let Some(w) = self.waves.get_mut(d.wave).and_then(|w| w.as_mut()) else {
            return Err(EngineError::gpu("upload: piece of an unknown wave"));
        };
        w.left -= 1;
        if w.left == 0 {
            let Some(w) = self.waves[d.wave].take() else {
                return Err(EngineError::gpu("upload: wave finished twice"));
            };
            self.active -= 1;
            self.submit(w, more);
        }
        Ok(())
    }

    /// Unmaps wave `w`'s staging buffer and submits its copies; maps it again when `more`
    /// pieces remain.
    fn submit(&mut self, w: Wave, more: bool) {
        let buf = &self.buffers[w.staging];
        buf.unmap();
        let mut enc = self
            .gpu
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("upload"),
            });
        for (p, at) in &w.copies {
            let job = &self.jobs[p.job];
            enc.copy_buffer_to_buffer(buf, *at, &job.buffer, job.dst_off + p.off, p.len);
        }
        let index = self.gpu.queue.submit([enc.finish()]);
        if more {
            let tx = self.mapped_tx.clone();
            let id = w.staging;
            buf.map_async(wgpu::MapMode::Write, .., move |r| {
                let _ = tx.send((id, r));
            });
            self.pending.push_back((id, index));
        }
    }

    /// Every staging buffer is on its way through the GPU: waits for the oldest (its map
    /// callback runs inside the poll).
    fn wait_oldest(&mut self) -> Result<()> {
        let Some((_, index)) = self.pending.front().cloned() else {
            return Err(EngineError::gpu("upload: no staging buffer to wait for"));
        };
        let t = Instant::now();
        self.gpu
            .device
            .poll(wgpu::PollType::Wait {
                submission_index: Some(index),
                timeout: None,
            })
            .map_err(|e| EngineError::gpu(format!("upload: waiting for the GPU: {e}")))?;
        self.stats.gpu_wait += t.elapsed();
        Ok(())
    }
}

/// Destination buffers created but not yet filled: what [`super::gpu_weights::GpuWeights::plan`] leaves for
/// [`PendingUpload::stream`].
pub struct PendingUpload<'a> {
    pub(crate) jobs: Vec<Job<'a>>,
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
        let stats = stream(gpu, &self.jobs, opts, bytes, progress)?;
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
