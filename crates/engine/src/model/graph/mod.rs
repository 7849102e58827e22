//! The RWKV-7 forward pass as a list of named dispatches over B sequences × T tokens.
//!
//! Activations live in one f32 buffer at static offsets ([`Regions`], each `t_cap` rows),
//! so every bind group is built once; a pass writes the token metadata and [`Dims`] and
//! records the nodes into one compute pass. Per layer (RWKV_x070, numbered as below):
//!
//! 1. `xx = ln1(x)`; 2. six lerps with the previous token (state for the first);
//! 3. save the shift state (1–3: one `ln_shift` dispatch); 4. `r, k, v = W xr, W xk, W xv`;
//! 5. `w = w0 + tanh(xw W1) W2`; 6. `a = σ(a0 + xa A1 A2)`; 7. `g = σ(xg G1) G2`;
//! 8. (layer > 0) `v_mix = σ(v0 + xv V1 V2)`; 9. kk, k, v residual, decay;
//! 10. WKV recurrence; 11. GroupNorm + bonus + gate; 12. `x += Wo o`;
//! 13. `xx = ln2(x)`; 14. lerp; 15. save shift (13–15: `ln_shift`); 16. `h = relu(Wk xk)²`; 17. `x += Wv h`.
//!
//! Then the head: gather the wanted rows, `ln_out`, logits in row chunks of the head.
//!
//! Passes of at most [`SMALL_T`] tokens (decode) run other kernels, picked per pass from
//! each node's variants: `ln_shift` over channel slices, r/k/v and each set of low-rank
//! products as one `matvec_group` dispatch (in a one-token pass without adapters the
//! first products of 5–8 and r/k/v together, `att.lora1+rkv`), 9–11 as one `wkv_fused`;
//! and one-token passes fold every `ln_shift` but the first block's into a neighbour:
//! 13–15 into the channel-mix key's prologue (8-bit x) or else the time-mix output's last
//! workgroups, the next block's 1–3 into the channel-mix value's last workgroups
//! (`ops::matmul::ln_fuse`). Larger passes
//! (prefill) run the tiled products — on tensor cores where the adapter has them, with k
//! split for the C-row products — and the per-op WKV kernels.
//!
//! With LoRA adapters active (`model::lora`), each adapted product of a block
//! (r, k, v, output, channel-mix key and value) is preceded by the adapters' first
//! products `h = s · A x` and adds `B h` in its own epilogue (`time_mix.rs`, `channel_mix.rs`, `lora.rs`); in a
//! one-token pass the output, channel-mix key and value products make their h in their
//! own dispatch instead (`lora.rs`, planned by `hplan.rs`).
//!
//! The files, top to bottom, each using only those after it: `pass` (recording a pass) ·
//! `build` (the [`Graph`]: its buffers, and its nodes block by block) · `time_mix` (steps
//! 1–12) · `channel_mix` (13–17) · `lora` (the adapters' products) · `blocks` (what a
//! block's builders share) · `group` (decode grouping) · `hplan` (the one-token LoRA h
//! sets) · `regions` (activation offsets) · `state_parts` (the state buffers, by layer).

mod blocks;
mod build;
mod channel_mix;
mod group;
mod hplan;
mod lora;
mod pass;
mod regions;
mod state_parts;
mod time_mix;

pub use build::{DispatchLabel, Graph};
pub use regions::Regions;
pub use state_parts::{StateDownload, StatePart, StateParts};
