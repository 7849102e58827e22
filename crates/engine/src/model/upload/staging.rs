//! The staging ring of an upload (see `upload.rs`'s module doc): worker threads fill
//! mapped staging buffers a wave at a time from the file; this thread copies each full
//! wave into the destination buffers on the GPU and maps the buffer again.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Instant;

use super::{fill, pieces, Job, Piece, UploadOptions, UploadProgress};
use crate::error::{EngineError, Result};
use crate::format::FileBytes;
use crate::gpu::GpuContext;

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
pub(super) struct FillStats {
    pub threads: usize,
    pub waves: usize,
    pub staging_buffers: usize,
    /// Time the coordinator spent blocked on the GPU for a free staging buffer.
    pub gpu_wait: std::time::Duration,
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
pub(super) fn stream(
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
    let mut st = Staging::new(gpu, jobs, opts, wave_bytes, &pieces, threads);
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
        wave_bytes: u64,
        pieces: &[Piece],
        threads: usize,
    ) -> Self {
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
