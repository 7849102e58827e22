//! Where the states live: the slots' layers split over as few storage buffers as the
//! device's binding limit allows ([`StateParts`]). Part `p` holds layers `layers` of every
//! slot, `slot_len` f32 a slot; a slot's whole state (its host view, layout 1) is the
//! parts' slices one after the other — the same bytes as one buffer of whole slots, which
//! is what one part is. A 2.9B model's state is 21.6 MB: 99 fit one 2 GiB binding, 128
//! take two parts. Each node binds the part of its layer.

use std::ops::Range;
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use crate::config::Rwkv7Config;
use crate::error::{EngineError, Result};
use crate::gpu::{buffer, GpuContext};

/// One buffer of state slices: layers `layers` of every slot.
pub struct StatePart {
    pub buffer: wgpu::Buffer,
    pub layers: Range<usize>,
    /// f32 of one slot's slice in this part.
    pub slot_len: usize,
    /// f32 offset of the slice in a slot's whole state.
    pub at: usize,
}

/// The state buffers of a graph, by layer.
pub struct StateParts {
    pub parts: Vec<StatePart>,
    per_layer: usize,
    /// Host-readable buffers of one whole state each, made on first use and kept (up to
    /// [`READBACK_KEEP`]) for the next read: a server spilling cached states reads many.
    readback: ReadbackPool,
}

/// Read-back buffers kept for reuse (shared with the downloads in flight, which hand
/// theirs back).
type ReadbackPool = Arc<Mutex<Vec<wgpu::Buffer>>>;

/// Most read-back buffers a [`StateParts`] keeps between reads.
const READBACK_KEEP: usize = 4;

impl StateParts {
    /// Buffers for `n_slots` states of `cfg`: the fewest parts (at least `min_parts`, from
    /// `Tuning::state_parts`) of whole layers whose slices of every slot each fit one
    /// binding.
    ///
    /// Errors: [`EngineError::TooLarge`] when one layer of `n_slots` states exceeds a binding.
    pub fn new(
        gpu: &GpuContext,
        cfg: &Rwkv7Config,
        n_slots: usize,
        min_parts: usize,
    ) -> Result<Self> {
        let per_layer = cfg.state_len_per_layer();
        let ranges = layout(
            cfg.n_layer,
            per_layer,
            n_slots,
            gpu.max_binding(),
            min_parts,
        )?;
        Ok(Self::from_ranges(gpu, ranges, per_layer, n_slots))
    }

    /// Buffers for `n_slots` states of `per_layer` f32 a layer, part `p` holding layers
    /// `ranges[p]` (consecutive, from 0).
    fn from_ranges(
        gpu: &GpuContext,
        ranges: Vec<Range<usize>>,
        per_layer: usize,
        n_slots: usize,
    ) -> Self {
        let parts = ranges
            .into_iter()
            .map(|layers| {
                let slot_len = layers.len() * per_layer;
                let bytes = (slot_len * n_slots.max(1)) as u64 * 4;
                StatePart {
                    buffer: buffer::storage(gpu, "states", bytes),
                    at: layers.start * per_layer,
                    layers,
                    slot_len,
                }
            })
            .collect();
        StateParts {
            parts,
            per_layer,
            readback: Arc::default(),
        }
    }

    /// The part holding layer `l` and the f32 offset of the layer's state in a slot's
    /// slice of it.
    pub fn of_layer(&self, l: usize) -> (&StatePart, usize) {
        let p = self
            .parts
            .iter()
            .find(|p| p.layers.contains(&l))
            .unwrap_or(&self.parts[self.parts.len() - 1]);
        (p, (l - p.layers.start) * self.per_layer)
    }

    /// GPU bytes of every part.
    pub fn bytes(&self) -> u64 {
        self.parts.iter().map(|p| p.buffer.size()).sum()
    }

    /// Zeroes slot `slot` in every part.
    pub fn clear(&self, enc: &mut wgpu::CommandEncoder, slot: usize) {
        for p in &self.parts {
            let len = p.slot_len as u64 * 4;
            enc.clear_buffer(&p.buffer, slot as u64 * len, Some(len));
        }
    }

    /// Copies slot `from` to slot `to` in every part, through `tmp` (at least one slot's
    /// largest slice: WebGPU forbids a copy within one buffer).
    pub fn copy_slot(
        &self,
        enc: &mut wgpu::CommandEncoder,
        from: usize,
        to: usize,
        tmp: &wgpu::Buffer,
    ) {
        for p in &self.parts {
            let len = p.slot_len as u64 * 4;
            enc.copy_buffer_to_buffer(&p.buffer, from as u64 * len, tmp, 0, len);
            enc.copy_buffer_to_buffer(tmp, 0, &p.buffer, to as u64 * len, len);
        }
    }

    /// Bytes of the largest slice of one slot (the scratch [`StateParts::copy_slot`] needs).
    pub fn largest_slice_bytes(&self) -> u64 {
        self.parts
            .iter()
            .map(|p| p.slot_len as u64 * 4)
            .max()
            .unwrap_or(4)
    }

    /// Copies the first `n_slots` states of `self` into `to` (a rebuild: the parts may split
    /// the layers differently), slot by slot where they do.
    pub fn copy_into(&self, enc: &mut wgpu::CommandEncoder, to: &StateParts, n_slots: usize) {
        for a in &self.parts {
            for b in &to.parts {
                let lo = a.layers.start.max(b.layers.start);
                let hi = a.layers.end.min(b.layers.end);
                if lo >= hi {
                    continue;
                }
                let len = ((hi - lo) * self.per_layer * 4) as u64;
                let same = a.layers == b.layers;
                if same {
                    // The same slices: one copy of every slot.
                    enc.copy_buffer_to_buffer(&a.buffer, 0, &b.buffer, 0, len * n_slots as u64);
                    continue;
                }
                let from_at = ((lo - a.layers.start) * self.per_layer * 4) as u64;
                let to_at = ((lo - b.layers.start) * self.per_layer * 4) as u64;
                for s in 0..n_slots as u64 {
                    enc.copy_buffer_to_buffer(
                        &a.buffer,
                        s * a.slot_len as u64 * 4 + from_at,
                        &b.buffer,
                        s * b.slot_len as u64 * 4 + to_at,
                        len,
                    );
                }
            }
        }
    }

    /// Reads slot `slot`'s whole state into `out` (`slot_len` f32: the parts' slices in
    /// order): one copy a part into the kept read-back buffer, one submit, one wait.
    ///
    /// Errors: `out` is not one state long; GPU read-back errors.
    pub fn read(&self, gpu: &GpuContext, slot: usize, out: &mut [f32]) -> Result<()> {
        self.read_with(gpu, slot, |view| {
            if view.len() != out.len() {
                return Err(EngineError::State {
                    what: format!(
                        "buffer holds {} values, a state has {}",
                        out.len(),
                        view.len()
                    ),
                });
            }
            out.copy_from_slice(view);
            Ok(())
        })
    }

    /// Slot `slot`'s whole state as a new vector, copied once from the mapped read-back
    /// (no zero fill first: a 2.9B model's state is 21.6 MB, and a server spills many).
    ///
    /// Errors: [`EngineError::OutputTooLarge`] when the allocation is refused; GPU
    /// read-back errors.
    pub fn read_vec(&self, gpu: &GpuContext, slot: usize) -> Result<Vec<f32>> {
        let n = self.slot_len();
        let mut v = crate::output::vec(|| format!("a state of {n} values"), n)?;
        self.read_with(gpu, slot, |view| {
            v.extend_from_slice(view);
            Ok(())
        })?;
        Ok(v)
    }

    /// f32 of one slot's whole state (every part's slice).
    pub fn slot_len(&self) -> usize {
        self.parts.iter().map(|p| p.slot_len).sum()
    }

    /// Copies slot `slot` of every part into a read-back buffer, waits, and hands `take`
    /// the mapped state as f32.
    fn read_with(
        &self,
        gpu: &GpuContext,
        slot: usize,
        take: impl FnOnce(&[f32]) -> Result<()>,
    ) -> Result<()> {
        let d = self.begin_download(gpu, slot);
        gpu.wait()?;
        d.finish_with(take)
    }

    /// Starts reading slot `slot`'s whole state back without waiting: its copy into a
    /// host-readable buffer is queued behind the work submitted so far, so the slot may be
    /// freed and reused at once (later passes run after the copy). The state is in the
    /// returned download, taken by [`StateDownload::finish`] on any thread.
    pub fn begin_download(&self, gpu: &GpuContext, slot: usize) -> StateDownload {
        let len = self.slot_len();
        let bytes = len as u64 * 4;
        let kept = self.readback.lock().ok().and_then(|mut p| p.pop());
        let staging = match kept {
            Some(b) if b.size() >= bytes => b,
            _ => buffer::readback(gpu, "state.readback", bytes),
        };
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        for p in &self.parts {
            let part = p.slot_len as u64 * 4;
            enc.copy_buffer_to_buffer(
                &p.buffer,
                slot as u64 * part,
                &staging,
                p.at as u64 * 4,
                part,
            );
        }
        gpu.queue.submit([enc.finish()]);
        let (tx, rx) = mpsc::channel();
        staging
            .slice(0..bytes)
            .map_async(wgpu::MapMode::Read, move |r| {
                let _ = tx.send(r);
            });
        StateDownload {
            buffer: staging,
            len,
            mapped: rx,
            device: gpu.device.clone(),
            pool: self.readback.clone(),
        }
    }

    /// Writes `data` (a whole state) into slot `slot`.
    pub fn write(&self, gpu: &GpuContext, slot: usize, data: &[f32]) {
        for p in &self.parts {
            let len = p.slot_len;
            gpu.queue.write_buffer(
                &p.buffer,
                (slot * len * 4) as u64,
                bytemuck::cast_slice(&data[p.at..p.at + len]),
            );
        }
    }
}

/// A state on its way to host memory ([`StateParts::begin_download`]): a queued copy
/// into a host-readable buffer being mapped.
pub struct StateDownload {
    buffer: wgpu::Buffer,
    /// f32 of the state.
    len: usize,
    mapped: mpsc::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>,
    device: wgpu::Device,
    pool: ReadbackPool,
}

impl StateDownload {
    /// Waits for the copy (polling the device itself, so it may run on a thread of its
    /// own while another drives the GPU) and returns the state (one slot's f32, layout 1).
    ///
    /// Errors: the device was lost or the mapping failed; [`EngineError::OutputTooLarge`]
    /// when the allocation is refused.
    pub fn finish(self) -> Result<Vec<f32>> {
        let n = self.len;
        let mut v = crate::output::vec(|| format!("a state of {n} values"), n)?;
        self.finish_with(|view| {
            v.extend_from_slice(view);
            Ok(())
        })?;
        Ok(v)
    }

    /// Waits for the mapping, hands `take` the mapped state, unmaps, and keeps the buffer
    /// for the next read (a buffer whose mapping failed is dropped).
    fn finish_with(self, take: impl FnOnce(&[f32]) -> Result<()>) -> Result<()> {
        let mapped = loop {
            match self.mapped.try_recv() {
                Ok(r) => break r,
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(EngineError::gpu("state read-back: the callback never ran"))
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
            self.device
                .poll(wgpu::PollType::wait_indefinitely())
                .map_err(|e| EngineError::gpu(format!("state read-back: waiting: {e}")))?;
            // Another thread's poll may be running the callback now.
            if let Ok(r) = self.mapped.recv_timeout(Duration::from_millis(1)) {
                break r;
            }
        };
        mapped.map_err(|e| EngineError::gpu(format!("state read-back: mapping failed: {e}")))?;
        let bytes = self.len as u64 * 4;
        let slice = self.buffer.slice(0..bytes);
        let r = match slice.get_mapped_range() {
            Ok(view) => match bytemuck::try_cast_slice::<u8, f32>(&view) {
                Ok(values) => take(values),
                // A mapping not 4-byte aligned (no driver seen gives one): through a copy.
                Err(_) => take(&bytemuck::pod_collect_to_vec::<u8, f32>(&view)),
            },
            Err(e) => Err(EngineError::gpu(format!(
                "state read-back: range failed: {e}"
            ))),
        };
        self.buffer.unmap();
        if let Ok(mut p) = self.pool.lock() {
            if p.len() < READBACK_KEEP {
                p.push(self.buffer);
            }
        }
        r
    }
}

/// The layers of each part: the fewest parts, at least `min_parts` and at most one a
/// layer, of nearly equal runs of whole layers, whose slices of `n_slots` states
/// (`per_layer` f32 a layer) each fit `max_binding` bytes.
///
/// Errors: [`EngineError::TooLarge`] when one layer of `n_slots` states does not fit.
pub fn layout(
    n_layer: usize,
    per_layer: usize,
    n_slots: usize,
    max_binding: u64,
    min_parts: usize,
) -> Result<Vec<Range<usize>>> {
    let layer_bytes = (per_layer * n_slots.max(1)) as u64 * 4;
    if layer_bytes > max_binding || n_layer == 0 {
        return Err(EngineError::TooLarge {
            what: format!(
                "states need {layer_bytes} bytes a layer for {n_slots} states in one binding; \
                 the device allows {max_binding}"
            ),
        });
    }
    let fits = (max_binding / layer_bytes) as usize; // layers a part holds
    let parts = n_layer.div_ceil(fits).max(min_parts).min(n_layer);
    let per = n_layer.div_ceil(parts);
    Ok((0..n_layer)
        .step_by(per)
        .map(|a| a..(a + per).min(n_layer))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A 2.9B model's states: 99 fit one 2 GiB binding, 128 take two parts of 16 layers;
    /// a forced minimum splits further; a layer too large for a binding is refused.
    #[test]
    fn parts_by_layer() {
        let per = 2 * 2560 + 40 * 64 * 64; // f32 a layer
        let two_gib = (2u64 << 30) - 1;
        assert_eq!(layout(32, per, 99, two_gib, 1).unwrap(), vec![0..32]);
        assert_eq!(
            layout(32, per, 128, two_gib, 1).unwrap(),
            vec![0..16, 16..32]
        );
        assert_eq!(
            layout(6, 100, 4, 1 << 20, 4).unwrap(),
            vec![0..2, 2..4, 4..6]
        );
        assert_eq!(
            layout(3, 100, 4, 1 << 20, 8).unwrap(),
            vec![0..1, 1..2, 2..3]
        );
        let e = layout(32, per, 10_000, two_gib, 1).unwrap_err().to_string();
        assert!(e.contains("a layer"), "{e}");
    }

    /// Whole states written into one layout read back the same from it, and after a
    /// rebuild's copy into another layout (one part → three, three → two, more slots);
    /// a cleared slot reads zeros, a copied slot its source; a short buffer is refused.
    #[test]
    fn states_survive_every_layout() {
        let gpu = crate::ops::testing::gpu();
        let (n_layer, per, slots) = (6, 40, 5);
        let state =
            |s: usize| -> Vec<f32> { (0..n_layer * per).map(|i| (s * 1000 + i) as f32).collect() };
        let whole: Range<usize> = 0..6;
        let one = StateParts::from_ranges(&gpu, vec![whole], per, slots);
        for s in 0..slots {
            one.write(&gpu, s, &state(s));
        }
        let three = StateParts::from_ranges(&gpu, vec![0..2, 2..4, 4..6], per, slots + 2);
        let two = StateParts::from_ranges(&gpu, vec![0..3, 3..6], per, slots + 3);
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        one.copy_into(&mut enc, &three, slots);
        gpu.queue.submit([enc.finish()]);
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        three.copy_into(&mut enc, &two, slots);
        gpu.queue.submit([enc.finish()]);
        let mut got = vec![0f32; n_layer * per];
        for parts in [&one, &three, &two] {
            for s in 0..slots {
                parts.read(&gpu, s, &mut got).unwrap();
                assert_eq!(got, state(s), "slot {s}, {} parts", parts.parts.len());
            }
        }
        let tmp = buffer::storage(&gpu, "tmp", two.largest_slice_bytes());
        let mut enc = gpu.device.create_command_encoder(&Default::default());
        two.clear(&mut enc, 1);
        two.copy_slot(&mut enc, 3, 6, &tmp);
        gpu.queue.submit([enc.finish()]);
        two.read(&gpu, 1, &mut got).unwrap();
        assert!(got.iter().all(|&v| v == 0.0));
        two.read(&gpu, 6, &mut got).unwrap();
        assert_eq!(got, state(3));
        // The vector read (the server's spills) reads the same through the kept buffer.
        assert_eq!(two.read_vec(&gpu, 6).unwrap(), state(3));
        assert_eq!(two.read_vec(&gpu, 0).unwrap(), state(0));
        let e = two.read(&gpu, 0, &mut got[1..]).unwrap_err().to_string();
        assert!(e.contains("a state has 240"), "{e}");
        assert_eq!(two.of_layer(4).1, per);
        assert_eq!(two.of_layer(4).0.layers, 3..6);
    }
}
